//! One batch on the wire: the fast entries' bare `XADD`s, the checked entries' script
//! (loaded again when Redis forgot it), the queue's canary `INCR` and, when replicated,
//! `WAIT`, in one round trip; then the replies read into one outcome per entry, with the
//! fast entries a lost write or a refusal put in doubt checked again. Apart from the
//! queue's task, which decides when a batch goes and answers its entries, because this is
//! where what Redis said is read and where an entry is said stored or not.

use super::queue::Queue;
use super::{Appended, Appender, Pending, APPEND_CHECKED_LUA};
use crate::error::StoreError;
use crate::redis::conn::RedisConn;
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, Value};
use std::sync::atomic::Ordering;
use tracing::warn;

/// How long a queue's canary key lives unless a batch refreshes it (a queue refreshes
/// it every [`CANARY_REFRESH_EVERY`] batches; the key of a stopped node goes with time).
const CANARY_TTL_MS: u64 = 24 * 3600 * 1000;
const CANARY_REFRESH_EVERY: u32 = 1000;

impl Appender {
    /// The checked append of `entries` as one `EVALSHA`.
    fn checked(&self, batch: &[Pending], entries: &[usize]) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(entries.len() * 2);
        for &i in entries {
            let p = &batch[i];
            cmd.arg(&p.log).arg(&p.lease);
        }
        for &i in entries {
            let p = &batch[i];
            cmd.arg(p.seq).arg(&p.bytes[..]).arg(p.token.as_bytes()).arg(p.epoch);
        }
        cmd
    }

    /// Runs one batch on `conn`: one outcome per entry, in order.
    pub(super) async fn run(
        &self,
        conn: &RedisConn,
        queue: &mut Queue,
        batch: &[Pending],
    ) -> Vec<Result<Appended, StoreError>> {
        let (fast, checked): (Vec<usize>, Vec<usize>) = (0..batch.len()).partition(|&i| {
            let p = &batch[i];
            queue.canary.is_some() && p.epoch > 0 && queue.follows(p)
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
                Ok(Appended::Stored) => queue.stored(p),
                _ => {
                    queue.known.remove(&p.log);
                }
            }
        }
        outcomes
    }

    /// Every entry of the batch fails with `e`; what the queue knew no longer holds.
    pub(super) fn failed(
        &self,
        queue: &mut Queue,
        batch: &[Pending],
        e: StoreError,
    ) -> Vec<Result<Appended, StoreError>> {
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

/// The script's answer: one outcome per entry (an entry whose `XADD` failed is certainly
/// not stored: `Unavailable`, for that entry alone).
pub(super) fn parse(reply: Option<Value>, n: usize) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
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
