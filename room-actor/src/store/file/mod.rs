//! `RoomStore` in a data directory: one SQLite database (`roomd.sqlite3`, WAL mode,
//! `synchronous = FULL`) owned by one thread. Every call is queued to that thread in call
//! order; the thread takes everything queued (up to [`MAX_BATCH`]) into one transaction
//! and commits it with one fsync of the WAL, then answers each call: group commit. A call
//! is answered `Ok` only once its transaction is durable, so nothing is acknowledged to a
//! player before it would survive a power loss; when the commit fails (a full disk, an
//! I/O error) every call of the batch fails with `StoreError::Unavailable` and nothing of
//! it is stored.
//!
//! A busy store waits up to [`COMMIT_WINDOW`] for more calls before it commits, so a
//! commit's fixed cost is shared. A running game's entries are appended to the `log`
//! table and moved to `entries` when it ends ([`Running`]). The write-ahead log is
//! copied into the database by a checkpointer of its own, never by a commit
//! ([`CHECKPOINT_AT`](checkpoint::CHECKPOINT_AT)).
//!
//! Values are the same versioned bincode as in the other stores (`log::encode`); room
//! info is JSON, as in Redis. Finished games are deleted `retention_days` after they
//! ended (checked at start and every hour). The data directory is locked
//! ([`LOCK_FILE`]): a second roomd on the same directory refuses to start.
//!
//! The directory holds every game's seed (and, on an embedded node without a configured
//! secret, the token secret): it is made private to roomd's user, 0700 with its files
//! 0600, when it is created and again at every start ([`secure_data_dir`]).
//!
//! # Layout
//!
//! - this file: the handle ([`FileStore`]): opening the store, and every call queued to
//!   the store thread and its answer awaited (`RoomStore`, `probe`, `purge_finished_before`).
//! - `dir`: the data directory: its files, made private to roomd's user, and its lock.
//! - `schema`: opening the database: durability, the integrity check, the schema and its
//!   upgrades.
//! - `checkpoint`: the checkpointer thread that copies the write-ahead log into the
//!   database.
//! - `ops`: what a handle sends the store thread and what it answers.
//! - `commit`: the store thread: batches, one transaction and one fsync each, purges.
//! - `running`: what the thread keeps of the running games, and a batch's view of it.
//! - `apply`: each call's SQL inside the batch's transaction.

mod apply;
mod checkpoint;
mod commit;
mod dir;
mod ops;
mod running;
mod schema;

pub use commit::{COMMIT_ARRIVALS, COMMIT_WINDOW, MAX_BATCH};
pub use dir::{secure_data_dir, DB_FILE, LOCK_FILE};

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::log::{encode, GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use crate::store::{RoomStore, StoreFuture};
use checkpoint::start_checkpointer;
use commit::{run, Thread};
use dir::{create_private_file, lock_dir};
use engine::PlayerId;
use ops::{Job, Op, Out};
use running::Running;
use schema::open_checked;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tokio::sync::oneshot;
use tracing::info;

/// The store cannot be opened: roomd must not start (never silently empty).
#[derive(Debug, Error)]
pub enum OpenError {
    #[error("cannot create the data directory {dir}: {source}")]
    Dir { dir: PathBuf, source: std::io::Error },
    #[error(
        "{file} is not a readable roomd store ({reason}). roomd will not start on it: restore the data \
         directory from a backup, or move {file} and its -wal file aside to start with an empty store"
    )]
    Corrupt { file: PathBuf, reason: String },
    #[error("{file} is in use by another roomd (or cannot be locked: {reason}); one node per data directory")]
    Locked { file: PathBuf, reason: String },
    #[error("{file} was written by a newer roomd (store schema {found}, this build knows {known}): run a newer roomd")]
    NewerSchema { file: PathBuf, found: i64, known: i64 },
    #[error("cannot open {file}: {reason}")]
    Open { file: PathBuf, reason: String },
    #[error("cannot start the store thread: {0}")]
    Thread(std::io::Error),
}

