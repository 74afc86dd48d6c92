//! Test tools every game must pass (`game-engine.md` §7), available to this crate's tests
//! and, through the `testing` feature, to room-actor's tests and the benches.
//!
//! - [`harness`]: the random-play harness (§7.2) with the leak check (§7.3) and timeout
//!   legality (§7.4) at every step;
//! - [`leak`]: finds a game's secrets in any JSON a viewer would receive (also used over
//!   the real WebSocket).
//!
//! This module measures apply time with `std::time::Instant`; that is a measurement of
//! the engine, not an input to it: no game code reads it.

pub mod harness;
pub mod leak;

pub use harness::{Failure, Harness, Report};
pub use leak::find_leaks;

#[cfg(test)]
mod selftest;
