//! # engine: the pure rules of roomd
//!
//! No IO, no clock, no threads, no async: every function here is a pure function of its
//! arguments, so a seed plus an input log is a whole game (replays, failover, bug
//! reports). A test on `cargo tree` keeps tokio, actix and redis out of this crate.
//!
//! # Layout
//!
//! - [`game`]: the game contract ([`Game`]) and its vocabulary: players, actors, inputs,
//!   contexts, results, secrets, bot moves.
//! - [`option_meta`]: option metadata (Korean titles and labels) a game declares.
//! - [`options`]: validation of submitted options against that metadata.
//! - [`rng`]: sfc32 with 128-bit seeds, unbiased `int`, Fisher–Yates `shuffle`.
//! - [`turns`]: clockwise seat helpers.
//! - [`schedule`]: when the server acts on its own (deadlines, disconnect grace).
//! - [`registry`]: the catalog and run-time dispatch from a game id to its type.
//! - [`games`]: one folder per game (`tally` is the annotated example).
//! - `testing` (feature `testing`, always on in this crate's tests): the random-play
//!   harness and the leak checker.

pub mod error;
pub mod game;
pub mod games;
pub mod option_meta;
pub mod options;
pub mod registry;
pub mod rng;
pub mod schedule;
pub mod turns;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use error::EngineError;
pub use game::{
    Actor, Applied, BotMove, ChatPhrase, Ctx, Game, GameResult, Input, InputOf, NoSystemInput, PlayerId, PlayerRange,
    Reject, ResultReason, Secret, SetupCtx, ViewCtx,
};
pub use rng::{Rng, RngState, Seed};
