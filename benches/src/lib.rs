//! # benches: measuring roomd
//!
//! # Layout
//!
//! - [`recorded`]: games played step by step and logged as the room runner logs them
//!   (inputs for the rebuild and log-codec benches).
//! - [`loadgen`]: the load generator (open-loop schedule, HTTP/WS/TLS setup, game
//!   clients, HDR statistics, thresholds, HTML report; one module per concern);
//!   `src/bin/loadgen.rs` is its command line, `src/bin/loadgen_results.rs` generates
//!   `results.md` from its JSON reports.
//! - [`soak`]: the memory soak (thousands of short connect / play / disconnect cycles,
//!   server RSS sampled; one module per concern, reusing loadgen's sessions, sockets,
//!   `/proc` reads and error kinds); `src/bin/soak.rs` is its command line, `soak.sh`
//!   runs it against a fresh release roomd.
//! - [`limit`]: the reference "physical limit" server for tally fan-out;
//!   `src/bin/limit_server.rs` runs it.
//! - `benches/`: criterion benches (`engine`, `halli_galli`, `cockroach_poker`).
//! - `run.sh`: the standard scenarios against a release `roomd`, printed as one table.

pub mod limit;
pub mod loadgen;
pub mod recorded;
pub mod soak;
