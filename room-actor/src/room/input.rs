//! The input pipeline: an input from a client, the timer or a bot is processed
//! (validate, apply with errors and panics contained), appended to the store while the
//! mailbox is held, then committed (state swapped in, updates, ack) and, on a result,
//! the game finishes (record stored, then `result`).

use super::stall::{Pending, Stall, RESOLVE_FIRST, RESOLVE_MAX};
use super::{named, Origin, Phase, RoomActor, Running, INTERNAL_REASON};
use crate::error::StoreError;
use crate::log::{GameRecord, LogEntry, Snapshot};
use crate::messages::*;
use crate::store::{Fence, StoreFuture};
use crate::wire;
use actix::prelude::*;
use engine::{Actor as GameActor, Applied, Ctx, Game, GameResult, Input, InputOf, PlayerId, Reject, Rng};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// Attempts to write a finished game's record before giving up (about 5 minutes).
const RECORD_ATTEMPTS: u32 = 150;

/// Where the room's log writes stand.
pub(super) struct Pipeline<G: Game> {
    /// An append is in flight (its `ctx.wait` has not completed).
    pub(super) appending: bool,
    /// Waiting for the store to say where the log stands (see [`Stall`]).
    pub(super) stall: Option<Stall<G>>,
    /// The next wait before trying to resolve the stall again (doubles up to
    /// [`RESOLVE_MAX`]), and when the stall began.
    pub(super) resolve_backoff: Duration,
    pub(super) stalled_since: Option<Instant>,
    /// Who the room's appends are written as (its lease in cluster mode), handed to the
    /// store with each.
    pub(super) fence: Fence,
    /// The RTT table as the log last recorded it (entries carry it when it changed);
    /// set through [`Pipeline::logged`].
    logged_rtt: BTreeMap<PlayerId, u32>,
    /// The audience's RTT table version last found equal to `logged_rtt` (inputs come
    /// far more often than RTT changes: most need no comparison of the two tables).
    rtt_same_at: Option<u64>,
    /// A restored game its rules had ended: its record, written on start if the store
    /// has none (see [`RoomActor::record_if_missing`]).
    pub(super) unrecorded: Option<Box<GameRecord>>,
}

impl<G: Game> Default for Pipeline<G> {
    fn default() -> Pipeline<G> {
        Pipeline {
            appending: false,
            stall: None,
            resolve_backoff: RESOLVE_FIRST,
            stalled_since: None,
            // A room made here, not restored, is its log's only writer: a cluster node
            // only ever restores rooms, under the lease it claimed.
            fence: Fence::Sole,
            logged_rtt: BTreeMap::new(),
            rtt_same_at: None,
            unrecorded: None,
        }
    }
}

impl<G: Game> Pipeline<G> {
    /// No input can be decided now: one is being stored, or the log's state is unknown.
    pub(super) fn busy(&self) -> bool {
        self.appending || self.stall.is_some()
    }

    /// The log now records `rtt` as the RTT table.
    pub(super) fn logged(&mut self, rtt: BTreeMap<PlayerId, u32>) {
        self.logged_rtt = rtt;
        self.rtt_same_at = None;
    }

    /// The table the next entry must carry: `rtt` if it differs from what the log last
    /// recorded (`version` counts the changes of `rtt`), else `None`.
    fn rtt_to_log(&mut self, rtt: &BTreeMap<PlayerId, u32>, version: u64) -> Option<BTreeMap<PlayerId, u32>> {
        if self.rtt_same_at == Some(version) {
            return None;
        }
        if *rtt == self.logged_rtt {
            self.rtt_same_at = Some(version);
            return None;
        }
        Some(rtt.clone())
    }
}

impl<G: Game> RoomActor<G> {
    pub(super) fn reject(&self, origin: &Origin, code: &str, reason: &str) {
        self.deps.metrics.rejected.with_label_values(&[code]).inc();
        match origin {
            Origin::Client { cs, out, .. } => {
                Self::send(out, wire::reject(&self.id, *cs, code, reason));
            }
            Origin::Timer | Origin::Bot => warn!(room = %self.id, code, reason, "server input refused"),
        }
    }

