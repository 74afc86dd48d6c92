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
//! ([`CHECKPOINT_AT`]).
//!
//! Values are the same versioned bincode as in the other stores (`log::encode`); room
//! info is JSON, as in Redis. Finished games are deleted `retention_days` after they
//! ended (checked at start and every hour). The data directory is locked
//! ([`LOCK_FILE`]): a second roomd on the same directory refuses to start.
//!
//! The directory holds every game's seed (and, on an embedded node without a configured
//! secret, the token secret): it is made private to roomd's user, 0700 with its files
//! 0600, when it is created and again at every start ([`secure_data_dir`]).

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::log::{decode, encode, GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use crate::pace::Pace;
use crate::store::{RoomStore, StoreFuture};
use engine::PlayerId;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tokio::sync::oneshot;
use tracing::{error, info, warn};

/// The database file inside the data directory.
pub const DB_FILE: &str = "roomd.sqlite3";
/// The files SQLite keeps beside the database: its write-ahead log, the log's index and
/// a rollback journal (an older run may have left one).
const DB_SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];
/// The file whose lock keeps a data directory to one roomd at a time (held by the store
/// thread; the kernel lets it go when the process dies).
pub const LOCK_FILE: &str = "roomd.lock";
/// The checkpointer copies the write-ahead log into the database once it holds this
/// much, on a connection and thread of its own (`PASSIVE`: commits go on meanwhile), so
/// no commit ever waits for a checkpoint (SQLite's automatic one runs inside a commit and
/// held the whole store up for 100-200 ms every few seconds under load).
const CHECKPOINT_AT: u64 = 4 << 20;
/// How often the checkpointer looks at the log's size.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);
/// Calls committed together at most (one transaction, one fsync).
pub const MAX_BATCH: usize = 512;
/// The longest a busy store waits after a call for more to commit with it, and how
/// many more it waits for ([`Pace`]): a commit costs about 100 µs of CPU whatever it
/// holds (the fsync, SQLite's commit), an entry in it a few, so at a few thousand
/// appends a second commits of one or two entries cost the node more than all its rooms
/// (measured: `docs/file-store-measurements.md`). A queue too quiet to bring two more
/// calls within the window never waits.
pub const COMMIT_WINDOW: Duration = Duration::from_millis(3);
pub const COMMIT_ARRIVALS: f64 = 10.0;
/// The schema this build writes; a database of a newer schema is refused at start.
/// Version 2 no longer keeps `games.last_seq` (a game's last seq is its log's highest,
/// read once and then kept by the store thread). Version 3 appends a running game's
/// entries to the `log` table and moves them to `entries` when the game finishes (see
/// [`Running`]). Older databases are upgraded in place (the `log` table is created;
/// no data changes), and a roomd that knows only an older version refuses a newer one
/// rather than misread it.
const SCHEMA_VERSION: i64 = 3;
/// How often finished games past the retention are deleted.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS games (
    pk TEXT PRIMARY KEY,
    start BLOB NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    snapshot BLOB,
    record BLOB,
    ended_at INTEGER
);
CREATE INDEX IF NOT EXISTS games_by_end ON games(ended_at) WHERE ended_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS entries (
    pk TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (pk, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log (
    id INTEGER PRIMARY KEY,
    pk TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS rooms (
    id TEXT PRIMARY KEY,
    info TEXT NOT NULL,
    open INTEGER NOT NULL,
    ended_at INTEGER
);
CREATE INDEX IF NOT EXISTS rooms_open ON rooms(open);
CREATE TABLE IF NOT EXISTS user_games (
    player TEXT NOT NULL,
    ended_at INTEGER NOT NULL,
    pk TEXT NOT NULL,
    PRIMARY KEY (player, ended_at, pk)
) WITHOUT ROWID;
";

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

/// What a call asks of the store thread.
enum Op {
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
enum Out {
    Done,
    Purged(usize),
    Room(Option<RoomInfo>),
    Rooms(Vec<RoomInfo>),
    Game(Option<StoredGame>),
    Record(Option<GameRecord>),
    Records(Vec<GameRecord>),
}

struct Job {
    op: Op,
    reply: oneshot::Sender<Result<Out, StoreError>>,
}

/// A failure inside a batch: `Refused` fails only its own call (a seq conflict, an
/// unknown game); `Db` aborts the whole batch (nothing of it is stored).
enum Fail {
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

fn unavailable(e: &rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("file store: {e}"))
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
        let state = Thread { healthy: healthy.clone(), fail_commits: fail_commits.clone(), file: file.clone() };
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

/// Makes the data directory `dir` private to roomd's user: created 0700 (its parents as
/// the umask says) or, when it exists, tightened to 0700, and the store's files in it
/// (and `extra`, other files roomd keeps there) tightened to 0600 when others may read
/// them. What was tightened is logged once, at info. A directory roomd does not own (a
/// volume's root) cannot be changed: that is a warning, not a refusal to start. Elsewhere
/// than on unix the directory is only created.
pub fn secure_data_dir(dir: &Path, extra: &[&str]) -> std::io::Result<()> {
    if !dir.exists() {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(dir) {
            Ok(()) => {}
            // Another process made it meanwhile: tightened below like any existing one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    #[cfg(unix)]
    {
        let mut tightened = Vec::new();
        tighten(dir, 0o700, &mut tightened)?;
        let db_files = std::iter::once(DB_FILE.to_owned()).chain(DB_SIDE_FILES.iter().map(|s| format!("{DB_FILE}{s}")));
        for name in db_files.chain(extra.iter().map(|s| (*s).to_owned())) {
            tighten(&dir.join(name), 0o600, &mut tightened)?;
        }
        if !tightened.is_empty() {
            info!(
                dir = %dir.display(),
                tightened = ?tightened,
                "data directory made private to roomd's user (it holds game seeds and may hold the token secret)"
            );
        }
    }
    Ok(())
}

/// Sets `path` (followed if it is a link) to `mode` when it grants anything to group or
/// others; a missing file is fine. Changed paths are added to `tightened`. A change the
/// system refuses (not the owner, a read-only volume) is a warning: the store still works.
#[cfg(unix)]
fn tighten(path: &Path, mode: u32, tightened: &mut Vec<String>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let before = meta.permissions().mode() & 0o7777;
    if before & 0o077 == 0 {
        return Ok(());
    }
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        Ok(()) => tightened.push(format!("{} {before:o} -> {mode:o}", path.display())),
        Err(e) => warn!(
            path = %path.display(),
            mode = format!("{before:o}"),
            error = %e,
            "cannot make this private to roomd's user: others may read game seeds or the token secret"
        ),
    }
    Ok(())
}

/// Creates `path` empty with mode 0600 (on unix) unless it exists.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).map(drop)
}

fn done(out: Out) -> Option<()> {
    matches!(out, Out::Done).then_some(())
}

/// Takes the data directory's lock ([`LOCK_FILE`]): `Locked` while another roomd (or
/// a store of this process not yet closed) holds it.
fn lock_dir(dir: &Path, file: &Path) -> Result<std::fs::File, OpenError> {
    let path = dir.join(LOCK_FILE);
    let open_err = |e: std::io::Error| OpenError::Open { file: path.clone(), reason: e.to_string() };
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).read(true).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let lock = options.open(&path).map_err(open_err)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked {
            file: file.to_owned(),
            reason: format!("{} is locked: another roomd uses this data directory", path.display()),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(open_err(e)),
    }
}

/// The checkpointer thread: [`Checkpointer::stop`] ends it.
struct Checkpointer {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// Stops the thread and waits until its connection is closed.
    fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

/// Starts the checkpointer (see [`CHECKPOINT_AT`]).
fn start_checkpointer(file: &Path) -> Result<Checkpointer, OpenError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(file, flags)
        .map_err(|e| OpenError::Open { file: file.to_owned(), reason: e.to_string() })?;
    let wal = PathBuf::from(format!("{}-wal", file.display()));
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("roomd-checkpoint".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY) {
                if std::fs::metadata(&wal).map_or(0, |m| m.len()) < CHECKPOINT_AT {
                    continue;
                }
                let started = Instant::now();
                match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                }) {
                    Ok((_, frames, copied)) => {
                        tracing::debug!(
                            frames,
                            copied,
                            took_ms = started.elapsed().as_millis() as u64,
                            "WAL checkpoint"
                        );
                    }
                    Err(e) => warn!(error = %e, "WAL checkpoint failed; tried again later"),
                }
            }
        })
        .map_err(OpenError::Thread)?;
    Ok(Checkpointer { stop, thread })
}

