//! One batch on the wire: the fast entries' bare `XADD`s, the checked entries' script
//! (loaded again when Redis forgot it), the queue's canary `INCR` and, when replicated,
//! `WAIT`, in one round trip; then the replies read into one outcome per entry, with the
//! fast entries a lost write or a refusal put in doubt checked again. Apart from the
//! queue's task, which decides when a batch goes and answers its entries, because this is
//! where what Redis said is read and where an entry is said stored or not.

use super::queue::{Canary, Group, Queue};
use super::{Appended, Appender, Pending, APPEND_CHECKED_LUA, SUSPECT_AFTER_SHORTS};
use crate::error::StoreError;
use crate::redis::conn::RedisConn;
use futures_util::future::join_all;
use redis::{Cmd, Pipeline, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tracing::warn;

/// How long a queue's canary key lives unless a batch refreshes it (a queue refreshes
/// it every [`CANARY_REFRESH_EVERY`] batches; the key of a stopped node goes with time).
const CANARY_TTL_MS: u64 = 24 * 3600 * 1000;
const CANARY_REFRESH_EVERY: u32 = 1000;

/// One group of a batch on its way: its entries split into fast and checked, with the
/// queue's knowledge of its canary (taken out of the queue while the group runs).
struct Plan {
    group: Group,
    canary: Canary,
    fast: Vec<usize>,
    checked: Vec<usize>,
}

/// What one group's run gave: an outcome per entry, and what the queue must forget.
struct GroupRun {
    canary_key: Arc<str>,
    canary: Canary,
    outcomes: Vec<(usize, Result<Appended, StoreError>)>,
    /// A round failed as a whole: what the queue knew of the group's canary and logs no
    /// longer holds.
    failed: bool,
    /// The canary did not move by one: Redis lost writes of this queue there.
    lost: bool,
}

impl Appender {
    /// The checked append of `entries`: one `EVALSHA` on one Redis; on a Redis Cluster
    /// an `EVAL` per entry (a script's keys must be in one slot, and a room's are), with
    /// the script's text (a checked append is a room's first under its lease: rare), so a
    /// master that does not know the script yet never refuses it. Each with the entries
    /// it carries.
    fn checked(&self, batch: &[Pending], entries: &[usize]) -> Vec<(Cmd, usize)> {
        let script = |entries: &[usize]| {
            let mut cmd = if self.cluster {
                let mut eval = redis::cmd("EVAL");
                eval.arg(APPEND_CHECKED_LUA);
                eval
            } else {
                let mut evalsha = redis::cmd("EVALSHA");
                evalsha.arg(self.script.get_hash());
                evalsha
            };
            cmd.arg(entries.len() * 2);
            for &i in entries {
                let p = &batch[i];
                cmd.arg(&p.log).arg(&p.lease);
            }
            for &i in entries {
                let p = &batch[i];
                cmd.arg(p.seq).arg(&p.bytes[..]).arg(p.token.as_bytes()).arg(p.epoch);
            }
            (cmd, entries.len())
        };
        if self.cluster {
            entries.iter().map(|i| script(std::slice::from_ref(i))).collect()
        } else {
            vec![script(entries)]
        }
    }

    /// Runs one batch on `conn`: one outcome per entry, in order. Its entries go to the
    /// server their log is on, one group per server (`Queue::groups`), the groups at
    /// once.
    pub(super) async fn run(
        &self,
        conn: &RedisConn,
        queue: &mut Queue,
        batch: &[Pending],
    ) -> Vec<Result<Appended, StoreError>> {
        let groups = queue.groups(self.cluster, conn.masters(), batch);
        let plans: Vec<Plan> = groups
            .into_iter()
            .map(|group| {
                let canary = queue.canaries.remove(&group.canary).unwrap_or_default();
                let (fast, checked): (Vec<usize>, Vec<usize>) = group.entries.iter().partition(|&&i| {
                    let p = &batch[i];
                    canary.value.is_some() && p.epoch > 0 && queue.follows(p, &group.canary)
                });
                Plan { group, canary, fast, checked }
            })
            .collect();
        let runs = join_all(plans.into_iter().map(|plan| self.run_group(conn, batch, plan))).await;
        let mut outcomes: Vec<Option<Result<Appended, StoreError>>> = vec![None; batch.len()];
        let mut stored: Vec<(usize, Arc<str>)> = Vec::with_capacity(batch.len());
        let mut forget = false;
        for run in runs {
            forget |= run.failed || run.lost;
            for (i, outcome) in run.outcomes {
                if matches!(outcome, Ok(Appended::Stored)) {
                    stored.push((i, run.canary_key.clone()));
                }
                outcomes[i] = Some(outcome);
            }
            // A canary whose round failed is not known any more.
            if !run.failed {
                queue.canaries.insert(run.canary_key, run.canary);
            }
        }
        if forget {
            queue.known.clear();
        }
        let outcomes: Vec<Result<Appended, StoreError>> = outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Err(StoreError::Unknown("the append batch gave this entry no outcome".into())))
            })
            .collect();
        for (p, outcome) in batch.iter().zip(&outcomes) {
            if !matches!(outcome, Ok(Appended::Stored)) {
                queue.known.remove(&p.log);
            }
        }
        for (i, canary) in stored {
            queue.stored(&batch[i], &canary);
        }
        outcomes
    }

    /// One group's rounds: the fast entries and the checked ones, then, for the entries
    /// a lost write or a refusal put in doubt (one Redis) and those whose script Redis
    /// had forgotten, the script again.
    async fn run_group(&self, conn: &RedisConn, batch: &[Pending], plan: Plan) -> GroupRun {
        let Plan { group, mut canary, fast, checked } = plan;
        self.stats.fast.fetch_add(fast.len() as u64, Ordering::Relaxed);
        let mut run = GroupRun {
            canary_key: group.canary.clone(),
            canary: Canary::default(),
            outcomes: Vec::with_capacity(group.entries.len()),
            failed: false,
            lost: false,
        };
        // Entries to check again with the script: (index, its fast `XADD` stored it).
        let mut again: Vec<(usize, bool)> = Vec::new();
        match self.round(conn, &group, &mut canary, batch, &fast, &checked, false).await {
            Err(e) => {
                run.failed = true;
                run.outcomes.extend(group.entries.iter().map(|&i| (i, Err(e.clone()))));
                return run;
            }
            Ok(round) => {
                if round.lost {
                    // Redis lost writes of this queue: nothing it knew holds any more.
                    warn!(canary = %group.canary, "an append queue's canary did not move by one: Redis lost writes \
                        (a restart or a failover); this batch's entries are checked again");
                    run.lost = true;
                }
                for (&i, stored) in fast.iter().zip(round.fast) {
                    if stored && round.intact {
                        run.outcomes.push((i, Ok(Appended::Stored)));
                    } else {
                        again.push((i, stored));
                    }
                }
                match round.checked {
                    Some(Ok(results)) => run.outcomes.extend(checked.iter().copied().zip(results)),
                    Some(Err(NoScript)) => again.extend(checked.iter().map(|&i| (i, false))),
                    None => {}
                }
            }
        }
        if !again.is_empty() {
            again.sort_unstable();
            let entries: Vec<usize> = again.iter().map(|(i, _)| *i).collect();
            match self.round(conn, &group, &mut canary, batch, &[], &entries, true).await {
                Err(e) => {
                    run.failed = true;
                    run.outcomes.extend(entries.iter().map(|&i| (i, Err(e.clone()))));
                }
                Ok(round) => {
                    run.lost |= round.lost;
                    let results = match round.checked {
                        Some(Ok(results)) => results,
                        Some(Err(NoScript)) => {
                            vec![Err(StoreError::Unknown("Redis forgot the append script twice".into())); entries.len()]
                        }
                        None => Vec::new(),
                    };
                    for ((i, stored_fast), result) in again.into_iter().zip(results) {
                        let result = match (stored_fast, result) {
                            // Its own fast entry is the log's top, and the check found it
                            // follows the entry below: stored.
                            (true, Ok(Appended::Conflict { last })) if last == batch[i].seq => Ok(Appended::Stored),
                            (_, result) => result,
                        };
                        run.outcomes.push((i, result));
                    }
                }
            }
        }
        run.canary = canary;
        run
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

    /// One round trip to the group's server: the `fast` entries' `XADD`s, the `checked`
    /// entries' script (loaded first when `load`, one Redis), the canary's `INCR` and,
    /// when replicated, `WAIT`. An error is what every entry of the round shares (the
    /// request failed, or too few replicas; on a Redis Cluster also any command refused).
    #[allow(clippy::too_many_arguments)]
    async fn round(
        &self,
        conn: &RedisConn,
        group: &Group,
        canary: &mut Canary,
        batch: &[Pending],
        fast: &[usize],
        checked: &[usize],
        load: bool,
    ) -> Result<Round, StoreError> {
        let load = load && !self.cluster;
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
        let scripts = if checked.is_empty() { Vec::new() } else { self.checked(batch, checked) };
        if load && !scripts.is_empty() {
            pipe.add_command(redis::cmd("SCRIPT").arg("LOAD").arg(APPEND_CHECKED_LUA).clone());
        }
        for (script, _) in &scripts {
            pipe.add_command(script.clone());
        }
        pipe.add_command(redis::cmd("INCR").arg(&*group.canary).clone());
        let refresh = canary.value.is_none() || canary.since_refresh >= CANARY_REFRESH_EVERY;
        if refresh {
            pipe.add_command(redis::cmd("PEXPIRE").arg(&*group.canary).arg(CANARY_TTL_MS).clone());
        }
        if let Some(r) = &self.replicated {
            pipe.add_command(r.wait.clone());
        }
        let count = pipe.len();
        let replies = conn.pipeline_on(group.slot, &pipe).await.map_err(|e| {
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
        let checked = if scripts.is_empty() {
            None
        } else {
            if load {
                replies.next();
            }
            let mut results = Ok(Vec::with_capacity(checked.len()));
            for (_, n) in &scripts {
                match replies.next() {
                    Some(Value::ServerError(e)) if e.code() == "NOSCRIPT" => results = Err(NoScript),
                    reply => {
                        if let Ok(results) = &mut results {
                            match parse(reply, *n) {
                                Ok(outcomes) => results.extend(outcomes),
                                Err(e) => results.extend(std::iter::repeat_n(Err(e), *n)),
                            }
                        }
                    }
                }
            }
            Some(results)
        };
        let value = match replies.next() {
            Some(Value::Int(n)) => n,
            other => return Err(StoreError::Unknown(format!("the append canary's INCR answered {other:?}"))),
        };
        if refresh {
            replies.next();
            canary.since_refresh = 0;
        } else {
            canary.since_refresh += 1;
        }
        if let Some(r) = &self.replicated {
            let got = match replies.next() {
                Some(Value::Int(n)) => n,
                other => return Err(StoreError::Unknown(format!("WAIT answered {other:?}"))),
            };
            // Stored on the master, not (yet) on enough replicas: nothing is acknowledged.
            if got < i64::from(r.replicas) {
                canary.shorts += 1;
                if canary.shorts >= SUSPECT_AFTER_SHORTS {
                    // Linked replicas are counted within a `WAIT`'s timeout: shorts that
                    // go on may be a connection that reaches a demoted master.
                    canary.shorts = 0;
                    conn.suspect(&format!("{SUSPECT_AFTER_SHORTS} batch WAITs in a row counted too few replicas"));
                }
                return Err(StoreError::Unknown((r.short)(got)));
            }
            canary.shorts = 0;
        }
        let intact = canary.value.is_some_and(|last| value == last + 1);
        let lost = canary.value.is_some() && !intact;
        canary.value = Some(value);
        Ok(Round { fast: fast_stored, checked, intact, lost })
    }
}

/// What one round trip said.
struct Round {
    /// Per fast entry: whether its `XADD` stored it.
    fast: Vec<bool>,
    /// The checked entries' outcomes, in order (`None`: there were none).
    checked: Option<Result<Vec<Result<Appended, StoreError>>, NoScript>>,
    /// The canary moved by exactly one: every earlier write of the queue is still there.
    intact: bool,
    /// The canary was known and did not move by one: Redis lost writes of this queue.
    lost: bool,
}

/// One Redis did not know the append script (it restarted): the round's checked entries
/// have no outcome yet; load it and run them again.
struct NoScript;

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