/// The file-backed store (embedded mode). Cheap to clone.
#[derive(Clone)]
pub struct FileStore {
    tx: mpsc::Sender<Job>,
    file: Arc<PathBuf>,
    /// False after a commit failed, true again after one succeeded.
    healthy: Arc<AtomicBool>,
    /// Fault injection for tests: while set, every commit fails as on a full disk.
    fail_commits: Arc<AtomicBool>,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl FileStore {
    /// Opens (creating it if needed) the store in `dir`, checks it, deletes finished
    /// games older than `retention_days` and starts its thread. A database that does not
    /// check out is an error naming the file, never an empty start.
    pub fn open(dir: &Path, retention_days: u32) -> Result<FileStore, OpenError> {
        secure_data_dir(dir, &[]).map_err(|source| OpenError::Dir { dir: dir.to_owned(), source })?;
        let file = dir.join(DB_FILE);
        let existed = file.exists();
        if !existed {
            // SQLite would create the file 0644 (less the umask) and gives its -wal file
            // the database's mode: created here 0600 first, both stay private.
            create_private_file(&file).map_err(|e| OpenError::Open { file: file.clone(), reason: e.to_string() })?;
        }
        let lock = lock_dir(dir, &file)?;
        let conn = open_checked(&file, existed)?;
        let running =
            Running::load(&conn).map_err(|e| OpenError::Corrupt { file: file.clone(), reason: e.to_string() })?;
        let checkpoints = start_checkpointer(&file)?;
        let retention = Duration::from_secs(u64::from(retention_days) * 24 * 3600);
        let (tx, rx) = mpsc::channel::<Job>();
        let healthy = Arc::new(AtomicBool::new(true));
        let fail_commits = Arc::new(AtomicBool::new(false));
        let state = Thread {
            healthy: healthy.clone(),
            fail_commits: fail_commits.clone(),
            file: file.clone(),
            purge_every: commit::PURGE_EVERY,
        };
        std::thread::Builder::new()
            .name("roomd-store".into())
            .spawn(move || {
                run(conn, running, rx, retention, state);
                // The checkpointer stops, then the directory is free for another roomd.
                checkpoints.stop();
                drop(lock);
            })
            .map_err(OpenError::Thread)?;
        info!(file = %file.display(), existed, "file store open");
        Ok(FileStore { tx, file: Arc::new(file), healthy, fail_commits })
    }

    /// The database file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Did the last commit succeed?
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Fault injection (tests): while `on`, every commit fails as it does on a full disk
    /// (the batch is rolled back, its calls get `Unavailable`, `probe` is false).
    pub fn fail_commits(&self, on: bool) {
        self.fail_commits.store(on, Ordering::Relaxed);
    }

    /// Writes and commits a tiny row: can the store take writes right now (readiness)?
    pub async fn probe(&self) -> bool {
        self.call(Op::Probe { now: now_ms() }).await.is_ok()
    }

    /// Deletes the finished games (log, snapshot, record, index) that ended before
    /// `before` (epoch ms) and ended rooms saved before it; returns how many games.
    pub async fn purge_finished_before(&self, before: i64) -> Result<usize, StoreError> {
        match self.call(Op::Purge { before }).await? {
            Out::Purged(n) => Ok(n),
            _ => Err(StoreError::Corrupt("unexpected answer".into())),
        }
    }

    fn send(&self, op: Op) -> oneshot::Receiver<Result<Out, StoreError>> {
        let (reply, rx) = oneshot::channel();
        // A closed channel drops `reply`, which the receiver reads as unavailable.
        let _ = self.tx.send(Job { op, reply });
        rx
    }

    fn call(&self, op: Op) -> impl std::future::Future<Output = Result<Out, StoreError>> + Send + 'static {
        // Queued now, not when polled: calls keep the order they were made in.
        let rx = self.send(op);
        async move { rx.await.map_err(|_| StoreError::Unavailable("file store thread stopped".into()))? }
    }

    fn boxed<T: Send + 'static>(&self, op: Op, map: fn(Out) -> Option<T>) -> StoreFuture<T> {
        let call = self.call(op);
        Box::pin(async move {
            let out = call.await?;
            map(out).ok_or_else(|| StoreError::Corrupt("unexpected answer from the store thread".into()))
        })
    }
}

fn done(out: Out) -> Option<()> {
    matches!(out, Out::Done).then_some(())
}

impl RoomStore for FileStore {
    fn begin(&self, start: StartEntry) -> StoreFuture<()> {
        match encode(&start) {
            Ok(bytes) => self.boxed(Op::Begin { pk: start.game_pk, start: bytes }, done),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn append(&self, game_pk: &str, entry: LogEntry) -> StoreFuture<()> {
        match encode(&entry) {
            Ok(body) => self.boxed(Op::Append { pk: game_pk.to_owned(), seq: entry.seq, body }, done),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn put_room(&self, info: &RoomInfo) -> StoreFuture<()> {
        match serde_json::to_string(info) {
            Ok(json) => self.boxed(
                Op::PutRoom { id: info.room_id.clone(), json, open: info.status != RoomStatus::Ended, now: now_ms() },
                done,
            ),
            Err(e) => Box::pin(std::future::ready(Err(StoreError::Corrupt(e.to_string())))),
        }
    }

    fn room(&self, room_id: &str) -> StoreFuture<Option<RoomInfo>> {
        self.boxed(Op::Room { id: room_id.to_owned() }, |out| match out {
            Out::Room(r) => Some(r),
            _ => None,
        })
    }

    fn open_rooms(&self) -> StoreFuture<Vec<RoomInfo>> {
        self.boxed(Op::OpenRooms, |out| match out {
            Out::Rooms(r) => Some(r),
            _ => None,
        })
    }

    fn put_snapshot(&self, game_pk: &str, snapshot: Snapshot) -> StoreFuture<()> {
        match encode(&snapshot) {
            Ok(body) => self.boxed(Op::Snapshot { pk: game_pk.to_owned(), body }, done),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn load(&self, game_pk: &str) -> StoreFuture<Option<StoredGame>> {
        self.boxed(Op::Load { pk: game_pk.to_owned() }, |out| match out {
            Out::Game(g) => Some(g),
            _ => None,
        })
    }

    fn finish(&self, record: GameRecord) -> StoreFuture<()> {
        match encode(&record) {
            Ok(body) => self.boxed(
                Op::Finish {
                    pk: record.game_pk.clone(),
                    ended_at: record.ended_at,
                    players: record.players.clone(),
                    body,
                },
                done,
            ),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn record(&self, game_pk: &str) -> StoreFuture<Option<GameRecord>> {
        self.boxed(Op::Record { pk: game_pk.to_owned() }, |out| match out {
            Out::Record(r) => Some(r),
            _ => None,
        })
    }

    fn games_of(&self, player: &PlayerId, before: Option<i64>, limit: usize) -> StoreFuture<Vec<GameRecord>> {
        let op = Op::GamesOf { player: player.clone(), before: before.unwrap_or(i64::MAX), limit };
        self.boxed(op, |out| match out {
            Out::Records(r) => Some(r),
            _ => None,
        })
    }
}