/// Opens the database, sets durability, checks its integrity and schema.
fn open_checked(file: &Path, existed: bool) -> Result<Connection, OpenError> {
    let corrupt = |e: &dyn std::fmt::Display| OpenError::Corrupt { file: file.to_owned(), reason: e.to_string() };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(file, flags)
        .map_err(|e| OpenError::Open { file: file.to_owned(), reason: e.to_string() })?;
    let classify = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => corrupt(&e),
        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => {
            OpenError::Locked { file: file.to_owned(), reason: e.to_string() }
        }
        _ => OpenError::Open { file: file.to_owned(), reason: e.to_string() },
    };
    // One roomd per directory is the lock file's job ([`lock_dir`]); the database is
    // shared with the checkpointer's connection, which copies the log into it off the
    // commit path, so commits never checkpoint themselves.
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(classify)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::Open { file: file.to_owned(), reason: format!("journal mode {mode}, not wal") });
    }
    // FULL in WAL mode: every commit fsyncs the WAL before it returns.
    conn.pragma_update(None, "synchronous", "FULL").map_err(classify)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0).map_err(classify)?;
    // Once a checkpoint is complete, the log restarts from its beginning: this caps the
    // file it leaves behind.
    conn.pragma_update(None, "journal_size_limit", CHECKPOINT_AT as i64 * 2).map_err(classify)?;
    let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(classify)?;
    if check != "ok" {
        return Err(corrupt(&format!("integrity check: {check}")));
    }
    let has_meta: bool = conn
        .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", [], |r| {
            r.get::<_, i64>(0)
        })
        .map(|n| n > 0)
        .map_err(classify)?;
    if existed && !has_meta {
        // A file that is there but holds no store (truncated to nothing, or something
        // else): starting empty on it would silently forget every game.
        return Err(corrupt(&"the file exists but holds no roomd tables (empty or truncated?)"));
    }
    conn.execute_batch(SCHEMA).map_err(classify)?;
    let schema: Option<String> =
        conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).optional().map_err(classify)?;
    match schema.map(|s| s.parse::<i64>()) {
        None => {
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema', ?1)", params![SCHEMA_VERSION.to_string()])
                .map_err(classify)?;
        }
        Some(Ok(found)) if found > SCHEMA_VERSION => {
            return Err(OpenError::NewerSchema { file: file.to_owned(), found, known: SCHEMA_VERSION });
        }
        Some(Ok(found)) if found < SCHEMA_VERSION => {
            // 1 → 2 changes no data (see SCHEMA_VERSION).
            conn.execute("UPDATE meta SET value = ?1 WHERE key = 'schema'", params![SCHEMA_VERSION.to_string()])
                .map_err(classify)?;
            info!(file = %file.display(), from = found, to = SCHEMA_VERSION, "file store upgraded in place");
        }
        Some(Ok(_)) => {}
        Some(Err(e)) => return Err(corrupt(&format!("schema version: {e}"))),
    }
    Ok(conn)
}

