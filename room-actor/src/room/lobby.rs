//! The lobby: who sits where, who hosts, and the start of the game (its start entry is
//! stored before the room plays).

use super::{InfoSaved, Phase, RoomActor, Running, INTERNAL_REASON};
use crate::dedupe::AppliedCs;
use crate::directory::RoomInfo;
use crate::log::StartEntry;
use crate::messages::*;
use crate::wire;
use actix::prelude::*;
use engine::{Actor as GameActor, Game, PlayerId, Rng, Seed, SetupCtx};
use tracing::{error, info};

pub(super) struct Seat {
    pub(super) user: PlayerId,
    pub(super) name: String,
    pub(super) bot: bool,
}

/// Seats in order, the host, and whether a start is being stored.
pub(super) struct Lobby {
    pub(super) host: PlayerId,
    pub(super) seats: Vec<Seat>,
    /// The start entry is being stored: the seats are frozen, no input is taken yet.
    pub(super) starting: bool,
    /// Players the host removed from a seat, oldest first: they may watch but never sit
    /// here again (saved with the room's info, so a restart or a failover keeps them out).
    /// At most [`MAX_REMOVED`], the oldest forgotten first, since the list travels in every
    /// copy of the info (lobby pages, `room` frames).
    pub(super) removed: Vec<PlayerId>,
}

impl Lobby {
    pub(super) fn new(host_seat: Seat, host: PlayerId) -> Lobby {
        Lobby { host, seats: vec![host_seat], starting: false, removed: Vec::new() }
    }
}

/// Most players a room remembers as removed by its host; past it the oldest is forgotten.
pub const MAX_REMOVED: usize = 32;

pub(super) const NOT_WAITING: RoomOpError = RoomOpError::new(409, "already_started", "이미 시작한 방이에요");
const NOT_HOST: RoomOpError = RoomOpError::new(403, "not_host", "방장만 할 수 있어요");
const ROOM_FULL: RoomOpError = RoomOpError::new(409, "room_full", "자리가 없어요");
pub(super) const KICKED_REASON: &str = "운영자가 이 방에서 내보냈어요. 이 방에는 다시 들어올 수 없어요";
const REMOVED: RoomOpError =
    RoomOpError::new(403, "removed_from_seat", "방장이 자리에서 내보냈어요. 이 방에는 다시 앉을 수 없어요");

impl<G: Game> RoomActor<G> {
    pub(super) fn is_seated(&self, user: &PlayerId) -> bool {
        self.lobby.seats.iter().any(|s| &s.user == user)
    }

    pub(super) fn is_bot(&self, user: &PlayerId) -> bool {
        self.lobby.seats.iter().any(|s| &s.user == user && s.bot)
    }

    /// Seats can change: nothing started, nothing starting.
    fn seats_open(&self) -> bool {
        matches!(self.phase, Phase::Waiting) && !self.lobby.starting
    }
}

impl<G: Game> Handler<TakeSeat> for RoomActor<G> {
    type Result = ResponseFuture<Result<RoomInfo, RoomOpError>>;

    fn handle(&mut self, msg: TakeSeat, _ctx: &mut Context<Self>) -> Self::Result {
        match self.take_seat(msg) {
            Ok(saved) => saved.then_answer(self.info()),
            Err(e) => Box::pin(fut::ready(Err(e))),
        }
    }
}

impl<G: Game> RoomActor<G> {
    fn take_seat(&mut self, msg: TakeSeat) -> Result<InfoSaved, RoomOpError> {
        if !self.seats_open() || self.admin.closed {
            return Err(NOT_WAITING);
        }
        if self.admin.kicked.contains(&msg.user) {
            return Err(RoomOpError::new(403, "kicked", KICKED_REASON));
        }
        if self.lobby.removed.contains(&msg.user) {
            return Err(REMOVED);
        }
        let max = G::players_for(&self.config.options).max;
        if msg.bot {
            if msg.user != self.lobby.host {
                return Err(NOT_HOST);
            }
            if self.lobby.seats.len() >= max {
                return Err(ROOM_FULL);
            }
            let n = (1..)
                .find(|n| !self.lobby.seats.iter().any(|s| s.user.as_str() == format!("bot_{}_{n}", self.id)))
                .unwrap_or(1);
            self.lobby.seats.push(Seat {
                user: PlayerId::new(format!("bot_{}_{n}", self.id)),
                name: format!("봇 {n}"),
                bot: true,
            });
        } else if !self.is_seated(&msg.user) {
            if self.lobby.seats.len() >= max {
                return Err(ROOM_FULL);
            }
            self.lobby.seats.push(Seat { user: msg.user, name: msg.name, bot: false });
        }
        Ok(self.publish_info())
    }
}

