//! An append queue's task ([`drain`]: waits out the batch window, cuts a batch, runs it,
//! answers each entry) and what the queue knows ([`Queue`]: its canaries, one per server,
//! and the last entry it stored in each log, which open the fast path; which server each
//! entry goes to, [`Group`]). Apart from the batch on the wire: a
//! queue decides when a batch goes and remembers what it stored; the batch reads what
//! Redis answered.

use super::{Appender, Pending, MAX_BATCH, MAX_BATCH_BYTES};
use crate::pace::{gather, Pace};
use crate::redis::conn::RedisConn;
use crate::redis::slots::{hash_tag, slot_of, Masters};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A queue forgets a log it has not appended to for this long (the next append there is
/// checked), so what it knows stays as small as the rooms that are playing.
pub(super) const FORGET_AFTER: Duration = Duration::from_secs(120);

/// A queue's canaries are forgotten (with every log it knew) once it has this many:
/// one per master, and before the node has read a Redis Cluster's slot map one per slot
/// it appended to.
const MAX_CANARIES: usize = 256;

/// One queue's knowledge: its canaries and the logs it appended to.
pub(super) struct Queue {
    /// The queue's canary keys start with this (on one Redis it is the key).
    stem: Arc<str>,
    /// Per canary key: what the queue knows of it.
    pub(super) canaries: crate::FastMap<Arc<str>, Canary>,
    /// On a Redis Cluster, per master: the canary key on it and its slot, for the slot
    /// map `map` (worked out again when the map changes).
    on_master: crate::FastMap<String, (Arc<str>, u16)>,
    map: Option<Arc<Masters>>,
    /// Per log: the token and seq of the last entry this queue stored there, under which
    /// canary, and when.
    pub(super) known: crate::FastMap<String, Known>,
    swept: Instant,
}

/// What a queue knows of one of its canaries.
#[derive(Default)]
pub(super) struct Canary {
    /// Its value after this queue's last batch there (`None`: not known).
    pub(super) value: Option<i64>,
    pub(super) since_refresh: u32,
    /// `WAIT`s in a row there that counted too few replicas.
    pub(super) shorts: u32,
}

pub(super) struct Known {
    token: String,
    seq: u64,
    canary: Arc<str>,
    at: Instant,
}

/// The entries of a batch that go to one server, and the canary there that vouches for
/// their fast path.
pub(super) struct Group {
    /// The canary's slot (on one Redis: 0): the group goes to the master that serves it.
    pub(super) slot: u16,
    pub(super) canary: Arc<str>,
    /// Indexes into the batch, in queue order.
    pub(super) entries: Vec<usize>,
}

impl Queue {
    pub(super) fn new(canary_base: &str) -> Queue {
        let id = engine::Seed::from_os().map(|s| s.to_hex()).unwrap_or_else(|_| format!("{:?}", Instant::now()));
        Queue {
            stem: format!("{canary_base}:{id}").into(),
            canaries: crate::FastMap::default(),
            on_master: crate::FastMap::default(),
            map: None,
            known: crate::FastMap::default(),
            swept: Instant::now(),
        }
    }

    /// The entry follows, under the same token and vouched for by the same canary, the
    /// last one this queue stored in its log.
    pub(super) fn follows(&self, p: &Pending, canary: &str) -> bool {
        self.known.get(&p.log).is_some_and(|k| k.token == p.token && k.seq + 1 == p.seq && *k.canary == *canary)
    }

    pub(super) fn stored(&mut self, p: &Pending, canary: &Arc<str>) {
        let at = Instant::now();
        match self.known.get_mut(&p.log) {
            Some(k) => {
                if k.token != p.token {
                    k.token.clone_from(&p.token);
                }
                if !Arc::ptr_eq(&k.canary, canary) {
                    k.canary = canary.clone();
                }
                k.seq = p.seq;
                k.at = at;
            }
            None => {
                let known = Known { token: p.token.clone(), seq: p.seq, canary: canary.clone(), at };
                self.known.insert(p.log.clone(), known);
            }
        }
    }

    /// Nothing known holds (a batch failed: its writes and Redis's state are unknown).
    pub(super) fn reset(&mut self) {
        self.canaries.clear();
        self.known.clear();
    }

    /// Splits `batch` by the server each entry's log is on, each part with the canary
    /// there: on one Redis ([`None`] for `masters` and not `cluster`) one group; on a
    /// Redis Cluster one per master of the node's slot map `masters`, or, for a slot it
    /// names no master for (or before the map is read), one per slot with a canary in
    /// the entry's own slot. A map that is out of date costs a failed group, never a
    /// wrong answer: a pipeline whose keys are not all on the master it went to fails
    /// whole, and the failure raises the alarm that reads the map again.
    pub(super) fn groups(&mut self, cluster: bool, masters: Option<Arc<Masters>>, batch: &[Pending]) -> Vec<Group> {
        if !cluster {
            return vec![Group { slot: 0, canary: self.stem.clone(), entries: (0..batch.len()).collect() }];
        }
        if self.map.as_ref().map(Arc::as_ptr) != masters.as_ref().map(Arc::as_ptr) {
            self.on_master.clear();
            self.map.clone_from(&masters);
        }
        let mut groups: Vec<Group> = Vec::new();
        for (i, p) in batch.iter().enumerate() {
            let slot = slot_of(p.log.as_bytes());
            let (canary, at) = match masters.as_deref().and_then(|m| Some((m, m.of(slot)?))) {
                Some((masters, master)) => match self.on_master.get(master) {
                    Some((key, at)) => (key.clone(), *at),
                    None => match masters.key_on(&self.stem, master) {
                        Some((key, at)) => {
                            let key: Arc<str> = key.into();
                            self.on_master.insert(master.to_owned(), (key.clone(), at));
                            (key, at)
                        }
                        None => self.slot_canary(p, slot),
                    },
                },
                None => self.slot_canary(p, slot),
            };
            match groups.iter_mut().find(|g| g.canary == canary) {
                Some(group) => group.entries.push(i),
                None => groups.push(Group { slot: at, canary, entries: vec![i] }),
            }
        }
        groups
    }

    /// A canary in the slot of `p`'s log (its hash tag).
    fn slot_canary(&self, p: &Pending, slot: u16) -> (Arc<str>, u16) {
        let tag = String::from_utf8_lossy(hash_tag(p.log.as_bytes()));
        (format!("{}:{{{tag}}}", self.stem).into(), slot)
    }

    /// Forgets the logs not appended to lately, and every canary (with the logs known
    /// under them) once there are too many.
    pub(super) fn sweep(&mut self, now: Instant) {
        if self.canaries.len() > MAX_CANARIES {
            self.reset();
        }
        if now.saturating_duration_since(self.swept) < FORGET_AFTER / 2 {
            return;
        }
        self.swept = now;
        self.known.retain(|_, k| now.saturating_duration_since(k.at) < FORGET_AFTER);
    }
}

/// The queue's task: takes the first entry, waits out the batch window where the queue's
/// rate fills it (`pace.rs`), then takes whatever else is queued (up to the bounds),
/// runs them as one batch, answers each, and again. It connects on its first batch, so
/// the connection is driven on this thread; a failed connect fails that batch (nothing
/// was sent: `Unavailable`) and the next batch tries again.
pub(super) async fn drain(appender: Arc<Appender>, mut rx: mpsc::UnboundedReceiver<Pending>) {
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