/// What the store thread shares with the handles.
struct Thread {
    healthy: Arc<AtomicBool>,
    fail_commits: Arc<AtomicBool>,
    file: PathBuf,
}

/// The store thread: batches, purges on schedule, exits when every handle is dropped.
fn run(mut conn: Connection, mut running: Running, rx: mpsc::Receiver<Job>, retention: Duration, state: Thread) {
    let purge = |conn: &mut Connection, running: &mut Running| {
        let before = now_ms() - retention.as_millis() as i64;
        let (reply, _) = oneshot::channel();
        commit_batch(conn, vec![Job { op: Op::Purge { before }, reply }], &state, running);
    };
    purge(&mut conn, &mut running);
    let mut next_purge = Instant::now() + PURGE_EVERY;
    let mut pace = Pace::gathering(COMMIT_WINDOW, COMMIT_ARRIVALS);
    loop {
        let wait = next_purge.saturating_duration_since(Instant::now());
        let first = match rx.recv_timeout(wait) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                purge(&mut conn, &mut running);
                next_purge = Instant::now() + PURGE_EVERY;
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let taken = Instant::now();
        let wait = pace.wait(taken);
        let mut batch = vec![first];
        batch.extend(rx.try_iter().take(MAX_BATCH - 1));
        if let Some(wait) = wait.filter(|_| batch.len() < MAX_BATCH) {
            // A busy store waits for more calls to commit with these (see COMMIT_WINDOW).
            // It sleeps rather than waits on the channel: a thread blocked on a channel
            // is woken by every call sent to it, two context switches per call on the
            // node's busy core, which cost more than the commit saved (measured).
            std::thread::sleep(wait);
            let room = MAX_BATCH.saturating_sub(batch.len());
            batch.extend(rx.try_iter().take(room));
        }
        pace.cut(batch.len());
        commit_batch(&mut conn, batch, &state, &mut running);
        pace.done(Instant::now());
    }
    info!(file = %state.file.display(), "file store closed");
}

