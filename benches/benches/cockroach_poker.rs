//! Criterion benches for cockroach_poker (being written).
fn main() {}
