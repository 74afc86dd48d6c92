//! Group commit for log appends on one Redis: the rooms on one thread hand their fenced
//! appends to that thread's queue, and its task sends whatever gathered while its previous
//! batch was in flight as a single `EVALSHA` of `lua/append_many.lua` (then `WAIT` when
//! replicated acknowledgements are on). A quiet node pays the one round trip per append
//! it paid before; a busy one pays one per batch instead of one per room.
//!
//! Each entry is checked on its own inside the script (its room's lease token, its seq),
//! so a fenced or conflicting entry is refused alone and the rest of the batch is stored.
//! A batch that fails as a whole (Redis away, a timeout, a script error, too few
//! replicas) acknowledges nothing: every entry in it gets the same error, `Unknown`
//! unless the request certainly never ran, and each room resolves its own entry by reading
//! the log back, as it does for a single append.
//!
//! Order: a room has at most one append in flight (its mailbox waits for it), the queue
//! is first in, first out, and the script runs entries in queue order.
//!
//! Threads: each thread that appends (an actix arbiter: the rooms on it) has its own
//! queue, task and Redis connection, all on that thread. A room's append then crosses no
//! thread on its way to the socket and back: on a node pinned to one core, the hand-off
//! to a connection driven by another thread cost two context switches per action, the
//! largest single item in a profile of the node (issue 15).
//!
//! Before it cuts a batch the task lets the rest of its thread's tick run
//! ([`let_the_tick_finish`]), so the rooms woken in the same round add their entries.
//! A batch window (`ROOMD__CLUSTER__BATCH_WINDOW_MS`, 1 ms by default) makes the task
//! wait that long after a batch's first entry before it takes the rest, but only while
//! the queue is busy enough to fill it (`pace.rs`): at a steady rate the entries are
//! spread in time, and what gathers while one batch is in flight is only what arrived
//! in one round trip (1–2 entries here); a window of a millisecond gathers several times
//! that, for that much more latency per action. A quiet queue never waits.
//!
//! A Redis Cluster keeps one `EVALSHA` per append (a script may touch one slot only, and
//! rooms are spread over slots); the cluster connection pipelines those per master.

use crate::error::StoreError;
use crate::keys::Keys;
use crate::pace::{gather, Pace};
use crate::redis_conn::{RedisConn, RedisTarget, ThreadConns};
use redis::{Cmd, Script, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// At most this many entries go in one batch.
pub const MAX_BATCH: usize = 256;
/// A batch stops taking entries once their bytes reach this.
pub const MAX_BATCH_BYTES: usize = 512 * 1024;

pub(crate) const APPEND_MANY_LUA: &str = include_str!("lua/append_many.lua");

/// What happened to one entry of a batch that ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Appended {
    Stored,
    /// The room's lease names another writer.
    Fenced,
    /// The log's last seq is `last`, so this entry's seq is not the next one.
    Conflict {
        last: u64,
    },
}

/// One entry waiting for its batch.
struct Pending {
    keys: [String; 3],
    seq: u64,
    bytes: Vec<u8>,
    token: String,
    done: oneshot::Sender<Result<Appended, StoreError>>,
}

/// `WAIT` after each batch: how many replicas, how long, and the message when short.
#[derive(Clone)]
pub(crate) struct Replicated {
    pub replicas: u32,
    pub wait: Cmd,
    pub short: Arc<dyn Fn(i64) -> String + Send + Sync>,
}

/// Batches appended and entries in them since start (`roomd_store_append_batches_total`
/// and its entries; tests read them too).
#[derive(Default)]
pub struct BatchStats {
    pub batches: AtomicU64,
    pub entries: AtomicU64,
}

/// The node's append queues, one per appending thread, each with its task and its own
/// Redis connection on that thread (made on the queue's first batch; a queue starts on
/// first use, and again if the runtime it ran on went away).
pub(crate) struct Appender {
    conns: Conns,
    script: Script,
    replicated: Option<Replicated>,
    /// How long a batch's first entry waits for others (zero: not at all).
    window: Duration,
    queues: Mutex<HashMap<ThreadId, mpsc::UnboundedSender<Pending>>>,
    pub stats: Arc<BatchStats>,
}

/// Where a queue's batches go.
#[derive(Clone)]
enum Conns {
    /// The thread's shared connection (its bus frames go there too).
    Shared(Arc<ThreadConns>),
    /// A connection of the queue's own: the batch's `WAIT` blocks the connection it is
    /// sent on, so replicated batches never share one.
    Own(RedisTarget),
}

