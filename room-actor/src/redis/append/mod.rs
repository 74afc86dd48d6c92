//! Group commit for log appends on one Redis: the rooms on one thread hand their fenced
//! appends to that thread's queue, and its task sends whatever gathered while its previous
//! batch was in flight in one round trip (then `WAIT` when replicated acknowledgements
//! are on). A quiet node pays the one round trip per append it paid before; a busy one
//! pays one per batch instead of one per room.
//!
//! **Two ways in.** A log's ids are `<lease epoch>-<seq>` (`lua/append_checked.lua`), so
//! Redis itself refuses an entry below the log's last id: an owner's entries can never go
//! in after a newer owner's fence (`lua/fence.lua`, written when a node takes a room over,
//! before it reads the log) or after its own entry of that seq.
//! - The **checked** append, `lua/append_checked.lua`: per entry, the lease token, the
//!   seq against the log's top (and the top against the entry below it), then `XADD`. A
//!   refused entry is refused alone. A room's first append under its lease goes this way,
//!   as does every append while the cluster may still have older roomds in it.
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
//! A Redis Cluster keeps one `EVALSHA` of `lua/append.lua` per append (a script may
//! touch one slot only, and rooms are spread over slots); the cluster connection
//! pipelines those per master.

use crate::error::StoreError;
use crate::pace::{gather, Pace};
use crate::redis::conn::{RedisConn, ThreadConns};
use crate::redis::keys::Keys;
use crate::redis::target::RedisTarget;
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, Script, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

/// At most this many entries go in one batch.
pub const MAX_BATCH: usize = 256;
/// A batch stops taking entries once their bytes reach this.
pub const MAX_BATCH_BYTES: usize = 512 * 1024;
/// How long a queue's canary key lives unless a batch refreshes it (a queue refreshes
/// it every [`CANARY_REFRESH_EVERY`] batches; the key of a stopped node goes with time).
const CANARY_TTL_MS: u64 = 24 * 3600 * 1000;
const CANARY_REFRESH_EVERY: u32 = 1000;
/// A queue forgets a log it has not appended to for this long (the next append there is
/// checked), so what it knows stays as small as the rooms that are playing.
const FORGET_AFTER: Duration = Duration::from_secs(120);

