//! Errors of the engine crate.

use thiserror::Error;

/// An invariant broke or an input could not be processed. Games return this from
/// `setup`/`apply` instead of panicking; the runner rejects the input and logs it, and the
/// room lives on.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineError {
    /// A game invariant does not hold (a card went missing, a player is unknown, ...).
    #[error("invariant broken: {0}")]
    Invariant(String),
    /// `apply` received an input that `validate` would have refused.
    #[error("input not valid here: {0}")]
    InvalidInput(String),
    /// The player count is outside the game's range.
    #[error("{got} players cannot play this game (allowed {min}..={max})")]
    PlayerCount { got: usize, min: usize, max: usize },
    /// Stored state of an older `state_version` that this build cannot migrate.
    #[error("cannot migrate state from version {from} to {to}")]
    Migration { from: u32, to: u32 },
    /// Stored state or input that does not decode.
    #[error("cannot decode {what}: {message}")]
    Decode { what: &'static str, message: String },
}

impl EngineError {
    pub fn invariant(message: impl Into<String>) -> Self {
        EngineError::Invariant(message.into())
    }
}
