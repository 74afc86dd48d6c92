//! A room's life: created or restored, spawned into the directory, its public info kept
//! saved, and the ways it stops (moved, fenced, ended and abandoned, never started).

use super::admin::{operator_result, AdminState, Recent};
use super::audience::Audience;
use super::clock::RoomTime;
use super::input::Pipeline;
use super::lobby::{Lobby, Seat};
use super::timers::Timers;
use super::{
    last_logged_rtt, Config, InfoSaved, Phase, RoomActor, RoomDeps, RoomSpec, Running, RECOVERY_HOLD_MS, ROOM_MAILBOX,
};
use crate::directory::{Mailbox, RoomHandle, RoomInfo, RoomStatus, SeatInfo};
use crate::error::RebuildError;
use crate::log::StoredGame;
use crate::messages::*;
use crate::rebuild::{rebuild, From};
use crate::wire;
use actix::prelude::*;
use engine::{Game, PlayerId, Rng, Seed};
use futures_util::future::LocalBoxFuture;
use std::time::Duration;
use tracing::{info, warn};

impl<G: Game> RoomActor<G> {
    pub fn new(spec: RoomSpec<G::Options>, deps: RoomDeps) -> RoomActor<G> {
        let now = deps.clock.now_ms();
        RoomActor {
            id: spec.room_id,
            config: Config {
                options: spec.options,
                options_json: spec.options_json,
                grace_sec: spec.grace_sec,
                fixed_seed: spec.seed,
                created_at: now,
                listed: spec.listed,
            },
            lobby: Lobby::new(Seat { user: spec.host.clone(), name: spec.host_name, bot: false }, spec.host),
            phase: Phase::Waiting,
            audience: Audience::default(),
            time: RoomTime::new(deps.clock, now),
            timers: Timers::new(Rng::from_seed(Seed::from_os().unwrap_or(Seed(now as u128)))),
            pipeline: Pipeline::default(),
            admin: AdminState::default(),
            deps,
        }
    }

    /// Brings a room back on this node from its saved info and, if a game started, its
    /// log (snapshot + entries): what failover and lazy activation do. No deadline is
    /// enforced before `now + RECOVERY_HOLD_MS`, and `now` never goes below the last
    /// logged time.
    pub fn restore(
        info: RoomInfo,
        stored: Option<StoredGame>,
        deps: RoomDeps,
        fence: crate::store::Fence,
    ) -> Result<RoomActor<G>, RebuildError> {
        let options = <G::Options as serde::Deserialize>::deserialize(&*info.options)
            .map_err(|e| RebuildError::Entry { seq: 0, message: format!("room options: {e}") })?;
        let now = deps.clock.now_ms();
        let seats =
            info.seats.iter().map(|s| Seat { user: s.user_id.clone(), name: s.name.clone(), bot: s.bot }).collect();
        let mut actor = RoomActor::<G>::new(
            RoomSpec {
                room_id: info.room_id.clone(),
                options,
                options_json: info.options.clone(),
                host: info.host.clone(),
                host_name: String::new(),
                grace_sec: info.grace_sec,
                seed: None,
                listed: info.is_listed(),
            },
            deps,
        );
        actor.lobby.seats = seats;
        actor.config.created_at = info.created_at;
        actor.pipeline.fence = fence;
        actor.admin.kicked = info.kicked.clone();
        actor.lobby.removed = info.removed.clone();
        actor.admin.closed = info.status == RoomStatus::Ended && stored.is_none();
        if let Some(stored) = &stored {
            let skip = stored.entries.len().saturating_sub(RECENT_ENTRIES);
            actor.admin.recent = stored.entries.iter().skip(skip).map(Recent::from).collect();
        }
        if let Some(stored) = stored {
            let rebuilt = rebuild::<G>(&stored, From::LatestSnapshot)?;
            actor.pipeline.logged(last_logged_rtt(&stored));
            actor.time.last_at = now.max(rebuilt.last_at);
            actor.time.hold_until = actor.time.last_at + RECOVERY_HOLD_MS;
            // Everyone is away until they reconnect; their grace starts now.
            for seat in actor.lobby.seats.iter().filter(|s| !s.bot) {
                actor.audience.disconnected_since.insert(seat.user.clone(), actor.time.last_at);
            }
            let run = Box::new(Running {
                game_pk: stored.start.game_pk.clone(),
                start: stored.start.clone(),
                state: rebuilt.state,
                rng: rebuilt.rng,
                seq: rebuilt.seq,
                applied: rebuilt.applied,
            });
            // Who left the running game stays gone here too: away with their grace spent.
            let grace_ms = actor.grace_ms(&run.state);
            for user in info.gone.iter().filter(|u| actor.lobby.seats.iter().any(|s| &s.user == *u && !s.bot)) {
                actor.audience.disconnected_since.insert(user.clone(), actor.time.last_at - grace_ms);
                actor.audience.gone.insert(user.clone());
            }
            actor.phase = match G::result(&run.state) {
                Some(result) => {
                    actor.pipeline.unrecorded = Some(Box::new(actor.record_of(&run, &result, rebuilt.last_at)));
                    Phase::Ended(run, result)
                }
                // Saved as ended although no rule ended it: an operator closed the game
                // (its record has the reason). It must not come back to life.
                None if info.status == RoomStatus::Ended => Phase::Ended(run, operator_result("")),
                None => Phase::Playing(run),
            };
        }
        Ok(actor)
    }

