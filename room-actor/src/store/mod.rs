//! Persistence behind a narrow trait of domain verbs. Three implementations: [`MemoryStore`]
//! (tests, `store.kind = memory`) here, the file store (the embedded node's default,
//! [`file`]) and the Redis store (cluster mode, [`redis`]). Both keep
//! entries bincode-encoded, so the codec runs in every mode.

pub mod file;
pub mod redis;

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::log::{decode, encode, GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use engine::PlayerId;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

pub type StoreFuture<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'static>>;

/// Who writes a room's log, decided where the room is made and handed to the store with
/// every append ([`RoomStore::append_as`]): the room never asks which it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The log's only writer by construction: the embedded node (one process), a room
    /// made on this node, tests.
    Sole,
    /// The holder of the room's ownership lease with this token (`node/epoch`, cluster
    /// mode): its appends are refused (`Fenced`) once another node took the lease.
    Lease(String),
}

impl Fence {
    /// The token the Redis append scripts check (`''`: none, for a sole writer).
    pub fn token(&self) -> &str {
        match self {
            Fence::Sole => "",
            Fence::Lease(token) => token,
        }
    }

    /// Whether a room that gives itself up (a stall past its bound) is restored afresh:
    /// a lease's room by the node's reconciler, under a new lease; nothing would restore
    /// a sole writer's room, which keeps trying instead.
    pub fn restored_if_given_up(&self) -> bool {
        matches!(self, Fence::Lease(_))
    }
}

/// Where rooms keep their logs and finished games.
pub trait RoomStore: Send + Sync + 'static {
    /// Records a game's start entry. Fails if the game already exists.
    fn begin(&self, start: StartEntry) -> StoreFuture<()>;
    /// Appends one entry; `entry.seq` must be exactly one more than the last.
    fn append(&self, game_pk: &str, entry: LogEntry) -> StoreFuture<()>;
    /// Appends as `fence`'s writer (the room's, given when it was restored): a lease's
    /// holder gets `Fenced` once the lease is no longer its own. Stores without leases
    /// (one process, where a room is its log's only writer) ignore it.
    fn append_as(&self, game_pk: &str, entry: LogEntry, _fence: &Fence) -> StoreFuture<()> {
        self.append(game_pk, entry)
    }
    /// The entry at `seq` of a game's log, if there is one: how a room resolves an append
    /// whose outcome is unknown (is the entry there, and is it the one it sent?).
    fn entry(&self, game_pk: &str, seq: u64) -> StoreFuture<Option<LogEntry>> {
        let load = self.load(game_pk);
        Box::pin(async move {
            let found = load.await?.and_then(|g| g.entries.into_iter().find(|e| e.seq == seq));
            Ok(found)
        })
    }
    /// Saves a room's public info (seats, status, game) so another node can restore it.
    fn put_room(&self, info: &RoomInfo) -> StoreFuture<()>;
    fn room(&self, room_id: &str) -> StoreFuture<Option<RoomInfo>>;
    /// Every saved room that has not finished, for listings and failover scans.
    fn open_rooms(&self) -> StoreFuture<Vec<RoomInfo>>;
    fn put_snapshot(&self, game_pk: &str, snapshot: Snapshot) -> StoreFuture<()>;
    /// The start entry, the latest snapshot and every entry; `None` if unknown (or expired).
    fn load(&self, game_pk: &str) -> StoreFuture<Option<StoredGame>>;
    /// Records a finished game (kept with its log for the store's retention).
    fn finish(&self, record: GameRecord) -> StoreFuture<()>;
    fn record(&self, game_pk: &str) -> StoreFuture<Option<GameRecord>>;
    /// `player`'s finished games, newest first, ended before `before` (epoch ms).
    fn games_of(&self, player: &PlayerId, before: Option<i64>, limit: usize) -> StoreFuture<Vec<GameRecord>>;
}

#[derive(Default)]
struct MemRooms {
    rooms: HashMap<String, RoomInfo>,
    /// Ended rooms, oldest first: the first go when there are more than the store keeps.
    ended: VecDeque<String>,
}

#[derive(Default)]
struct MemGame {
    start: Vec<u8>,
    entries: Vec<Vec<u8>>,
    snapshot: Option<Vec<u8>>,
    record: Option<Vec<u8>>,
}

/// Finished games (and ended rooms) the in-memory store keeps by default; older ones are
/// forgotten, so a long-running node's memory stays bounded (~7 KiB per finished game).
pub const MEMORY_KEEPS_FINISHED: usize = 2_000;

/// The in-memory store: one process, nothing survives a restart. It keeps the newest
/// `keep_finished` finished games and ended rooms; older ones are forgotten (their
/// records and replays are gone, as after a retention period elsewhere).
#[derive(Clone)]
pub struct MemoryStore {
    // A std Mutex: every operation is a short, non-async critical section.
    games: Arc<Mutex<HashMap<String, MemGame>>>,
    /// Finished games, oldest first.
    finished: Arc<Mutex<VecDeque<String>>>,
    rooms: Arc<Mutex<MemRooms>>,
    keep_finished: usize,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::keeping(MEMORY_KEEPS_FINISHED)
    }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store that keeps at most `keep_finished` finished games and ended rooms.
    pub fn keeping(keep_finished: usize) -> MemoryStore {
        MemoryStore {
            games: Arc::default(),
            finished: Arc::default(),
            rooms: Arc::default(),
            keep_finished: keep_finished.max(1),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, MemGame>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut games = self.games.lock().map_err(|_| StoreError::Unavailable("memory store poisoned".into()))?;
        f(&mut games)
    }

    fn ready<T: Send + 'static>(result: Result<T, StoreError>) -> StoreFuture<T> {
        Box::pin(std::future::ready(result))
    }
}

