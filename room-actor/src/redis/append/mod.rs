//! Group commit for log appends (one Redis, or each master of a Redis Cluster): the rooms
//! on one thread hand their fenced appends to that thread's queue, and its task sends
//! whatever gathered while its previous batch was in flight in one round trip (then `WAIT` when replicated acknowledgements
//! are on). A quiet node pays the one round trip per append it paid before; a busy one
//! pays one per batch instead of one per room.
//!
//! **Two ways in.** A log's ids are `<lease epoch>-<seq>` (`lua/append_checked.lua`), so
//! Redis itself refuses an entry below the log's last id: an owner's entries can never go
//! in after a newer owner's fence (`lua/fence.lua`, written when a node takes a room over,
//! before it reads the log) or after its own entry of that seq.
//! - The **checked** append, `lua/append_checked.lua`: per entry, the lease token, the
//!   seq against the log's top (and the top against the entry below it), then `XADD`. A
//!   refused entry is refused alone. A room's first append under its lease goes this way.
//! - The **fast** append: a bare `XADD <epoch>-<seq>`, no script. It is taken only for the
//!   entry that follows, under the same lease token, the last one this queue itself stored
//!   in that log, so the only thing left to check is that nothing this queue stored since
//!   was lost (a Redis restart or a failover to a replica that had not seen it), which
//!   would let the entry go in above a hole. Each batch therefore ends with `INCR` of the
//!   queue's own canary key: Redis keeps a prefix of what it executed, in order, so the
//!   counter at exactly one more than last time means every earlier write of this queue
//!   is still there. A counter that is not is a loss: the batch's fast entries are checked
//!   again by the script (which removes an entry above a hole and reports the log's real
//!   end), and the queue forgets every log it knew. A fast `XADD` that Redis refuses (a
//!   newer owner's fence, or the entry already there) is checked the same way, which
//!   tells which it was. Checked or fast, nothing is acknowledged that the log does not
//!   hold in order.
//!
//! A batch that fails as a whole (Redis away, a timeout, a script error, too few
//! replicas) acknowledges nothing: every entry in it gets the same error, `Unknown`
//! unless the request certainly never ran, and each room resolves its own entry by reading
//! the log back, as it does for a single append. The queue then forgets what it knew.
//!
//! Order: a room has at most one append in flight (its mailbox waits for it), an entry
//! joins the queue when the room asks for its append (not when its future is first
//! polled), the queue is first in, first out, and a batch's commands run in queue order.
//!
//! Threads: each thread that appends (an actix arbiter: the rooms on it) has its own
//! queue, task and Redis connection, all on that thread. A room's append then crosses no
//! thread on its way to the socket and back: on a node pinned to one core, the hand-off
//! to a connection driven by another thread cost two context switches per action, the
//! largest single item in a profile of the node (issue 15). A room never changes thread,
//! so its appends always meet the same queue.
//!
//! Before it cuts a batch the task lets the rest of its thread's tick run
//! ([`let_the_tick_finish`](crate::pace::let_the_tick_finish)), so the rooms woken in the
//! same round add their entries.
//! A batch window (`ROOMD__CLUSTER__BATCH_WINDOW_MS`, at most 5 ms by default) makes the
//! task wait after a batch's first entry before it takes the rest, but only while the
//! queue is busy enough to fill it, and only until five more have come (at most as long
//! as its rate says they take, `pace.rs`): at a steady rate the entries are spread in
//! time, and what gathers while one batch is in flight is only what arrived in one round
//! trip (1–2 entries here); the wait gathers several times that, for that much more
//! latency per action. A quiet queue never waits.
//!
//! **A Redis Cluster** runs the same group commit per master. A batch splits by the
//! master that serves each entry's slot, as the node last read the slot map
//! ([`Masters`](crate::redis::slots::Masters)), and each part goes to its master in one
//! pipeline, the parts at once (`queue::Group`). Each part ends with the `INCR` of the
//! queue's canary *on that master* (a key whose hash tag lands in one of its slots): a
//! failover promotes a replica holding a prefix of its master's writes, canary included,
//! so the argument above holds master by master. A log's fast path is taken only under
//! the canary that vouched for its last entry (a slot moved to another master is checked
//! again there). The checked script goes as one `EVAL` per entry: a script's keys must
//! be in one slot (a room's are). A slot map that is out of date costs a failed part,
//! never a wrong answer: a pipeline whose keys are not all on the master it went to
//! fails whole (on a cluster any refused command fails its pipeline), its entries are
//! `Unknown` and resolved by reading back, and the failure has the node read the map
//! again. Before the map is first read, a part goes per slot, with a canary in that
//! slot.
//!
//! # Layout
//!
//! - this file: the [`Appender`] (its queues, one per thread, and how it connects) and
//!   what an entry is on its way: [`Pending`] in its queue, [`Queued`] to its room,
//!   [`Appended`] once its batch ran.
//! - `queue`: a queue's task (`drain`: the batch window, a batch cut, its outcomes
//!   answered), what the queue knows for the fast path (its canaries, each log's last
//!   entry), and a batch's split by server.
//! - `batch`: one batch on the wire: the fast `XADD`s, the checked script, the canary's
//!   `INCR`, `WAIT`, and the replies read into one outcome per entry.

