//! What passes between a [`FileStore`](super::FileStore) handle and the store thread: a
//! call ([`Op`]) with the channel for its answer ([`Out`]), and how a call fails inside a
//! batch ([`Fail`]). Apart so that the handle, the commit loop and each call's SQL name
//! the same types without importing one another.

use crate::error::StoreError;
use crate::info::RoomInfo;
use crate::log::{GameRecord, StoredGame};
use engine::PlayerId;
use tokio::sync::oneshot;

/// What a call asks of the store thread.
pub(super) enum Op {
    Begin { pk: String, start: Vec<u8> },
    Append { pk: String, seq: u64, body: Vec<u8> },
    Snapshot { pk: String, body: Vec<u8> },
    Finish { pk: String, ended_at: i64, players: Vec<PlayerId>, body: Vec<u8> },
    PutRoom { id: String, json: String, open: bool, now: i64 },
    Room { id: String },
    OpenRooms,
    Load { pk: String },
    Record { pk: String },
    GamesOf { player: PlayerId, before: i64, limit: usize },
    Purge { before: i64 },
    Probe { now: i64 },
}

/// What the thread answers.
pub(super) enum Out {
    Done,
    Purged(usize),
    Room(Option<RoomInfo>),
    Rooms(Vec<RoomInfo>),
    Game(Option<StoredGame>),
    Record(Option<GameRecord>),
    Records(Vec<GameRecord>),
}

pub(super) struct Job {
    pub(super) op: Op,
    pub(super) reply: oneshot::Sender<Result<Out, StoreError>>,
}

/// A failure inside a batch: `Refused` fails only its own call (a seq conflict, an
/// unknown game); `Db` aborts the whole batch (nothing of it is stored).
pub(super) enum Fail {
    Refused(StoreError),
    Db(rusqlite::Error),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Fail {
        Fail::Db(e)
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Fail {
        Fail::Refused(e)
    }
}