impl RoomStore for MemoryStore {
    fn begin(&self, start: StartEntry) -> StoreFuture<()> {
        let result = encode(&start).and_then(|bytes| {
            self.with(|games| {
                if games.contains_key(&start.game_pk) {
                    return Err(StoreError::Conflict { game_pk: start.game_pk.clone(), expected: 0, got: 0 });
                }
                games.insert(start.game_pk.clone(), MemGame { start: bytes, ..MemGame::default() });
                Ok(())
            })
        });
        Self::ready(result)
    }

    fn append(&self, game_pk: &str, entry: LogEntry) -> StoreFuture<()> {
        let result = encode(&entry).and_then(|bytes| {
            self.with(|games| {
                let game = games.get_mut(game_pk).ok_or_else(|| StoreError::Corrupt(format!("no game {game_pk}")))?;
                let expected = game.entries.len() as u64 + 1;
                if entry.seq != expected {
                    return Err(StoreError::Conflict { game_pk: game_pk.to_owned(), expected, got: entry.seq });
                }
                game.entries.push(bytes);
                Ok(())
            })
        });
        Self::ready(result)
    }

    fn put_snapshot(&self, game_pk: &str, snapshot: Snapshot) -> StoreFuture<()> {
        let result = encode(&snapshot).and_then(|bytes| {
            self.with(|games| {
                let game = games.get_mut(game_pk).ok_or_else(|| StoreError::Corrupt(format!("no game {game_pk}")))?;
                game.snapshot = Some(bytes);
                Ok(())
            })
        });
        Self::ready(result)
    }

    fn load(&self, game_pk: &str) -> StoreFuture<Option<StoredGame>> {
        let result = self.with(|games| {
            let Some(game) = games.get(game_pk) else { return Ok(None) };
            Ok(Some(StoredGame {
                start: decode(&game.start)?,
                snapshot: game.snapshot.as_deref().map(decode).transpose()?,
                entries: game.entries.iter().map(|b| decode(b)).collect::<Result<_, _>>()?,
            }))
        });
        Self::ready(result)
    }

    fn finish(&self, record: GameRecord) -> StoreFuture<()> {
        let result = encode(&record).and_then(|bytes| {
            self.with(|games| {
                let game = games
                    .get_mut(&record.game_pk)
                    .ok_or_else(|| StoreError::Corrupt(format!("no game {}", record.game_pk)))?;
                let first_time = game.record.is_none();
                game.record = Some(bytes);
                if first_time {
                    let mut finished =
                        self.finished.lock().map_err(|_| StoreError::Unavailable("memory store poisoned".into()))?;
                    finished.push_back(record.game_pk.clone());
                    while finished.len() > self.keep_finished {
                        if let Some(old) = finished.pop_front() {
                            games.remove(&old);
                        }
                    }
                }
                Ok(())
            })
        });
        Self::ready(result)
    }

    fn record(&self, game_pk: &str) -> StoreFuture<Option<GameRecord>> {
        let result = self.with(|games| games.get(game_pk).and_then(|g| g.record.as_deref()).map(decode).transpose());
        Self::ready(result)
    }

    fn games_of(&self, player: &PlayerId, before: Option<i64>, limit: usize) -> StoreFuture<Vec<GameRecord>> {
        let result = self.with(|games| {
            let mut records: Vec<GameRecord> = games
                .values()
                .filter_map(|g| g.record.as_deref())
                .map(decode::<GameRecord>)
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .filter(|r| r.players.contains(player) && before.is_none_or(|b| r.ended_at < b))
                .collect();
            records.sort_by(|a, b| b.ended_at.cmp(&a.ended_at).then_with(|| b.game_pk.cmp(&a.game_pk)));
            records.truncate(limit);
            Ok(records)
        });
        Self::ready(result)
    }

    fn put_room(&self, info: &RoomInfo) -> StoreFuture<()> {
        let result = match self.rooms.lock() {
            Ok(mut rooms) => {
                let was_ended = rooms.rooms.get(&info.room_id).is_some_and(|r| r.status == RoomStatus::Ended);
                rooms.rooms.insert(info.room_id.clone(), info.clone());
                if info.status == RoomStatus::Ended && !was_ended {
                    rooms.ended.push_back(info.room_id.clone());
                    while rooms.ended.len() > self.keep_finished {
                        if let Some(old) = rooms.ended.pop_front() {
                            if rooms.rooms.get(&old).is_some_and(|r| r.status == RoomStatus::Ended) {
                                rooms.rooms.remove(&old);
                            }
                        }
                    }
                }
                Ok(())
            }
            Err(_) => Err(StoreError::Unavailable("memory store poisoned".into())),
        };
        Self::ready(result)
    }

    fn room(&self, room_id: &str) -> StoreFuture<Option<RoomInfo>> {
        let result = self
            .rooms
            .lock()
            .map(|rooms| rooms.rooms.get(room_id).cloned())
            .map_err(|_| StoreError::Unavailable("memory store poisoned".into()));
        Self::ready(result)
    }

    fn open_rooms(&self) -> StoreFuture<Vec<RoomInfo>> {
        let result = self
            .rooms
            .lock()
            .map(|rooms| rooms.rooms.values().filter(|r| r.status != RoomStatus::Ended).cloned().collect())
            .map_err(|_| StoreError::Unavailable("memory store poisoned".into()));
        Self::ready(result)
    }
}