impl Appender {
    /// Appends through each thread's shared connection to one Redis (never a Redis
    /// Cluster: see the module doc).
    pub fn shared(conns: Arc<ThreadConns>) -> Appender {
        Appender::with(Conns::Shared(conns), None)
    }

    /// Appends on connections of the queues' own, each batch followed by `WAIT`.
    pub fn replicated(target: RedisTarget, replicated: Replicated) -> Appender {
        Appender::with(Conns::Own(target), Some(replicated))
    }

    fn with(conns: Conns, replicated: Option<Replicated>) -> Appender {
        Appender {
            conns,
            script: Script::new(APPEND_MANY_LUA),
            replicated,
            window: Duration::ZERO,
            queues: Mutex::default(),
            stats: Arc::default(),
        }
    }

    /// The same appender with a batch window of `window` (before its first append).
    pub fn windowed(&self, window: Duration) -> Appender {
        Appender { window, ..Appender::with(self.conns.clone(), self.replicated.clone()) }
    }

    /// Appends `bytes` (the encoded entry `seq`) to `room`'s game log `pk` in the next
    /// batch, fenced by `token` unless it is empty.
    pub async fn append(
        self: &Arc<Self>,
        keys: &Keys,
        room: &str,
        pk: &str,
        seq: u64,
        bytes: Vec<u8>,
        token: String,
    ) -> Result<Appended, StoreError> {
        let (done, rx) = oneshot::channel();
        let pending =
            Pending { keys: [keys.log(room, pk), keys.seq(room, pk), keys.lease(room)], seq, bytes, token, done };
        self.push(pending)?;
        rx.await.unwrap_or_else(|_| Err(StoreError::Unknown("the append queue stopped with the entry in it".into())))
    }

    fn push(self: &Arc<Self>, mut pending: Pending) -> Result<(), StoreError> {
        let mut queues =
            self.queues.lock().map_err(|_| StoreError::Unavailable("the append queue is poisoned".into()))?;
        let thread = std::thread::current().id();
        if let Some(tx) = queues.get(&thread) {
            match tx.send(pending) {
                Ok(()) => return Ok(()),
                // Its task's runtime is gone: start a fresh queue here.
                Err(mpsc::error::SendError(back)) => pending = back,
            }
        }
        // Queues of runtimes that are gone (a test's, a stopped arbiter's) go with them.
        queues.retain(|_, tx| !tx.is_closed());
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(drain(self.clone(), rx));
        let _ = tx.send(pending);
        queues.insert(thread, tx);
        Ok(())
    }

    /// A queue task's connection: the thread's shared one, or its own made on its first
    /// use (so on the task's thread).
    async fn connection(&self, own: &mut Option<RedisConn>) -> Result<RedisConn, StoreError> {
        match &self.conns {
            Conns::Shared(conns) => conns.get().await,
            Conns::Own(target) => Ok(match own {
                Some(c) => c.clone(),
                None => own.insert(target.connect().await?).clone(),
            }),
        }
    }

    /// Runs one batch on `conn`: per-entry outcomes in order, or the error every entry
    /// shares.
    async fn run(&self, conn: &RedisConn, batch: &[Pending]) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(batch.len() * 3);
        for p in batch {
            cmd.arg(&p.keys[..]);
        }
        for p in batch {
            cmd.arg(p.seq).arg(&p.bytes[..]).arg(p.token.as_bytes());
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd);
        if let Some(r) = &self.replicated {
            pipe.add_command(r.wait.clone());
        }
        let replies: Vec<Value> =
            crate::redis_store::RedisStore::with_script(conn, APPEND_MANY_LUA, &pipe).await.map_err(|e| {
                if e.is_connection_refusal() {
                    StoreError::Unavailable(e.to_string())
                } else {
                    StoreError::Unknown(e.to_string())
                }
            })?;
        let mut replies = replies.into_iter();
        let outcomes = parse(replies.next(), batch.len())?;
        if let Some(r) = &self.replicated {
            let got = match replies.next() {
                Some(Value::Int(n)) => n,
                other => return Err(StoreError::Unknown(format!("WAIT answered {other:?}"))),
            };
            // Stored on the master, not (yet) on enough replicas: nothing is acknowledged.
            if got < i64::from(r.replicas) {
                return Err(StoreError::Unknown((r.short)(got)));
            }
        }
        Ok(outcomes)
    }
}

