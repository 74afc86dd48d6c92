//! Criterion benches for halli_galli (being written).
fn main() {}