/// What the store thread keeps of the running games: each one's last seq (the sequence
/// check of an append reads nothing) and the rows of the `log` table that hold its
/// entries (a running game's entries are appended there, in rowid order and without a
/// secondary index, so a commit writes the table's last pages instead of one page per
/// game; `Finish` moves them to `entries`, keyed by game). Rebuilt at open from the `log`
/// table; a game whose entries are all in `entries` (finished, or written by schema 2)
/// has its last seq read from there once.
#[derive(Default)]
struct Running {
    last: HashMap<String, u64>,
    rows: HashMap<String, Vec<i64>>,
}

impl Running {
    /// Reads the `log` table (open): every running game's rows and last seq.
    fn load(conn: &Connection) -> Result<Running, rusqlite::Error> {
        let mut running = Running::default();
        let mut stmt = conn.prepare("SELECT id, pk, seq FROM log ORDER BY id")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let (id, pk, seq): (i64, String, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
            let seq = u64::try_from(seq).unwrap_or(0);
            let last = running.last.entry(pk.clone()).or_insert(0);
            *last = (*last).max(seq);
            running.rows.entry(pk).or_default().push(id);
        }
        Ok(running)
    }

    fn apply(&mut self, changes: BatchChanges) {
        for (pk, last) in changes.last {
            match last {
                Some(last) => self.last.insert(pk, last),
                None => self.last.remove(&pk),
            };
        }
        for (pk, id) in changes.rows {
            self.rows.entry(pk).or_default().push(id);
        }
        for pk in changes.moved {
            self.rows.remove(&pk);
        }
    }
}

/// [`Running`] as one batch sees it: its own changes first, then what was committed.
/// The batch's changes reach [`Running`] only once it committed; a batch rolled back
/// leaves it as it was.
struct BatchSeqs<'a> {
    committed: &'a Running,
    changes: BatchChanges,
}

#[derive(Default)]
struct BatchChanges {
    /// Last seqs set (`None`: no longer kept, read again if needed).
    last: HashMap<String, Option<u64>>,
    /// `log` rows added, in order.
    rows: Vec<(String, i64)>,
    /// Games whose `log` rows moved to `entries`.
    moved: Vec<String>,
}