impl<G: Game> Handler<LeaveSeat> for RoomActor<G> {
    type Result = ResponseFuture<Result<RoomInfo, RoomOpError>>;

    fn handle(&mut self, msg: LeaveSeat, ctx: &mut Context<Self>) -> Self::Result {
        let refuse = |e: RoomOpError| -> Self::Result { Box::pin(fut::ready(Err(e))) };
        if !self.is_seated(&msg.user) || self.is_bot(&msg.user) {
            return refuse(RoomOpError::new(409, "not_seated", "이 방에 앉아 있지 않아요"));
        }
        match &self.phase {
            Phase::Waiting if !self.lobby.starting => {
                self.lobby.seats.retain(|s| s.user != msg.user);
                if msg.user == self.lobby.host {
                    match self.lobby.seats.iter().find(|s| !s.bot) {
                        Some(next) => self.lobby.host = next.user.clone(),
                        None => {
                            // Nobody left but bots: the room closes, and is stored as
                            // ended so that no restart brings it back.
                            let info = self.info();
                            let saved = self.save_info(&self.ended_info(), "closed room not saved as ended");
                            ctx.stop();
                            return saved.then_answer(info);
                        }
                    }
                }
                self.publish_info().then_answer(self.info())
            }
            Phase::Playing(_) if self.pipeline.busy() => refuse(RoomOpError::unavailable()),
            Phase::Playing(run) => {
                match G::on_leave(&run.state, &msg.user) {
                    Some(input) => {
                        self.process(ctx, GameActor::Player(msg.user), input, super::Origin::Timer);
                    }
                    None => {
                        // The game has no forfeit: the player counts as away with their grace
                        // already spent, so their turns time out without waiting.
                        let grace_ms = self.grace_ms(&run.state);
                        let since = self.time.now() - grace_ms;
                        self.audience.disconnected_since.insert(msg.user.clone(), since);
                        self.audience.gone.insert(msg.user);
                        // Saved with the room's info, so a failover keeps them gone.
                        self.publish_info();
                        self.rearm(ctx);
                    }
                }
                Box::pin(fut::ready(Ok(self.info())))
            }
            _ => refuse(NOT_WAITING),
        }
    }
}

impl<G: Game> Handler<RemoveSeat> for RoomActor<G> {
    type Result = ResponseFuture<Result<RoomInfo, RoomOpError>>;

    fn handle(&mut self, msg: RemoveSeat, _ctx: &mut Context<Self>) -> Self::Result {
        match self.remove_seat(msg) {
            Ok(saved) => saved.then_answer(self.info()),
            Err(e) => Box::pin(fut::ready(Err(e))),
        }
    }
}

impl<G: Game> RoomActor<G> {
    fn remove_seat(&mut self, msg: RemoveSeat) -> Result<InfoSaved, RoomOpError> {
        if msg.by != self.lobby.host {
            return Err(NOT_HOST);
        }
        if !self.seats_open() {
            return Err(NOT_WAITING);
        }
        if msg.user == self.lobby.host {
            return Err(RoomOpError::new(409, "cannot_remove_host", "방장은 나가기로만 자리를 비울 수 있어요"));
        }
        if !self.is_seated(&msg.user) {
            return Err(RoomOpError::new(404, "not_seated", "이 방에 앉아 있지 않아요"));
        }
        // A bot's id names its place, not anyone: the host may add a bot again. (A removed
        // player is never seated again, so nobody is listed twice.)
        if !self.is_bot(&msg.user) {
            if self.lobby.removed.len() >= MAX_REMOVED {
                self.lobby.removed.remove(0);
            }
            self.lobby.removed.push(msg.user.clone());
        }
        self.lobby.seats.retain(|s| s.user != msg.user);
        info!(room = %self.id, user = %msg.user, "host removed a seated player");
        let text: ByteString =
            wire::error("removed_from_seat", "방장이 자리에서 내보냈어요", Some(&self.id), None).into();
        for sub in self.audience.subs.values().filter(|s| s.user == msg.user) {
            Self::send(&sub.out, text.clone());
        }
        Ok(self.publish_info())
    }
}