    /// A client whose input the room could not take now is told to send it again (the
    /// same `cs`: deduplicated if it turns out stored). Timer and bot inputs are decided
    /// again by the room itself.
    pub(super) fn ask_resend(&self, origin: &Origin) {
        if let Origin::Client { cs, out, .. } = origin {
            Self::send_frame(out, ToClient::stale(&self.id, wire::resend(&self.id, Some(*cs))));
        }
    }

    /// Appends `entry` to the game's log as the room's writer (its [`Fence`]).
    pub(super) fn append(&self, game_pk: &str, entry: LogEntry) -> StoreFuture<()> {
        self.deps.store.append_as(game_pk, entry, &self.pipeline.fence)
    }

    /// Validates and applies `input`, then persists it; `false` if it was refused.
    pub(super) fn process(
        &mut self,
        ctx: &mut Context<Self>,
        actor: GameActor,
        input: InputOf<G>,
        origin: Origin,
    ) -> bool {
        if self.pipeline.busy() {
            // actix 0.13 polls the context's spawned items (timer and bot wakes) once more
            // after a mailbox handler started a `ctx.wait`, before it notices the wait: an
            // input decided now would take the seq of the one in flight. Timer and bot
            // inputs are decided again after the append (it re-arms the timer and re-plans
            // the bots); a client is told to resend. The same while the room waits for an
            // unknown outcome to resolve.
            self.ask_resend(&origin);
            return true;
        }
        let now = self.time.now();
        let rtt_ms = origin.credited_rtt(actor.player().and_then(|p| self.audience.rtt.get(p).copied()));
        let rtt_to_log = self.pipeline.rtt_to_log(&self.audience.rtt, self.audience.rtt_version);
        let Phase::Playing(run) = &self.phase else {
            self.reject(&origin, "not_playing", "게임이 진행 중이 아니에요");
            return false;
        };
        let game_ctx = Ctx { now, rtt_ms };
        if let Err(refusal) = G::validate(&run.state, &actor, &input, &game_ctx) {
            self.reject(&origin, refusal.code(), &refusal.reason());
            return false;
        }
        let mut rng = run.rng.clone();
        let outcome = catch_unwind(AssertUnwindSafe(|| G::apply(&run.state, &actor, &input, &game_ctx, &mut rng)));
        let applied = match outcome {
            Ok(Ok(applied)) => applied,
            Ok(Err(e)) => {
                error!(room = %self.id, ?actor, ?input, error = %e, "apply failed; input refused");
                self.reject(&origin, "internal_error", INTERNAL_REASON);
                return false;
            }
            Err(_) => {
                self.deps.metrics.room_panics.inc();
                error!(room = %self.id, ?actor, ?input, "apply panicked; input refused, room continues");
                self.reject(&origin, "internal_error", INTERNAL_REASON);
                return false;
            }
        };
        let input_json = match serde_json::to_string(&input) {
            Ok(json) => json,
            Err(e) => {
                error!(room = %self.id, error = %e, "input does not serialize");
                self.reject(&origin, "internal_error", INTERNAL_REASON);
                return false;
            }
        };
        let entry = LogEntry {
            seq: run.seq + 1,
            at: now,
            actor,
            cs: origin.cs(),
            rtt_ms,
            auto: !matches!(origin, Origin::Client { .. }),
            input_json,
            rtt: rtt_to_log,
        };
        let append_started = Instant::now();
        let fut = self.append(&run.game_pk, entry.clone());
        // Hold the mailbox until the store confirms: nothing is acknowledged or broadcast
        // before it is durable, and no later input overtakes this one.
        self.pipeline.appending = true;
        ctx.wait(fut.into_actor(self).map(move |res, act, ctx| {
            act.pipeline.appending = false;
            act.deps.metrics.store_append.observe(append_started.elapsed().as_secs_f64());
            match res {
                Ok(()) => act.commit(ctx, entry, applied, rng, origin),
                Err(e @ (StoreError::Unknown(_) | StoreError::Conflict { .. })) => {
                    // Maybe stored (or the log is not where the room thinks): never
                    // assume, find out.
                    act.stalled(ctx, Stall::Append(Box::new(Pending { entry, applied, rng, origin })), &e);
                }
                Err(e) => {
                    error!(room = %act.id, seq = entry.seq, error = %e, "log append failed; input not applied");
                    act.ask_resend(&origin);
                    if e == StoreError::Fenced {
                        act.deps.metrics.fenced_appends.inc();
                    } else {
                        act.deps.metrics.store_errors.inc();
                    }
                    if e == StoreError::Fenced {
                        // Another node owns the room now: this actor must never act again.
                        warn!(room = %act.id, "fenced: lease lost, room stops here");
                        act.fenced(ctx);
                    } else {
                        act.rearm(ctx);
                        act.schedule_bots(ctx);
                    }
                }
            }
        }));
        true
    }