mod batch;
mod queue;

use crate::error::StoreError;
use crate::redis::conn::{RedisConn, ThreadConns};
use crate::redis::keys::Keys;
use crate::redis::target::RedisTarget;
use queue::drain;
use redis::{Cmd, Script};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// At most this many entries go in one batch.
pub const MAX_BATCH: usize = 256;
/// A batch stops taking entries once their bytes reach this.
pub const MAX_BATCH_BYTES: usize = 512 * 1024;

pub(crate) const APPEND_CHECKED_LUA: &str = include_str!("../lua/append_checked.lua");

/// After this many `WAIT`s in a row on one connection (the store's acknowledgement
/// connections) or one master (a queue's batches) count too few replicas, the connection
/// is suspected ([`RedisConn::suspect`](crate::redis::conn::RedisConn::suspect): a Redis
/// Cluster one is replaced): replicas that are linked are counted within a `WAIT`'s
/// timeout, so shorts that go on may be a connection that reaches the wrong server.
/// Replaced or not, the writes keep being refused until the replicas count
/// (level-triggered: nothing here assumes why).
pub(crate) const SUSPECT_AFTER_SHORTS: u32 = 3;

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
    log: String,
    lease: String,
    seq: u64,
    bytes: Vec<u8>,
    token: String,
    /// The token's lease epoch (its ids' first part); 0 without a token.
    epoch: u64,
    done: oneshot::Sender<Result<Appended, StoreError>>,
}

/// An entry in its queue: resolves to its outcome once its batch ran.
pub struct Queued(oneshot::Receiver<Result<Appended, StoreError>>);

impl Queued {
    pub async fn outcome(self) -> Result<Appended, StoreError> {
        self.0
            .await
            .unwrap_or_else(|_| Err(StoreError::Unknown("the append queue stopped with the entry in it".into())))
    }
}

/// The epoch in an owner token `node/epoch` (0 for no token, or one without an epoch).
pub fn epoch_of(token: &str) -> u64 {
    token.rsplit_once('/').and_then(|(_, epoch)| epoch.parse().ok()).unwrap_or(0)
}

/// `WAIT` after each batch: how many replicas, how long, and the message when short.
#[derive(Clone)]
pub(crate) struct Replicated {
    pub replicas: u32,
    pub wait: Cmd,
    pub short: Arc<dyn Fn(i64) -> String + Send + Sync>,
}

/// Batches appended and entries in them since start (`roomd_store_append_batches_total`
/// and its entries; tests read them too), and how many entries went on the fast path.
#[derive(Default)]
pub struct BatchStats {
    pub batches: AtomicU64,
    pub entries: AtomicU64,
    pub fast: AtomicU64,
}

