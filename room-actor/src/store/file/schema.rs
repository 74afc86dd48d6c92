//! Opening the database: durability settings, the integrity check, and the schema with
//! its in-place upgrades. Apart because it runs once, before the store thread starts,
//! and is where a damaged, foreign or newer file is refused.

use super::checkpoint::CHECKPOINT_AT;
use super::OpenError;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension};
use std::path::Path;
use tracing::info;

/// The schema this build writes; a database of a newer schema is refused at start.
/// Version 2 no longer keeps `games.last_seq` (a game's last seq is its log's highest,
/// read once and then kept by the store thread). Version 3 appends a running game's
/// entries to the `log` table and moves them to `entries` when the game finishes (see
/// [`Running`]). Older databases are upgraded in place (the `log` table is created;
/// no data changes), and a roomd that knows only an older version refuses a newer one
/// rather than misread it.
const SCHEMA_VERSION: i64 = 3;

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

/// Opens the database, sets durability, checks its integrity and schema.
pub(super) fn open_checked(file: &Path, existed: bool) -> Result<Connection, OpenError> {
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