impl BatchSeqs<'_> {
    /// The last seq of `pk`'s log, `None` when no such game is stored.
    fn last(&self, tx: &Transaction<'_>, pk: &str) -> Result<Option<u64>, rusqlite::Error> {
        let known = match self.changes.last.get(pk) {
            Some(changed) => *changed,
            None => self.committed.last.get(pk).copied(),
        };
        if let Some(last) = known {
            return Ok(Some(last));
        }
        // Not running here since the store opened (its `log` rows, if any, would be
        // known): its entries are all in `entries`.
        let mut stmt =
            tx.prepare_cached("SELECT (SELECT max(seq) FROM entries WHERE pk = ?1) FROM games WHERE pk = ?1")?;
        let found: Option<Option<i64>> = stmt.query_row(params![pk], |r| r.get(0)).optional()?;
        Ok(found.map(|max| max.map_or(0, |m| u64::try_from(m).unwrap_or(0))))
    }

    /// `pk`'s last seq is `last` from now on; `None`: no longer kept.
    fn set(&mut self, pk: &str, last: Option<u64>) {
        self.changes.last.insert(pk.to_owned(), last);
    }

    /// A `log` row of `pk` was added.
    fn added(&mut self, pk: &str, id: i64) {
        self.changes.rows.push((pk.to_owned(), id));
    }

    /// `pk`'s `log` rows as this batch sees them, in order.
    fn rows(&self, pk: &str) -> Vec<i64> {
        if self.changes.moved.iter().any(|m| m == pk) {
            return Vec::new();
        }
        let mut rows = self.committed.rows.get(pk).cloned().unwrap_or_default();
        rows.extend(self.changes.rows.iter().filter(|(p, _)| p == pk).map(|(_, id)| *id));
        rows
    }

    /// `pk`'s `log` rows were moved to `entries`.
    fn moved(&mut self, pk: &str) {
        self.changes.rows.retain(|(p, _)| p != pk);
        self.changes.moved.push(pk.to_owned());
    }
}

/// Reads the `log` rows `ids` (a running game's entries).
fn log_rows(tx: &Transaction<'_>, ids: &[i64]) -> Result<Vec<LogEntry>, Fail> {
    let mut stmt = tx.prepare_cached("SELECT body FROM log WHERE id = ?1")?;
    let mut entries = Vec::with_capacity(ids.len());
    for id in ids {
        let body: Vec<u8> = stmt.query_row(params![id], |r| r.get(0))?;
        entries.push(decode::<LogEntry>(&body)?);
    }
    Ok(entries)
}

/// Runs `batch` in one transaction and answers every call after the commit.
fn commit_batch(conn: &mut Connection, batch: Vec<Job>, state: &Thread, running: &mut Running) {
    let file = &state.file;
    let healthy = &state.healthy;
    let fail_all = |batch: Vec<Job>, e: &rusqlite::Error| {
        for job in batch {
            let _ = job.reply.send(Err(unavailable(e)));
        }
    };
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            healthy.store(false, Ordering::Relaxed);
            error!(file = %file.display(), error = %e, "store transaction not started; calls refused");
            return fail_all(batch, &e);
        }
    };
    let mut outs = Vec::with_capacity(batch.len());
    let mut failed = None;
    let mut batch_seqs = BatchSeqs { committed: running, changes: BatchChanges::default() };
    for job in &batch {
        match apply(&tx, &job.op, &mut batch_seqs) {
            Ok(out) => outs.push(Ok(out)),
            Err(Fail::Refused(e)) => outs.push(Err(e)),
            Err(Fail::Db(e)) => {
                failed = Some(e);
                break;
            }
        }
    }
    if failed.is_none() && state.fail_commits.load(Ordering::Relaxed) {
        failed = Some(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("injected fault: database or disk is full".into()),
        ));
    }
    if let Some(e) = failed {
        drop(tx);
        healthy.store(false, Ordering::Relaxed);
        error!(file = %file.display(), error = %e, "store write failed; batch rolled back, calls refused");
        return fail_all(batch, &e);
    }
    let changes = batch_seqs.changes;
    if let Err(e) = tx.commit() {
        healthy.store(false, Ordering::Relaxed);
        error!(file = %file.display(), error = %e, "store commit failed; batch rolled back, calls refused");
        return fail_all(batch, &e);
    }
    running.apply(changes);
    if !healthy.swap(true, Ordering::Relaxed) {
        info!(file = %file.display(), "store writes succeed again");
    }
    for (job, out) in batch.into_iter().zip(outs) {
        let _ = job.reply.send(out);
    }
}