/// The node's append queues, one per appending thread, each with its task and its own
/// Redis connection on that thread (made on the queue's first batch; a queue starts on
/// first use, and again if the runtime it ran on went away).
pub(crate) struct Appender {
    conns: Conns,
    /// On a Redis Cluster: a batch splits by master (`Queue::groups`).
    cluster: bool,
    script: Script,
    replicated: Option<Replicated>,
    /// How long a batch's first entry waits for others (zero: not at all).
    window: Duration,
    /// The queues' canary keys start with this (each adds an id of its own).
    canary: String,
    queues: Mutex<crate::FastMap<ThreadId, mpsc::UnboundedSender<Pending>>>,
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
    /// Appends through each thread's shared connection to one Redis or, with `cluster`,
    /// a Redis Cluster.
    pub fn shared(conns: Arc<ThreadConns>, keys: &Keys, cluster: bool) -> Appender {
        Appender::with(Conns::Shared(conns), cluster, None, keys.appender_canary())
    }

    /// Appends on connections of the queues' own, each batch followed by `WAIT`.
    pub fn replicated(&self, target: RedisTarget, replicated: Replicated) -> Appender {
        Appender::with(Conns::Own(target), self.cluster, Some(replicated), self.canary.clone())
    }

    fn with(conns: Conns, cluster: bool, replicated: Option<Replicated>, canary: String) -> Appender {
        Appender {
            conns,
            cluster,
            script: Script::new(APPEND_CHECKED_LUA),
            replicated,
            window: Duration::ZERO,
            canary,
            queues: Mutex::default(),
            stats: Arc::default(),
        }
    }

    /// Batches sent and the entries in them.
    pub fn batches(&self) -> (u64, u64) {
        (self.stats.batches.load(Ordering::Relaxed), self.stats.entries.load(Ordering::Relaxed))
    }

    /// Entries appended on the fast path since start.
    pub fn fast(&self) -> u64 {
        self.stats.fast.load(Ordering::Relaxed)
    }

    /// The same appender with a batch window of `window` (before its first append).
    pub fn windowed(&self, window: Duration) -> Appender {
        let same = Appender::with(self.conns.clone(), self.cluster, self.replicated.clone(), self.canary.clone());
        Appender { window, ..same }
    }

    /// Queues `bytes` (the encoded entry `seq`) for `room`'s game log `pk` in the next
    /// batch, fenced by `token` unless it is empty, at once (on the calling thread's
    /// queue): the returned [`Queued`] only waits for the outcome. A room's every action
    /// takes this path, so what waits is a channel, not a future that holds the store.
    pub fn enqueue(
        self: &Arc<Self>,
        keys: &Keys,
        room: &str,
        pk: &str,
        seq: u64,
        bytes: Vec<u8>,
        token: String,
    ) -> Result<Queued, StoreError> {
        let (done, rx) = oneshot::channel();
        let pending = Pending {
            log: keys.log(room, pk),
            lease: keys.lease(room),
            seq,
            bytes,
            epoch: epoch_of(&token),
            token,
            done,
        };
        self.push(pending)?;
        Ok(Queued(rx))
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
}

#[cfg(test)]
mod tests {
    use super::batch::parse;
    use super::queue::{Queue, FORGET_AFTER};
    use super::*;
    use crate::redis::slots::{slot_of, Masters};
    use redis::Value;
    use std::time::Instant;

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

    #[test]
    fn an_owner_tokens_epoch_is_its_last_part() {
        assert_eq!(epoch_of("node-a/17"), 17);
        assert_eq!(epoch_of("a/b/3"), 3);
        assert_eq!(epoch_of(""), 0);
        assert_eq!(epoch_of("no-epoch"), 0);
        assert_eq!(epoch_of("node/x"), 0);
    }

    fn pending(log: &str, seq: u64, token: &str) -> Pending {
        let (done, _) = oneshot::channel();
        Pending {
            log: log.into(),
            lease: String::new(),
            seq,
            bytes: Vec::new(),
            epoch: epoch_of(token),
            token: token.into(),
            done,
        }
    }

