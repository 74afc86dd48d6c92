//! The checkpointer: a thread and a connection of its own that copy the write-ahead log
//! into the database once it is large, so that no commit ever waits for a checkpoint.
//! Apart from the store thread because the two share nothing but the file.

use super::OpenError;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tracing::warn;

/// The checkpointer copies the write-ahead log into the database once it holds this
/// much, on a connection and thread of its own (`PASSIVE`: commits go on meanwhile), so
/// no commit ever waits for a checkpoint (SQLite's automatic one runs inside a commit and
/// held the whole store up for 100-200 ms every few seconds under load).
pub(super) const CHECKPOINT_AT: u64 = 4 << 20;
/// How often the checkpointer looks at the log's size.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

/// The checkpointer thread: [`Checkpointer::stop`] ends it.
pub(super) struct Checkpointer {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// Stops the thread and waits until its connection is closed.
    pub(super) fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

/// Starts the checkpointer (see [`CHECKPOINT_AT`]).
pub(super) fn start_checkpointer(file: &Path) -> Result<Checkpointer, OpenError> {
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