    pub(super) fn commit(
        &mut self,
        ctx: &mut Context<Self>,
        entry: LogEntry,
        applied: Applied<G::State, G::Event>,
        rng: Rng,
        origin: Origin,
    ) {
        let Phase::Playing(run) = &mut self.phase else { return };
        run.state = applied.state;
        run.rng = rng;
        run.seq = entry.seq;
        self.timers.table = (entry.seq, entry.at);
        if let (GameActor::Player(p), Some(cs)) = (&entry.actor, entry.cs) {
            run.applied.insert(p, cs, entry.seq);
        }
        if let Some(rtt) = &entry.rtt {
            self.pipeline.logged(rtt.clone());
        }
        self.deps.metrics.applied.inc();
        if self.deps.snapshot_every > 0 && run.seq % self.deps.snapshot_every == 0 {
            let snapshot = serde_json::to_string(&run.state).map(|state_json| Snapshot {
                seq: run.seq,
                at: entry.at,
                state_json,
                rng: run.rng.state(),
            });
            if let Ok(snapshot) = snapshot {
                let fut = self.deps.store.put_snapshot(&run.game_pk, snapshot);
                let room = self.id.clone();
                ctx.spawn(fut.into_actor(self).map(move |res, _, _| {
                    if let Err(e) = res {
                        warn!(room = %room, error = %e, "snapshot not stored");
                    }
                }));
            }
        }
        self.broadcast_update(&applied.events, entry.at);
        if let Origin::Client { cs, out, received, .. } = &origin {
            Self::send(out, wire::ack(&self.id, *cs, entry.seq));
            self.deps.metrics.action_latency.observe(received.elapsed().as_secs_f64());
        }
        let at = entry.at;
        self.admin.remember(entry);
        self.carry_on(ctx, at);
    }

    /// After the state changed: the game finishes if it has a result, else its timer is
    /// re-armed and its bots think again.
    pub(super) fn carry_on(&mut self, ctx: &mut Context<Self>, now: i64) {
        let Phase::Playing(run) = &self.phase else { return };
        match G::result(&run.state) {
            Some(result) => self.finish(ctx, result, now),
            None => {
                self.rearm(ctx);
                self.schedule_bots(ctx);
            }
        }
    }

    /// A finished game's record, exactly as [`Self::finish`] stores it (`ended_at` is the
    /// time of the entry that ended the game).
    pub(super) fn record_of(&self, run: &Running<G>, result: &GameResult, ended_at: i64) -> GameRecord {
        GameRecord {
            game_pk: run.game_pk.clone(),
            room_id: self.id.clone(),
            game: G::ID.to_owned(),
            players: run.start.players.clone(),
            names: run.start.names.clone(),
            started_at: run.start.started_at,
            ended_at,
            state_version: G::STATE_VERSION,
            final_seq: run.seq,
            result_json: serde_json::to_string(result).unwrap_or_else(|_| "null".into()),
            final_state_json: serde_json::to_string(&run.state).unwrap_or_default(),
        }
    }