/// The script's answer: one outcome per entry (an entry whose `XADD` failed is certainly
/// not stored: `Unavailable`, for that entry alone).
fn parse(reply: Option<Value>, n: usize) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
    let odd = |what: &dyn std::fmt::Debug| StoreError::Unknown(format!("the append script answered {what:?}"));
    let Some(Value::Array(items)) = reply else { return Err(odd(&reply)) };
    if items.len() != n {
        return Err(odd(&format!("{} replies for {n} entries", items.len())));
    }
    let outcome = |item: Value| match &item {
        Value::Int(_) => Ok(Ok(Appended::Stored)),
        Value::BulkString(word) if word.as_slice() == b"FENCED" => Ok(Ok(Appended::Fenced)),
        Value::BulkString(word) => {
            let word = std::str::from_utf8(word).map_err(|_| odd(&item))?;
            if let Some(why) = word.strip_prefix("ERROR ") {
                return Ok(Err(StoreError::Unavailable(format!("the log append failed: {why}"))));
            }
            word.strip_prefix("CONFLICT ")
                .and_then(|last| last.trim().parse().ok())
                .map(|last| Ok(Appended::Conflict { last }))
                .ok_or_else(|| odd(&item))
        }
        _ => Err(odd(&item)),
    };
    items.into_iter().map(outcome).collect()
}

/// Lets the rest of this thread's tick run before a batch is cut: the tasks already
/// woken (rooms whose actions the same `epoll` round delivered) run first and add what
/// they have, and the reactor is polled once more. Without it a queue woken by the first
/// room of a tick sends that room's entry alone and the others wait for the next round
/// trip. It costs one task poll per batch and no timer, and adds no wait beyond the tick
/// itself (a yielded task is run again once the tasks ahead of it and one non-blocking
/// reactor poll are done). Its measured effect is in benches/README.md ("The rest of the
/// tick before a batch is cut").
pub(crate) async fn let_the_tick_finish() {
    tokio::task::yield_now().await;
}

/// The queue's task: takes the first entry, waits out the batch window where the queue's
/// rate fills it (`pace.rs`), then takes whatever else is queued (up to the bounds),
/// runs them as one batch, answers each, and again. It connects on its first batch, so
/// the connection is driven on this thread; a failed connect fails that batch (nothing
/// was sent: `Unavailable`) and the next batch tries again.
async fn drain(appender: Arc<Appender>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut conn: Option<RedisConn> = None;
    let mut pace = Pace::new(appender.window);
    while let Some(first) = rx.recv().await {
        // The window where this queue's rate fills it, else the rest of the tick; a full
        // batch already waiting goes at once.
        gather(&mut pace, rx.len(), MAX_BATCH).await;
        let mut bytes = first.bytes.len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += p.bytes.len();
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        pace.cut(batch.len());
        appender.stats.batches.fetch_add(1, Ordering::Relaxed);
        appender.stats.entries.fetch_add(batch.len() as u64, Ordering::Relaxed);
        let ran = match appender.connection(&mut conn).await {
            Ok(c) => appender.run(&c, &batch).await,
            Err(e) => Err(e),
        };
        match ran {
            Ok(outcomes) => {
                for (p, outcome) in batch.into_iter().zip(outcomes) {
                    let _ = p.done.send(outcome);
                }
            }
            Err(e) => {
                for p in batch {
                    let _ = p.done.send(Err(e.clone()));
                }
            }
        }
        pace.done(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_replies_read_as_one_outcome_per_entry() {
        let reply = Value::Array(vec![
            Value::Int(7),
            Value::BulkString(b"FENCED".to_vec()),
            Value::BulkString(b"CONFLICT 41".to_vec()),
            Value::BulkString(b"ERROR WRONGTYPE Operation against a key holding the wrong kind of value".to_vec()),
        ]);
        let outcomes = parse(Some(reply), 4).unwrap();
        assert_eq!(outcomes[..3], [Ok(Appended::Stored), Ok(Appended::Fenced), Ok(Appended::Conflict { last: 41 })]);
        assert!(matches!(&outcomes[3], Err(StoreError::Unavailable(why)) if why.contains("WRONGTYPE")), "{outcomes:?}");
    }

    #[test]
    fn a_reply_that_does_not_fit_the_batch_acknowledges_nothing() {
        let two = Value::Array(vec![Value::Int(1), Value::Int(2)]);
        assert!(matches!(parse(Some(two), 3), Err(StoreError::Unknown(_))));
        let odd = Value::Array(vec![Value::BulkString(b"CONFLICT x".to_vec())]);
        assert!(matches!(parse(Some(odd), 1), Err(StoreError::Unknown(_))));
        assert!(matches!(parse(Some(Value::Nil), 1), Err(StoreError::Unknown(_))));
        assert!(matches!(parse(None, 1), Err(StoreError::Unknown(_))));
    }
}
