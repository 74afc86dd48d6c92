//! The store thread: it takes the queued calls in batches, runs each batch in one
//! transaction committed with one fsync (group commit), answers the calls once that
//! commit is durable, and purges finished games on schedule. Apart from the handle, which
//! only queues calls, and from each call's SQL (`apply`): this file decides when a batch
//! commits and what its calls are told, not what a call does.

use super::apply::apply;
use super::now_ms;
use super::ops::{Fail, Job, Op};
use super::running::{BatchChanges, BatchSeqs, Running};
use crate::error::StoreError;
use crate::pace::Pace;
use rusqlite::{Connection, TransactionBehavior};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::{error, info};

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

/// How often finished games past the retention are deleted.
pub(super) const PURGE_EVERY: Duration = Duration::from_secs(3600);

fn unavailable(e: &rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("file store: {e}"))
}

/// What the store thread shares with the handles.
pub(super) struct Thread {
    pub(super) healthy: Arc<AtomicBool>,
    pub(super) fail_commits: Arc<AtomicBool>,
    pub(super) file: PathBuf,
    /// How often the purge runs ([`PURGE_EVERY`]; tests shorten it).
    pub(super) purge_every: Duration,
}

/// The store thread: batches, purges on schedule, exits when every handle is dropped.
pub(super) fn run(
    mut conn: Connection,
    mut running: Running,
    rx: mpsc::Receiver<Job>,
    retention: Duration,
    state: Thread,
) {
    // Due at once: the store purges as it opens, then every `purge_every`. Checked at
    // the top of every turn, not only when the channel is quiet: a busy store always
    // finds a call waiting and would never see its receive time out.
    let mut next_purge = Instant::now();
    let mut pace = Pace::gathering(COMMIT_WINDOW, COMMIT_ARRIVALS);
    loop {
        if Instant::now() >= next_purge {
            let before = now_ms() - retention.as_millis() as i64;
            let (reply, _) = oneshot::channel();
            commit_batch(&mut conn, vec![Job { op: Op::Purge { before }, reply }], &state, &mut running);
            next_purge = Instant::now() + state.purge_every;
        }
        let wait = next_purge.saturating_duration_since(Instant::now());
        let first = match rx.recv_timeout(wait) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{encode, GameRecord};
    use crate::store::file::dir::create_private_file;
    use crate::store::file::ops::Out;
    use crate::store::file::schema::open_checked;
    use tokio::sync::oneshot::Receiver;

    fn call(tx: &mpsc::Sender<Job>, op: Op) -> Receiver<Result<Out, StoreError>> {
        let (reply, rx) = oneshot::channel();
        tx.send(Job { op, reply }).unwrap();
        rx
    }

    fn record(pk: &str, ended_at: i64) -> GameRecord {
        GameRecord {
            game_pk: pk.into(),
            room_id: "r_old".into(),
            game: "tally".into(),
            players: vec!["a".into()],
            names: vec![],
            started_at: 1_000,
            ended_at,
            state_version: 1,
            final_seq: 0,
            result_json: "{}".into(),
            final_state_json: "{}".into(),
        }
    }

    /// The purge is due by the clock, not only when the store is idle: a store whose
    /// channel always holds a call when its loop comes back to it (a busy node) still
    /// deletes the games past their retention. Here every call is queued before the
    /// thread starts, so the channel is never empty until the last batch.
    #[test]
    fn a_store_that_is_never_idle_still_purges_on_schedule() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("roomd.sqlite3");
        create_private_file(&file).unwrap();
        let conn = open_checked(&file, false).unwrap();
        let running = Running::load(&conn).unwrap();
        let (tx, rx) = mpsc::channel::<Job>();
        let pk = "r_old.01".to_owned();
        let begun = call(&tx, Op::Begin { pk: pk.clone(), start: vec![1] });
        let finished = call(
            &tx,
            Op::Finish {
                pk: pk.clone(),
                ended_at: 1_000,
                players: vec!["a".into()],
                body: encode(&record(&pk, 1_000)).unwrap(),
            },
        );
        // More than a batch of calls behind it: the record is read in a later batch.
        let probes: Vec<_> = (0..MAX_BATCH + 10).map(|i| call(&tx, Op::Probe { now: i as i64 })).collect();
        let read = call(&tx, Op::Record { pk: pk.clone() });
        drop(tx);
        let state = Thread {
            healthy: Arc::new(AtomicBool::new(true)),
            fail_commits: Arc::new(AtomicBool::new(false)),
            file,
            purge_every: Duration::ZERO,
        };
        // Retention zero: a finished game is past it at once.
        run(conn, running, rx, Duration::ZERO, state);
        assert!(matches!(begun.blocking_recv().unwrap(), Ok(Out::Done)));
        assert!(matches!(finished.blocking_recv().unwrap(), Ok(Out::Done)));
        for probe in probes {
            assert!(matches!(probe.blocking_recv().unwrap(), Ok(Out::Done)));
        }
        match read.blocking_recv().unwrap() {
            Ok(Out::Record(None)) => {}
            Ok(Out::Record(Some(r))) => panic!("game {} ended at {} was not purged under load", r.game_pk, r.ended_at),
            Err(e) => panic!("record read failed: {e}"),
            Ok(_) => panic!("unexpected answer"),
        }
    }
}