    pub(super) fn finish(&mut self, ctx: &mut Context<Self>, result: GameResult, now: i64) {
        let Phase::Playing(run) = std::mem::replace(&mut self.phase, Phase::Waiting) else { return };
        self.timers.cancel_all(ctx);
        let record = self.record_of(&run, &result, now);
        info!(room = %self.id, game_pk = %run.game_pk, seq = run.seq, "game finished");
        self.deps.metrics.games_finished.inc();
        let shown = serde_json::to_string(&named(&result, &run.start)).unwrap_or_else(|_| "null".into());
        let text: ByteString = wire::result(&self.id, &run.game_pk, &shown).into();
        self.phase = Phase::Ended(run, result);
        let fut = self.deps.store.finish(record.clone());
        // The result goes out once the record is stored, so a client that asks for its
        // games or the replay right after `result` finds them.
        ctx.wait(fut.into_actor(self).map(move |res, act, ctx| {
            if let Err(e) = res {
                error!(room = %act.id, error = %e, "finished game not recorded yet; retrying");
                actix::spawn(record_with_retries(act.deps.store.clone(), record, act.id.clone()));
            }
            act.send_all(|_| text.clone());
            act.publish_info();
            match act.admin.closing.take() {
                Some(reason) => act.close_now(ctx, &reason),
                None => act.close_if_abandoned(ctx),
            }
        }));
    }

    /// A restored room whose game its rules had ended: the node may have died between the
    /// game's last entry and its record (then its replay and the players' game lists would
    /// miss it for good). Writes the record if the store has none; writing it is
    /// idempotent, so a record that appears meanwhile is only written again, unchanged.
    pub(super) fn record_if_missing(&self, record: GameRecord) {
        let store = self.deps.store.clone();
        let room = self.id.clone();
        actix::spawn(async move {
            match store.record(&record.game_pk).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    warn!(room = %room, game_pk = %record.game_pk, "restored finished game had no record; recording it");
                    record_with_retries(store, record, room).await;
                }
                Err(e) => {
                    warn!(room = %room, error = %e, "could not tell whether the restored finished game is recorded; recording it");
                    record_with_retries(store, record, room).await;
                }
            }
        });
    }
}

/// Stores a finished game's record, trying again with backoff for about 5 minutes.
/// Writing a record is idempotent (SETs and EXPIREs in Redis, an upsert in the file
/// store): whatever an earlier attempt did, trying again leaves one record.
async fn record_with_retries(store: Arc<dyn crate::store::RoomStore>, record: GameRecord, room: String) {
    let mut wait = RESOLVE_FIRST;
    for attempt in 0..=RECORD_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RESOLVE_MAX);
        }
        match store.finish(record.clone()).await {
            Ok(()) => return info!(room = %room, attempt, "finished game recorded"),
            Err(e) => warn!(room = %room, error = %e, attempt, "finished game not recorded yet"),
        }
    }
    error!(room = %room, "finished game not recorded: store unavailable for too long");
}

impl<G: Game> Handler<FromSession<Act>> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: FromSession<Act>, ctx: &mut Context<Self>) {
        let FromSession { user, out, received, hop, verb: Act { cs, action }, .. } = msg;
        let origin = Origin::Client { cs, out, received, hop };
        let run = match &self.phase {
            Phase::Playing(run) => run,
            Phase::Waiting => return self.reject(&origin, "not_started", "아직 게임이 시작되지 않았어요"),
            Phase::Ended(..) => return self.reject(&origin, "game_over", "게임이 이미 끝났어요"),
        };
        if !run.start.players.contains(&user) {
            return self.reject(&origin, "not_seated", "이 게임의 플레이어가 아니에요");
        }
        if let Some(seq) = run.applied.get(&user, cs) {
            // A retry of an applied action: acknowledged again, never applied twice.
            if let Origin::Client { out, .. } = &origin {
                Self::send(out, wire::ack(&self.id, cs, seq));
            }
            return;
        }
        let action: G::Action = match serde_json::from_str(&action) {
            Ok(a) => a,
            Err(e) => {
                // The decoder's message quotes the client's input: the log gets it, the
                // client a short reason.
                info!(room = %self.id, error = %e, "action does not decode");
                return self.reject(&origin, "bad_action", "올바르지 않은 행동이에요");
            }
        };
        self.process(ctx, GameActor::Player(user), Input::Client(action), origin);
    }
}