    /// Starts the actor and registers it in the directory.
    pub fn spawn(self) -> RoomHandle {
        let directory = self.deps.directory.clone();
        let info = self.info();
        // The mailbox bound is set before anything can be sent: bursts of inputs (a bell
        // rung by six players at once, resends after a reconnect) queue instead of
        // bouncing with `room_unavailable`.
        let addr = Self::create(|ctx| {
            ctx.set_mailbox_capacity(ROOM_MAILBOX);
            self
        });
        let handle = RoomHandle::new(addr);
        directory.insert(info, handle.clone());
        handle
    }

    pub(crate) fn info(&self) -> RoomInfo {
        let range = G::players_for(&self.config.options);
        let (status, game_pk) = match &self.phase {
            Phase::Waiting if self.admin.closed => (RoomStatus::Ended, None),
            Phase::Waiting => (RoomStatus::Waiting, None),
            Phase::Playing(r) => (RoomStatus::Playing, Some(r.game_pk.clone())),
            Phase::Ended(r, _) => (RoomStatus::Ended, Some(r.game_pk.clone())),
        };
        RoomInfo {
            room_id: self.id.clone(),
            game: G::ID.to_owned(),
            options: self.config.options_json.clone(),
            host: self.lobby.host.clone(),
            seats: self
                .lobby
                .seats
                .iter()
                .map(|s| SeatInfo { user_id: s.user.clone(), name: s.name.clone(), bot: s.bot })
                .collect(),
            status,
            game_pk,
            node: Some(self.deps.node_id.clone()),
            node_url: self.deps.public_url.as_deref().map(str::to_owned),
            grace_sec: self.config.grace_sec,
            min_players: range.min,
            max_players: range.max,
            created_at: self.config.created_at,
            gone: {
                let mut gone: Vec<PlayerId> = self.audience.gone.iter().cloned().collect();
                gone.sort();
                gone
            },
            kicked: self.admin.kicked.clone(),
            removed: self.lobby.removed.clone(),
            listed: Some(self.config.listed),
        }
    }

    /// The info as it reads once the room is over (an operator closed it, it expired).
    pub(super) fn ended_info(&self) -> RoomInfo {
        let mut info = self.info();
        info.status = RoomStatus::Ended;
        info
    }

    /// Saves `info` in the store without holding the room up, so that the room comes
    /// back after a restart (the file store) or on another node (cluster mode); the store
    /// keeps the order of writes from one room. An answer that acknowledges the change
    /// awaits the returned [`InfoSaved`] first.
    pub(super) fn save_info(&self, info: &RoomInfo, failed: &'static str) -> InfoSaved {
        let save = self.deps.store.put_room(info);
        let room = self.id.clone();
        let (saved, done) = tokio::sync::oneshot::channel();
        actix::spawn(async move {
            let stored = match save.await {
                Ok(()) => true,
                Err(e) => {
                    warn!(room = %room, error = %e, "{failed}");
                    false
                }
            };
            let _ = saved.send(stored);
        });
        InfoSaved(done)
    }

    /// Tells every watcher the room's new info and saves it (see [`Self::save_info`]).
    pub(super) fn publish_info(&mut self) -> InfoSaved {
        let info = self.info();
        let text: ByteString = wire::room_info(&self.id, &info).into();
        let saved = self.save_info(&info, "room info not saved");
        self.deps.directory.update(info);
        self.send_all(|_| text.clone());
        saved
    }