pub(crate) const APPEND_CHECKED_LUA: &str = include_str!("../lua/append_checked.lua");

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
    counter: String,
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
    script: Script,
    replicated: Option<Replicated>,
    /// How long a batch's first entry waits for others (zero: not at all).
    window: Duration,
    /// Every node of the cluster writes the epoch layout (set once, never cleared): the
    /// fast path is open, and the checked append stops keeping the legacy layout.
    fast: Arc<AtomicBool>,
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
    /// Appends through each thread's shared connection to one Redis (never a Redis
    /// Cluster: see the module doc).
    pub fn shared(conns: Arc<ThreadConns>, keys: &Keys) -> Appender {
        Appender::with(Conns::Shared(conns), None, keys.appender_canary(), Arc::default())
    }

    /// Appends on connections of the queues' own, each batch followed by `WAIT`.
    pub fn replicated(&self, target: RedisTarget, replicated: Replicated) -> Appender {
        Appender::with(Conns::Own(target), Some(replicated), self.canary.clone(), self.fast.clone())
    }

    fn with(conns: Conns, replicated: Option<Replicated>, canary: String, fast: Arc<AtomicBool>) -> Appender {
        Appender {
            conns,
            script: Script::new(APPEND_CHECKED_LUA),
            replicated,
            window: Duration::ZERO,
            fast,
            canary,
            queues: Mutex::default(),
            stats: Arc::default(),
        }
    }

    /// The same appender with a batch window of `window` (before its first append).
    pub fn windowed(&self, window: Duration) -> Appender {
        Appender {
            window,
            ..Appender::with(self.conns.clone(), self.replicated.clone(), self.canary.clone(), self.fast.clone())
        }
    }

    /// From now on every node writes the epoch layout: appends may take the fast path.
    pub fn open_fast_path(&self) {
        self.fast.store(true, Ordering::Release);
    }

    pub fn fast_path_open(&self) -> bool {
        self.fast.load(Ordering::Acquire)
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
            counter: keys.seq(room, pk),
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

    /// The checked append of `entries` as one `EVALSHA` (the legacy layout kept unless
    /// the fast path is open).
    fn checked(&self, batch: &[Pending], entries: &[usize]) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(entries.len() * 3);
        for &i in entries {
            let p = &batch[i];
            cmd.arg(&p.log).arg(&p.counter).arg(&p.lease);
        }
        cmd.arg(if self.fast_path_open() { "0" } else { "1" });
        for &i in entries {
            let p = &batch[i];
            cmd.arg(p.seq).arg(&p.bytes[..]).arg(p.token.as_bytes()).arg(p.epoch);
        }
        cmd
    }

    /// Runs one batch on `conn`: one outcome per entry, in order.
    async fn run(&self, conn: &RedisConn, queue: &mut Queue, batch: &[Pending]) -> Vec<Result<Appended, StoreError>> {
        let fast_open = self.fast_path_open();
        let (fast, checked): (Vec<usize>, Vec<usize>) = (0..batch.len()).partition(|&i| {
            let p = &batch[i];
            fast_open && queue.canary.is_some() && p.epoch > 0 && queue.follows(p)
        });
        self.stats.fast.fetch_add(fast.len() as u64, Ordering::Relaxed);
        let mut outcomes: Vec<Option<Result<Appended, StoreError>>> = vec![None; batch.len()];
        // Entries to check again with the script: (index, its fast `XADD` stored it).
        let mut again: Vec<(usize, bool)> = Vec::new();
        match self.round(conn, queue, batch, &fast, &checked, false).await {
            Err(e) => return self.failed(queue, batch, e),
            Ok(round) => {
                if round.lost {
                    // Redis lost writes of this queue: nothing it knew holds any more.
                    warn!(canary = %queue.canary_key, "an append queue's canary did not move by one: Redis lost writes \
                        (a restart or a failover); this batch's entries are checked again");
                    queue.known.clear();
                }
                for (&i, stored) in fast.iter().zip(round.fast) {
                    if stored && round.intact {
                        outcomes[i] = Some(Ok(Appended::Stored));
                    } else {
                        again.push((i, stored));
                    }
                }
                match round.checked {
                    Some(Ok(results)) => {
                        for (&i, result) in checked.iter().zip(results) {
                            outcomes[i] = Some(result);
                        }
                    }
                    Some(Err(Retry::NoScript)) => again.extend(checked.iter().map(|&i| (i, false))),
                    Some(Err(Retry::Failed(e))) => {
                        for &i in &checked {
                            outcomes[i] = Some(Err(e.clone()));
                        }
                    }
                    None => {}
                }
            }
        }
        if !again.is_empty() {
            again.sort_unstable();
            let entries: Vec<usize> = again.iter().map(|(i, _)| *i).collect();
            match self.round(conn, queue, batch, &[], &entries, true).await {
                Err(e) => {
                    queue.reset();
                    for &i in &entries {
                        outcomes[i] = Some(Err(e.clone()));
                    }
                }
                Ok(round) => {
                    if round.lost {
                        queue.known.clear();
                    }
                    let results = match round.checked {
                        Some(Ok(results)) => results.into_iter().map(Some).collect(),
                        Some(Err(Retry::NoScript)) => {
                            let e = StoreError::Unknown("Redis forgot the append script twice".into());
                            vec![Some(Err(e)); entries.len()]
                        }
                        Some(Err(Retry::Failed(e))) => vec![Some(Err(e)); entries.len()],
                        None => vec![None; entries.len()],
                    };
                    for ((i, stored_fast), result) in again.into_iter().zip(results) {
                        outcomes[i] = match (stored_fast, result) {
                            // Its own fast entry is the log's top, and the check found it
                            // follows the entry below: stored.
                            (true, Some(Ok(Appended::Conflict { last }))) if last == batch[i].seq => {
                                Some(Ok(Appended::Stored))
                            }
                            (_, result) => result,
                        };
                    }
                }
            }
        }
        let outcomes: Vec<Result<Appended, StoreError>> = outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Err(StoreError::Unknown("the append batch gave this entry no outcome".into())))
            })
            .collect();
        for (p, outcome) in batch.iter().zip(&outcomes) {
            match outcome {
                // Only an entry stored in the epoch layout opens its log's fast path: a log
                // in the legacy layout is fenced by its lease alone (`lua/fence.lua`).
                Ok(Appended::Stored) if fast_open => queue.stored(p),
                _ => {
                    queue.known.remove(&p.log);
                }
            }
        }
        outcomes
    }

    /// Every entry of the batch fails with `e`; what the queue knew no longer holds.
    fn failed(&self, queue: &mut Queue, batch: &[Pending], e: StoreError) -> Vec<Result<Appended, StoreError>> {
        queue.reset();
        vec![Err(e); batch.len()]
    }

    /// One round trip: the `fast` entries' `XADD`s, the `checked` entries' script (loaded
    /// first when `load`), the canary's `INCR` and, when replicated, `WAIT`. An error is
    /// what every entry of the round shares (the request failed, or too few replicas).
    async fn round(
        &self,
        conn: &RedisConn,
        queue: &mut Queue,
        batch: &[Pending],
        fast: &[usize],
        checked: &[usize],
        load: bool,
    ) -> Result<Round, StoreError> {
        let mut pipe = Pipeline::with_capacity(fast.len() + 5);
        for &i in fast {
            let p = &batch[i];
            let mut xadd = redis::cmd("XADD");
            let (mut epoch, mut seq) = (itoa::Buffer::new(), itoa::Buffer::new());
            let mut id = String::with_capacity(41);
            id.push_str(epoch.format(p.epoch));
            id.push('-');
            id.push_str(seq.format(p.seq));
            xadd.arg(&p.log).arg(id).arg("e").arg(&p.bytes[..]);
            pipe.add_command(xadd);
        }
        if !checked.is_empty() {
            if load {
                pipe.add_command(redis::cmd("SCRIPT").arg("LOAD").arg(APPEND_CHECKED_LUA).clone());
            }
            pipe.add_command(self.checked(batch, checked));
        }
        pipe.add_command(redis::cmd("INCR").arg(&queue.canary_key).clone());
        let refresh = queue.canary.is_none() || queue.since_refresh >= CANARY_REFRESH_EVERY;
        if refresh {
            pipe.add_command(redis::cmd("PEXPIRE").arg(&queue.canary_key).arg(CANARY_TTL_MS).clone());
        }
        if let Some(r) = &self.replicated {
            pipe.add_command(r.wait.clone());
        }
        let count = pipe.len();
        let mut c = conn.clone();
        let replies = c.req_packed_commands(&pipe, 0, count).await.map_err(|e| {
            if e.is_connection_refusal() {
                StoreError::Unavailable(e.to_string())
            } else {
                StoreError::Unknown(e.to_string())
            }
        })?;
        if replies.len() != count {
            return Err(StoreError::Unknown(format!("{} replies to a pipeline of {count}", replies.len())));
        }
        let mut replies = replies.into_iter();
        let fast_stored: Vec<bool> =
            fast.iter().map(|_| !matches!(replies.next(), Some(Value::ServerError(_)) | None)).collect();
        let checked = if checked.is_empty() {
            None
        } else {
            if load {
                replies.next();
            }
            Some(match replies.next() {
                Some(Value::ServerError(e)) if e.code() == "NOSCRIPT" => Err(Retry::NoScript),
                reply => parse(reply, checked.len()).map_err(Retry::Failed),
            })
        };
        let canary = match replies.next() {
            Some(Value::Int(n)) => n,
            other => return Err(StoreError::Unknown(format!("the append canary's INCR answered {other:?}"))),
        };
        if refresh {
            replies.next();
            queue.since_refresh = 0;
        } else {
            queue.since_refresh += 1;
        }
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
        let intact = queue.canary.is_some_and(|last| canary == last + 1);
        let lost = queue.canary.is_some() && !intact;
        queue.canary = Some(canary);
        Ok(Round { fast: fast_stored, checked, intact, lost })
    }
}