impl<G: Game> Handler<Start> for RoomActor<G> {
    type Result = ResponseActFuture<Self, Result<String, RoomOpError>>;

    fn handle(&mut self, msg: Start, _ctx: &mut Context<Self>) -> Self::Result {
        let refuse = |e: RoomOpError| -> Self::Result { Box::pin(fut::ready(Err(e))) };
        if msg.user != self.lobby.host {
            return refuse(NOT_HOST);
        }
        if !self.seats_open() {
            return refuse(NOT_WAITING);
        }
        let range = G::players_for(&self.config.options);
        if !range.contains(self.lobby.seats.len()) {
            return refuse(RoomOpError::new(409, "bad_player_count", "인원이 맞지 않아 시작할 수 없어요"));
        }
        let seed = match self.config.fixed_seed.map(Ok).unwrap_or_else(Seed::from_os) {
            Ok(seed) => seed,
            Err(e) => {
                error!(room = %self.id, error = %e, "no OS randomness");
                return refuse(RoomOpError::new(503, "no_entropy", "잠시 후 다시 시도해 주세요"));
            }
        };
        let now = self.time.now();
        let players: Vec<PlayerId> = self.lobby.seats.iter().map(|s| s.user.clone()).collect();
        let mut rng = Rng::from_seed(seed);
        let setup = SetupCtx { players: &players, options: &self.config.options, now, game_no: None };
        let state = match G::setup(setup, &mut rng) {
            Ok(state) => state,
            Err(e) => {
                error!(room = %self.id, error = %e, "setup failed");
                return refuse(RoomOpError::new(500, "internal_error", INTERNAL_REASON));
            }
        };
        let game_pk =
            crate::redis::keys::game_pk(&self.id, &Seed::from_os().unwrap_or(Seed(now as u128)).to_hex()[..16]);
        let start = StartEntry {
            game_pk: game_pk.clone(),
            room_id: self.id.clone(),
            game: G::ID.to_owned(),
            seed,
            players: players.clone(),
            bots: self.lobby.seats.iter().filter(|s| s.bot).map(|s| s.user.clone()).collect(),
            names: self.lobby.seats.iter().map(|s| s.name.clone()).collect(),
            options_json: self.config.options_json.to_string(),
            state_version: G::STATE_VERSION,
            started_at: now,
            rtt: self.audience.rtt.clone(),
        };
        self.lobby.starting = true;
        let fut = self.deps.store.begin(start.clone());
        Box::pin(fut.into_actor(self).map(move |res, act, ctx| {
            act.lobby.starting = false;
            if let Err(e) = res {
                error!(room = %act.id, error = %e, "game start not stored");
                return Err(RoomOpError::new(503, "store_unavailable", "잠시 후 다시 시도해 주세요"));
            }
            act.pipeline.logged(start.rtt.clone());
            act.phase = Phase::Playing(Box::new(Running {
                game_pk: game_pk.clone(),
                start,
                state,
                rng,
                seq: 0,
                applied: AppliedCs::new(),
            }));
            // Seated humans without a socket are away from the first moment.
            act.audience.gone.clear();
            for seat in act.lobby.seats.iter().filter(|s| !s.bot) {
                if act.audience.sessions_of.get(&seat.user).copied().unwrap_or(0) == 0 {
                    act.audience.disconnected_since.insert(seat.user.clone(), now);
                }
            }
            // Everyone already watching now sees the game, as a player if seated.
            let seated: Vec<PlayerId> = players;
            for sub in act.audience.subs.values_mut() {
                sub.viewer = seated.contains(&sub.user).then(|| sub.user.clone());
            }
            act.sync_all(now);
            act.deps.metrics.games_started.inc();
            info!(room = %act.id, game_pk = %game_pk, "game started");
            act.publish_info();
            act.rearm(ctx);
            act.schedule_bots(ctx);
            Ok(game_pk)
        }))
    }
}