fn no_game(pk: &str) -> Fail {
    Fail::Refused(StoreError::Corrupt(format!("no game {pk}")))
}

/// Runs one call inside the batch's transaction. The statements of the hot path
/// (appends, snapshots, room info) are compiled once per connection (`prepare_cached`).
fn apply(tx: &Transaction<'_>, op: &Op, seqs: &mut BatchSeqs<'_>) -> Result<Out, Fail> {
    match op {
        Op::Begin { pk, start } => {
            let inserted = tx
                .prepare_cached("INSERT OR IGNORE INTO games (pk, start) VALUES (?1, ?2)")?
                .execute(params![pk, start])?;
            if inserted == 0 {
                return Err(StoreError::Conflict { game_pk: pk.clone(), expected: 0, got: 0 }.into());
            }
            seqs.set(pk, Some(0));
            Ok(Out::Done)
        }
        Op::Append { pk, seq, body } => {
            let Some(last) = seqs.last(tx, pk)? else { return Err(no_game(pk)) };
            let expected = last + 1;
            if *seq != expected {
                return Err(StoreError::Conflict { game_pk: pk.clone(), expected, got: *seq }.into());
            }
            let at = i64::try_from(*seq).map_err(|_| StoreError::Corrupt(format!("seq {seq} out of range")))?;
            let id = tx
                .prepare_cached("INSERT INTO log (pk, seq, body) VALUES (?1, ?2, ?3)")?
                .insert(params![pk, at, body])?;
            seqs.set(pk, Some(*seq));
            seqs.added(pk, id);
            Ok(Out::Done)
        }
        Op::Snapshot { pk, body } => {
            if tx.prepare_cached("UPDATE games SET snapshot = ?2 WHERE pk = ?1")?.execute(params![pk, body])? == 0 {
                return Err(no_game(pk));
            }
            Ok(Out::Done)
        }
        Op::Finish { pk, ended_at, players, body } => {
            if tx
                .prepare_cached("UPDATE games SET record = ?2, ended_at = ?3 WHERE pk = ?1")?
                .execute(params![pk, body, ended_at])?
                == 0
            {
                return Err(no_game(pk));
            }
            let mut index =
                tx.prepare_cached("INSERT OR IGNORE INTO user_games (player, ended_at, pk) VALUES (?1, ?2, ?3)")?;
            for player in players {
                index.execute(params![player.as_str(), ended_at, pk])?;
            }
            // A finished game takes no more appends: its entries move from `log` to
            // `entries` (one game's rows together: its replay reads one range), and its
            // seq need not be kept.
            let ids = seqs.rows(pk);
            let mut copy =
                tx.prepare_cached("INSERT INTO entries (pk, seq, body) SELECT pk, seq, body FROM log WHERE id = ?1")?;
            let mut delete = tx.prepare_cached("DELETE FROM log WHERE id = ?1")?;
            for id in &ids {
                copy.execute(params![id])?;
                delete.execute(params![id])?;
            }
            seqs.moved(pk);
            seqs.set(pk, None);
            Ok(Out::Done)
        }
        Op::PutRoom { id, json, open, now } => {
            let ended_at = (!open).then_some(*now);
            tx.prepare_cached(
                "INSERT INTO rooms (id, info, open, ended_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET info = excluded.info, open = excluded.open,
                     ended_at = coalesce(rooms.ended_at, excluded.ended_at)",
            )?
            .execute(params![id, json, open, ended_at])?;
            Ok(Out::Done)
        }
        Op::Room { id } => {
            let json: Option<String> =
                tx.query_row("SELECT info FROM rooms WHERE id = ?1", params![id], |r| r.get(0)).optional()?;
            Ok(Out::Room(json.map(|j| room_info(&j)).transpose()?))
        }
        Op::OpenRooms => {
            let mut stmt = tx.prepare_cached("SELECT info FROM rooms WHERE open = 1")?;
            let jsons = stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<Result<Vec<_>, _>>()?;
            let mut rooms = Vec::with_capacity(jsons.len());
            for json in jsons {
                let info = room_info(&json)?;
                if info.status != RoomStatus::Ended {
                    rooms.push(info);
                }
            }
            Ok(Out::Rooms(rooms))
        }
        Op::Load { pk } => {
            let row: Option<(Vec<u8>, Option<Vec<u8>>)> = tx
                .query_row("SELECT start, snapshot FROM games WHERE pk = ?1", params![pk], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            let Some((start, snapshot)) = row else { return Ok(Out::Game(None)) };
            let mut stmt = tx.prepare_cached("SELECT body FROM entries WHERE pk = ?1 ORDER BY seq")?;
            let bodies = stmt.query_map(params![pk], |r| r.get::<_, Vec<u8>>(0))?.collect::<Result<Vec<_>, _>>()?;
            let mut entries = bodies.iter().map(|b| decode::<LogEntry>(b)).collect::<Result<Vec<_>, _>>()?;
            // A running game's entries are in `log` (after any a schema-2 store wrote
            // to `entries` before the upgrade).
            entries.extend(log_rows(tx, &seqs.rows(pk))?);
            entries.sort_by_key(|e| e.seq);
            Ok(Out::Game(Some(StoredGame {
                start: decode::<StartEntry>(&start)?,
                snapshot: snapshot.as_deref().map(decode::<Snapshot>).transpose()?,
                entries,
            })))
        }
        Op::Record { pk } => {
            let body: Option<Option<Vec<u8>>> =
                tx.query_row("SELECT record FROM games WHERE pk = ?1", params![pk], |r| r.get(0)).optional()?;
            Ok(Out::Record(body.flatten().as_deref().map(decode::<GameRecord>).transpose()?))
        }
        Op::GamesOf { player, before, limit } => {
            let mut stmt = tx.prepare_cached(
                "SELECT g.record FROM user_games u JOIN games g ON g.pk = u.pk
                 WHERE u.player = ?1 AND u.ended_at < ?2 AND g.record IS NOT NULL
                 ORDER BY u.ended_at DESC, u.pk DESC LIMIT ?3",
            )?;
            let bodies = stmt
                .query_map(params![player.as_str(), before, *limit as i64], |r| r.get::<_, Vec<u8>>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Out::Records(bodies.iter().map(|b| decode::<GameRecord>(b)).collect::<Result<Vec<_>, _>>()?))
        }
        Op::Purge { before } => {
            let old = "SELECT pk FROM games WHERE ended_at IS NOT NULL AND ended_at < ?1";
            tx.execute(&format!("DELETE FROM entries WHERE pk IN ({old})"), params![before])?;
            tx.execute(&format!("DELETE FROM user_games WHERE pk IN ({old})"), params![before])?;
            let games =
                tx.execute("DELETE FROM games WHERE ended_at IS NOT NULL AND ended_at < ?1", params![before])?;
            tx.execute("DELETE FROM rooms WHERE open = 0 AND ended_at < ?1", params![before])?;
            if games > 0 {
                info!(games, "finished games past the retention deleted");
            }
            Ok(Out::Purged(games))
        }
        Op::Probe { now } => {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('probe', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![now.to_string()],
            )?;
            Ok(Out::Done)
        }
    }
}

fn room_info(json: &str) -> Result<RoomInfo, Fail> {
    serde_json::from_str(json).map_err(|e| Fail::Refused(StoreError::Corrupt(format!("room info: {e}"))))
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