/// What one round trip said.
struct Round {
    /// Per fast entry: whether its `XADD` stored it.
    fast: Vec<bool>,
    /// The checked entries' outcomes (`None`: there were none).
    checked: Option<Result<Vec<Result<Appended, StoreError>>, Retry>>,
    /// The canary moved by exactly one: every earlier write of the queue is still there.
    intact: bool,
    /// The canary was known and did not move by one: Redis lost writes of this queue.
    lost: bool,
}

/// Why a round's checked entries have no outcome yet.
enum Retry {
    /// Redis does not know the script (it restarted): load it and run them again.
    NoScript,
    /// The script failed: the error every entry of it shares.
    Failed(StoreError),
}

/// One queue's knowledge: its canary and the logs it appended to.
struct Queue {
    canary_key: String,
    /// The canary's value after this queue's last batch (`None`: not known).
    canary: Option<i64>,
    since_refresh: u32,
    /// Per log: the token and seq of the last entry this queue stored there, and when.
    known: crate::FastMap<String, Known>,
    swept: Instant,
}

struct Known {
    token: String,
    seq: u64,
    at: Instant,
}

impl Queue {
    fn new(canary_base: &str) -> Queue {
        let id = engine::Seed::from_os().map(|s| s.to_hex()).unwrap_or_else(|_| format!("{:?}", Instant::now()));
        Queue {
            canary_key: format!("{canary_base}:{id}"),
            canary: None,
            since_refresh: 0,
            known: crate::FastMap::default(),
            swept: Instant::now(),
        }
    }