    #[test]
    fn a_queue_takes_the_fast_path_only_for_the_entry_after_its_own_under_the_same_token_and_canary() {
        let mut queue = Queue::new("c");
        let (a, b): (Arc<str>, Arc<str>) = ("canary-a".into(), "canary-b".into());
        assert!(!queue.follows(&pending("log", 1, "a/1"), &a), "a log it never wrote");
        queue.stored(&pending("log", 4, "a/1"), &a);
        assert!(queue.follows(&pending("log", 5, "a/1"), &a));
        assert!(!queue.follows(&pending("log", 5, "a/1"), &b), "vouched for by another canary");
        assert!(!queue.follows(&pending("log", 6, "a/1"), &a), "not the next seq");
        assert!(!queue.follows(&pending("log", 4, "a/1"), &a), "its own seq again");
        assert!(!queue.follows(&pending("log", 5, "a/2"), &a), "another lease");
        assert!(!queue.follows(&pending("other", 5, "a/1"), &a), "another log");
        queue.reset();
        assert!(!queue.follows(&pending("log", 5, "a/1"), &a), "a reset forgets");
        queue.stored(&pending("log", 5, "a/1"), &a);
        queue.sweep(Instant::now() + FORGET_AFTER + Duration::from_secs(1));
        assert!(!queue.follows(&pending("log", 6, "a/1"), &a), "a log left alone is forgotten");
    }

    #[test]
    fn one_redis_takes_a_batch_as_one_group_with_the_queues_canary() {
        let mut queue = Queue::new("p:appender");
        let batch = [pending("p:{room:a}:game:g:log", 1, ""), pending("p:{room:b}:game:g:log", 1, "")];
        let groups = queue.groups(false, None, &batch);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].entries, [0, 1]);
        assert!(groups[0].canary.starts_with("p:appender:") && !groups[0].canary.contains('{'), "{}", groups[0].canary);
    }

    #[test]
    fn a_redis_cluster_batch_splits_by_master_each_with_a_canary_on_that_master() {
        let masters = Arc::new(Masters(vec![
            (0, 5460, "127.0.0.1:7001".into()),
            (5461, 10922, "127.0.0.1:7002".into()),
            (10923, 16383, "127.0.0.1:7003".into()),
        ]));
        let mut queue = Queue::new("p:appender");
        let batch: Vec<Pending> = (0..40).map(|i| pending(&format!("p:{{room:r{i}}}:game:g:log"), 1, "")).collect();
        let groups = queue.groups(true, Some(masters.clone()), &batch);
        assert_eq!(groups.len(), 3, "one group per master");
        let mut all: Vec<usize> = groups.iter().flat_map(|g| g.entries.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..40).collect::<Vec<_>>(), "every entry in one group");
        for group in &groups {
            let master = masters.of(slot_of(group.canary.as_bytes()));
            assert_eq!(slot_of(group.canary.as_bytes()), group.slot);
            assert!(group.entries.windows(2).all(|w| w[0] < w[1]), "queue order within a group");
            for &i in &group.entries {
                assert_eq!(masters.of(slot_of(batch[i].log.as_bytes())), master, "entry {i} is on its canary's master");
            }
        }
        let again = queue.groups(true, Some(masters.clone()), &batch);
        assert_eq!(
            again.iter().map(|g| g.canary.clone()).collect::<Vec<_>>(),
            groups.iter().map(|g| g.canary.clone()).collect::<Vec<_>>(),
            "the same canaries batch after batch"
        );
        // Before the map is read: one group per slot, its canary in the entry's own slot.
        let unmapped = queue.groups(true, None, &batch[..2]);
        assert_eq!(unmapped.len(), 2);
        for (group, p) in unmapped.iter().zip(&batch) {
            assert_eq!(slot_of(group.canary.as_bytes()), slot_of(p.log.as_bytes()));
            assert_eq!(group.slot, slot_of(p.log.as_bytes()));
        }
    }
}
