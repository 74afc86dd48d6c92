//! Errors of the room-actor crate.

use thiserror::Error;

/// A store operation failed. Redis errors are converted to this at the trait boundary.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A write whose outcome is unknown: it timed out or its connection dropped after it
    /// was sent, so the store may or may not have applied it. Never a refusal: the caller
    /// finds out by reading back (or retrying an idempotent write).
    #[error("store outcome unknown: {0}")]
    Unknown(String),
    #[error("log conflict for {game_pk}: expected seq {expected}, got {got}")]
    Conflict { game_pk: String, expected: u64, got: u64 },
    /// This node no longer holds the room's lease (cluster mode).
    #[error("fenced: this node no longer owns the room")]
    Fenced,
    #[error("unknown game {0}")]
    UnknownGame(String),
    #[error("corrupt entry: {0}")]
    Corrupt(String),
    /// A stored value written by a newer roomd (format version `found`; this build reads
    /// up to `newest`): run a release that knows it, never guess.
    #[error("stored entry has format version {found}, this roomd reads versions 0 to {newest}: run a newer roomd")]
    UnsupportedFormat { found: u8, newest: u8 },
}

/// Rebuilding a room from its log failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RebuildError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("game {found} cannot be rebuilt as {expected}")]
    WrongGame { expected: String, found: String },
    #[error("state version changed from {logged} to {current}")]
    StateVersion { logged: u32, current: u32 },
    #[error("entry {seq}: {message}")]
    Entry { seq: u64, message: String },
}