    /// Every watcher is told to resubscribe (the new owner will answer; `room_moved`,
    /// which marks the session's route stale) and the room stops here.
    fn move_away(&mut self, ctx: &mut Context<Self>, text: String) {
        let frame = ToClient::stale(&self.id, text);
        self.dismiss_all_with(frame);
        ctx.stop();
    }

    /// The lease is lost: tell every watcher to resubscribe (the new owner will answer)
    /// and stop.
    pub(super) fn fenced(&mut self, ctx: &mut Context<Self>) {
        // A lost lease reports the move done.
        let text = wire::room_moved(&self.id);
        self.move_away(ctx, text);
    }

    /// Nobody watches an ended (or operator-closed) room.
    fn abandoned(&self) -> bool {
        (self.admin.closed || matches!(self.phase, Phase::Ended(..))) && self.audience.subs.is_empty()
    }

    /// Once the game has ended and nobody watches, the room closes after [`super::ENDED_LINGER`]
    /// unless someone subscribes meanwhile. In cluster mode the node then releases the
    /// room's lease (it notices the room left the directory).
    pub(super) fn close_if_abandoned(&mut self, ctx: &mut Context<Self>) {
        if !self.abandoned() || self.timers.close_timer.is_some() {
            return;
        }
        self.timers.close_timer = Some(ctx.run_later(self.deps.ended_linger, |act, ctx| {
            act.timers.close_timer = None;
            if act.abandoned() {
                info!(room = %act.id, "ended room closed: nobody watching");
                ctx.stop();
            }
        }));
    }

    /// A room still waiting for its start [`RoomDeps::waiting_ttl`] after its creation
    /// closes: watchers are told (`room_expired`) and, in cluster mode, the stored room
    /// is marked ended so no node brings it back.
    fn expire_if_never_started(&mut self, ctx: &mut Context<Self>) {
        if !matches!(self.phase, Phase::Waiting) {
            return;
        }
        let age = Duration::from_millis(u64::try_from(self.time.wall_ms() - self.config.created_at).unwrap_or(0));
        let left = self.deps.waiting_ttl.saturating_sub(age);
        ctx.run_later(left, |act, ctx| {
            if !matches!(act.phase, Phase::Waiting) {
                return;
            }
            if act.lobby.starting {
                // The start is being stored: look again shortly.
                return act.expire_if_never_started(ctx);
            }
            info!(room = %act.id, "waiting room closed: not started in time");
            act.dismiss_all("room_expired", "오래 시작하지 않아서 방을 닫았어요");
            act.save_info(&act.ended_info(), "expired room not saved as ended");
            ctx.stop();
        });
    }
}

impl<G: Game> Actor for RoomActor<G> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // A restored game resumes its timers and bots at once; a restored ended room
        // nobody watches closes again.
        self.rearm(ctx);
        self.schedule_bots(ctx);
        if matches!(self.phase, Phase::Ended(..)) {
            // Only a restored room starts ended: its game finished but the saved info
            // may still say playing (a crash in between); save it as ended, so the store
            // stops listing it as open.
            self.publish_info();
        }
        if let Some(record) = self.pipeline.unrecorded.take() {
            self.record_if_missing(*record);
        }
        self.close_if_abandoned(ctx);
        self.expire_if_never_started(ctx);
        self.deps.metrics.rooms.inc();
        info!(room = %self.id, game = G::ID, "room opened");
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.unstall();
        self.deps.metrics.rooms.dec();
        self.deps.directory.remove(&self.id);
        info!(room = %self.id, "room closed");
    }
}

impl<G: Game> Handler<GetInfo> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, _msg: GetInfo, _ctx: &mut Context<Self>) -> Self::Result {
        Ok(self.info())
    }
}

impl<G: Game> Handler<Handover> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, _msg: Handover, ctx: &mut Context<Self>) {
        // Every earlier input is already stored (appends hold the mailbox), so the log is
        // complete: whoever takes the room next rebuilds exactly this state.
        // The handover announces the move.
        let text = wire::room_moving(&self.id);
        self.move_away(ctx, text);
    }
}

impl<G: Game> Mailbox for Addr<RoomActor<G>> {
    fn tell(&self, from: Sender, verb: SessionVerb) -> Result<(), RoomOpError> {
        verb.try_send_to(self, from)
    }
    fn ask(&self, request: crate::messages::Request) -> LocalBoxFuture<'static, Result<Answer, RoomOpError>> {
        request.send_to(self)
    }
    fn connected(&self) -> bool {
        Addr::connected(self)
    }
    fn handover(&self) -> Recipient<Handover> {
        self.clone().recipient()
    }
}
