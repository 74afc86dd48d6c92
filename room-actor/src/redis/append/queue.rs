//! An append queue's task ([`drain`]: waits out the batch window, cuts a batch, runs it,
//! answers each entry) and what the queue knows ([`Queue`]: its canary and the last entry
//! it stored in each log, which open the fast path). Apart from the batch on the wire: a
//! queue decides when a batch goes and remembers what it stored; the batch reads what
//! Redis answered.

use super::{Appender, Pending, MAX_BATCH, MAX_BATCH_BYTES};
use crate::pace::{gather, Pace};
use crate::redis::conn::RedisConn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A queue forgets a log it has not appended to for this long (the next append there is
/// checked), so what it knows stays as small as the rooms that are playing.
pub(super) const FORGET_AFTER: Duration = Duration::from_secs(120);

/// One queue's knowledge: its canary and the logs it appended to.
pub(super) struct Queue {
    pub(super) canary_key: String,
    /// The canary's value after this queue's last batch (`None`: not known).
    pub(super) canary: Option<i64>,
    pub(super) since_refresh: u32,
    /// Per log: the token and seq of the last entry this queue stored there, and when.
    pub(super) known: crate::FastMap<String, Known>,
    swept: Instant,
}

pub(super) struct Known {
    token: String,
    seq: u64,
    at: Instant,
}

impl Queue {
    pub(super) fn new(canary_base: &str) -> Queue {
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
    pub(super) fn follows(&self, p: &Pending) -> bool {
        self.known.get(&p.log).is_some_and(|k| k.token == p.token && k.seq + 1 == p.seq)
    }

    pub(super) fn stored(&mut self, p: &Pending) {
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
    pub(super) fn reset(&mut self) {
        self.canary = None;
        self.known.clear();
    }

    /// Forgets the logs not appended to lately.
    pub(super) fn sweep(&mut self, now: Instant) {
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