    /// The entry follows, under the same token, the last one this queue stored in its log.
    fn follows(&self, p: &Pending) -> bool {
        self.known.get(&p.log).is_some_and(|k| k.token == p.token && k.seq + 1 == p.seq)
    }

    fn stored(&mut self, p: &Pending) {
        let at = Instant::now();
        match self.known.get_mut(&p.log) {
            Some(k) => {
                if k.token != p.token {
                    k.token.clone_from(&p.token);
                }
                k.seq = p.seq;
                k.at = at;
            }
            None => {
                self.known.insert(p.log.clone(), Known { token: p.token.clone(), seq: p.seq, at });
            }
        }
    }

    /// Nothing known holds (a batch failed: its writes and Redis's state are unknown).
    fn reset(&mut self) {
        self.canary = None;
        self.known.clear();
    }

    /// Forgets the logs not appended to lately.
    fn sweep(&mut self, now: Instant) {
        if now.saturating_duration_since(self.swept) < FORGET_AFTER / 2 {
            return;
        }
        self.swept = now;
        self.known.retain(|_, k| now.saturating_duration_since(k.at) < FORGET_AFTER);
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

/// The queue's task: takes the first entry, waits out the batch window where the queue's
/// rate fills it (`pace.rs`), then takes whatever else is queued (up to the bounds),
/// runs them as one batch, answers each, and again. It connects on its first batch, so
/// the connection is driven on this thread; a failed connect fails that batch (nothing
/// was sent: `Unavailable`) and the next batch tries again.
async fn drain(appender: Arc<Appender>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut conn: Option<RedisConn> = None;
    let mut pace = Pace::new(appender.window);
    let mut queue = Queue::new(&appender.canary);
    let full = |batch: &[Pending], bytes: usize| batch.len() >= MAX_BATCH || bytes >= MAX_BATCH_BYTES;
    while let Some(first) = rx.recv().await {
        // The window where this queue's rate fills it (ended once the entries it waits
        // for have come, or the batch is full), else the rest of the tick; a full batch
        // already waiting goes at once.
        let mut bytes = first.bytes.len();
        let mut batch = vec![first];
        gather(&mut pace, &mut rx, MAX_BATCH, true, |p| {
            bytes += p.bytes.len();
            batch.push(p);
            if full(&batch, bytes) {
                usize::MAX
            } else {
                batch.len() - 1
            }
        })
        .await;
        while !full(&batch, bytes) {
            let Ok(p) = rx.try_recv() else { break };
            bytes += p.bytes.len();
            batch.push(p);
        }
        pace.cut(batch.len());
        appender.stats.batches.fetch_add(1, Ordering::Relaxed);
        appender.stats.entries.fetch_add(batch.len() as u64, Ordering::Relaxed);
        let outcomes = match appender.connection(&mut conn).await {
            Ok(c) => appender.run(&c, &mut queue, &batch).await,
            Err(e) => appender.failed(&mut queue, &batch, e),
        };
        for (p, outcome) in batch.into_iter().zip(outcomes) {
            let _ = p.done.send(outcome);
        }
        let now = Instant::now();
        pace.done(now);
        queue.sweep(now);
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
            counter: String::new(),
            lease: String::new(),
            seq,
            bytes: Vec::new(),
            epoch: epoch_of(token),
            token: token.into(),
            done,
        }
    }

    #[test]
    fn a_queue_takes_the_fast_path_only_for_the_entry_after_its_own_under_the_same_token() {
        let mut queue = Queue::new("c");
        assert!(!queue.follows(&pending("log", 1, "a/1")), "a log it never wrote");
        queue.stored(&pending("log", 4, "a/1"));
        assert!(queue.follows(&pending("log", 5, "a/1")));
        assert!(!queue.follows(&pending("log", 6, "a/1")), "not the next seq");
        assert!(!queue.follows(&pending("log", 4, "a/1")), "its own seq again");
        assert!(!queue.follows(&pending("log", 5, "a/2")), "another lease");
        assert!(!queue.follows(&pending("other", 5, "a/1")), "another log");
        queue.reset();
        assert!(!queue.follows(&pending("log", 5, "a/1")), "a reset forgets");
        queue.stored(&pending("log", 5, "a/1"));
        queue.sweep(Instant::now() + FORGET_AFTER + Duration::from_secs(1));
        assert!(!queue.follows(&pending("log", 6, "a/1")), "a log left alone is forgotten");
    }
}
