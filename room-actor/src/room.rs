//! `RoomActor<G>`: one actor per room, its mailbox the room's fairness queue.
//!
//! Inputs are handled one at a time in arrival order; `now` (serverTs) is stamped when
//! the actor takes the message. The input path is `game-engine.md` §4: dedupe on
//! (player, cs) → shape check → validate → apply (errors and panics contained) → append
//! to the store, holding the mailbox (`ctx.wait`) until the store confirms → swap in the
//! state, `seq + 1`, per-viewer updates, ack, re-arm the one timer, finish on a result.
//! Timers and bot moves come back as messages and take the same path.

use crate::dedupe::AppliedCs;
use crate::directory::{Directory, RoomHandle, RoomInfo, RoomStatus, SeatInfo};
use crate::error::{RebuildError, StoreError};
use crate::log::{GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use crate::messages::*;
use crate::metrics::RoomMetrics;
use crate::rebuild::{rebuild, From, Rebuilt};
use crate::store::RoomStore;
use crate::wire;
use actix::prelude::*;
use engine::schedule::{self, Presence};
use engine::{
    Actor as GameActor, Applied, Ctx, Game, GameResult, Input, InputOf, PlayerId, Reject, Rng, Seed, SetupCtx, ViewCtx,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{error, info, warn};

/// What every room of a node shares.
#[derive(Clone)]
pub struct RoomDeps {
    pub store: Arc<dyn RoomStore>,
    pub directory: Arc<Directory>,
    pub metrics: RoomMetrics,
    pub node_id: String,
    /// A snapshot every this many entries.
    pub snapshot_every: u64,
    pub clock: Clock,
    /// How long an ended room nobody watches stays open ([`ENDED_LINGER`] by default).
    pub ended_linger: Duration,
    /// How long a room may wait for its start before it closes ([`WAITING_TTL`] by
    /// default), so nobody can hold seats in rooms that never start.
    pub waiting_ttl: Duration,
}

/// A new room as `POST /api/rooms` asks for it (options already validated).
pub struct RoomSpec<O> {
    pub room_id: String,
    pub options: O,
    pub options_json: serde_json::Value,
    pub host: PlayerId,
    pub host_name: String,
    pub grace_sec: u32,
    /// Only when the server allows fixed seeds (dev/test).
    pub seed: Option<Seed>,
}

/// Where rooms read the time.
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// The node's wall clock (production).
    System,
    /// `base_ms` plus tokio's clock since `start`: with tokio's time paused, tests play
    /// hours of timeouts in milliseconds while timers and `now` stay consistent.
    Tokio { base_ms: i64, start: tokio::time::Instant },
}

impl Clock {
    /// A tokio-driven clock starting at the current wall time.
    pub fn tokio() -> Clock {
        Clock::Tokio { base_ms: Clock::System.now_ms(), start: tokio::time::Instant::now() }
    }

    /// Epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0),
            Clock::Tokio { base_ms, start } => base_ms + start.elapsed().as_millis() as i64,
        }
    }
}

struct Seat {
    user: PlayerId,
    name: String,
    bot: bool,
}

struct Sub {
    user: PlayerId,
    viewer: Option<PlayerId>,
    out: Recipient<ToClient>,
}

struct Running<G: Game> {
    game_pk: String,
    start: StartEntry,
    state: G::State,
    rng: Rng,
    seq: u64,
    applied: AppliedCs,
}

enum Phase<G: Game> {
    Waiting,
    Playing(Running<G>),
    Ended(Running<G>, GameResult),
}

/// The result as people read it: games write player ids into their Korean summary
/// (they know no names), so the room puts each seat's display name in their place. The
/// record keeps the game's own result, which is what a replay recomputes and compares.
fn named(result: &GameResult, start: &StartEntry) -> GameResult {
    let mut shown = result.clone();
    for (player, name) in start.players.iter().zip(&start.names) {
        if !name.is_empty() {
            shown.summary = shown.summary.replace(player.as_str(), name);
        }
    }
    shown
}

/// An input whose append has no known outcome yet (the store timed out or dropped the
/// connection after it was sent, or the log was found ahead of the room).
struct Pending<G: Game> {
    entry: LogEntry,
    applied: Applied<G::State, G::Event>,
    rng: Rng,
    origin: Origin,
}

/// Why a room takes no input right now: it waits for the store to tell it where its log
/// stands. It answers `room_unavailable` meanwhile and resumes by itself.
enum Stall<G: Game> {
    /// Resolve this append: the same entry is sent again (the script only stores seq
    /// `last + 1`, so it can never be stored twice) and, if the log already has that seq,
    /// the entry there is read back and compared with ours.
    Append(Box<Pending<G>>),
    /// The log is ahead of the room: rebuild from it.
    CatchUp,
}

/// First and longest wait between attempts to resolve a stalled room.
const RESOLVE_FIRST: Duration = Duration::from_millis(100);
const RESOLVE_MAX: Duration = Duration::from_secs(2);
/// Attempts to write a finished game's record before giving up (about 5 minutes).
const RECORD_ATTEMPTS: u32 = 150;

/// Who is waiting for the outcome of an input.
enum Origin {
    Client { cs: u64, out: Recipient<ToClient>, received: Instant },
    Timer,
    Bot,
}

impl Origin {
    fn cs(&self) -> Option<u64> {
        match self {
            Origin::Client { cs, .. } => Some(*cs),
            _ => None,
        }
    }
}

const INTERNAL_REASON: &str = "처리하지 못했어요. 다시 시도해 주세요";
/// Messages a room queues before senders get `room_unavailable` (actix's default is 16).
const ROOM_MAILBOX: usize = 4096;
/// After a room is restored on a node, no deadline is enforced for this long, so players
/// have time to reconnect (`game-engine.md` §4).
pub const RECOVERY_HOLD_MS: i64 = 30_000;
/// After a timer input is refused (a game bug), wait this long before trying again.
const TIMER_RETRY: Duration = Duration::from_secs(1);
/// An ended game that nobody watches closes after this long (embedded mode), so finished
/// rooms do not stay in memory and in the directory for the life of the process. The
/// game itself stays in the store (`GET /api/me/games`, replays).
pub const ENDED_LINGER: Duration = Duration::from_secs(60);
/// A room not started within this long after its creation closes.
pub const WAITING_TTL: Duration = Duration::from_secs(30 * 60);

pub struct RoomActor<G: Game> {
    id: String,
    deps: RoomDeps,
    options: G::Options,
    options_json: serde_json::Value,
    host: PlayerId,
    seats: Vec<Seat>,
    grace_sec: u32,
    fixed_seed: Option<Seed>,
    created_at: i64,
    phase: Phase<G>,
    starting: bool,
    subs: HashMap<SessionId, Sub>,
    /// Open sessions per seated user; a seated human with none is disconnected.
    sessions_of: HashMap<PlayerId, usize>,
    disconnected_since: BTreeMap<PlayerId, i64>,
    /// Players who left the running game: away for good, whatever their sockets do
    /// (watching again does not give their grace back).
    gone: HashSet<PlayerId>,
    rtt: BTreeMap<PlayerId, u32>,
    /// The RTT table as the log last recorded it (entries carry it when it changed).
    logged_rtt: BTreeMap<PlayerId, u32>,
    timer: Option<SpawnHandle>,
    /// An append is in flight (its `ctx.wait` has not completed).
    appending: bool,
    bot_rng: Rng,
    bot_pending: HashMap<PlayerId, (SpawnHandle, InputOf<G>)>,
    /// Time never runs backwards inside a room: `now` is at least the last logged `at`.
    last_at: i64,
    /// No deadline is enforced before this (recovery + 30 s).
    hold_until: i64,
    /// This node's lease token for the room (cluster mode); appends are fenced by it.
    lease: Option<String>,
    /// Closes an ended room nobody watches ([`ENDED_LINGER`]).
    close_timer: Option<SpawnHandle>,
    /// Waiting for the store to say where the log stands (see [`Stall`]).
    stall: Option<Stall<G>>,
    /// The next wait before trying to resolve the stall again (doubles up to
    /// [`RESOLVE_MAX`]), and when the stall began.
    resolve_backoff: Duration,
    stalled_since: Option<Instant>,
    /// Users an operator kicked (they may not sit or watch here again).
    kicked: Vec<PlayerId>,
    /// An operator closed the room before its game started: it reports `ended`.
    closed: bool,
    /// An operator is closing the running game: once its record is stored the room
    /// tells its watchers why and stops.
    closing: Option<String>,
    /// The last applied inputs, for operators ([`Inspect`]).
    recent: std::collections::VecDeque<RecentEntry>,
}

/// The kind of a logged input for operators: `client:<type>` / `system:<type>` from its
/// JSON (`{"client":{"type":"flip",…}}`), never any other field.
fn input_kind(input_json: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(input_json).unwrap_or(serde_json::Value::Null);
    let Some((side, inner)) = value.as_object().and_then(|o| o.iter().next()) else { return "unknown".to_owned() };
    let kind = match inner {
        serde_json::Value::String(s) => s.as_str(),
        serde_json::Value::Object(o) => o.get("type").and_then(serde_json::Value::as_str).unwrap_or("?"),
        _ => "?",
    };
    // Only short identifier-like kinds are shown (a game that tagged an action with data
    // would otherwise leak it here).
    let kind: String = kind.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(32).collect();
    format!("{side}:{kind}")
}

fn recent_entry(entry: &LogEntry) -> RecentEntry {
    RecentEntry {
        seq: entry.seq,
        at: entry.at,
        actor: match &entry.actor {
            GameActor::Player(p) => format!("player:{p}"),
            GameActor::Server => "system".to_owned(),
        },
        kind: input_kind(&entry.input_json),
        auto: entry.auto,
    }
}

impl<G: Game> RoomActor<G> {
    pub fn new(spec: RoomSpec<G::Options>, deps: RoomDeps) -> RoomActor<G> {
        let now = deps.clock.now_ms();
        RoomActor {
            id: spec.room_id,
            deps,
            options: spec.options,
            options_json: spec.options_json,
            seats: vec![Seat { user: spec.host.clone(), name: spec.host_name, bot: false }],
            host: spec.host,
            grace_sec: spec.grace_sec,
            fixed_seed: spec.seed,
            created_at: now,
            phase: Phase::Waiting,
            starting: false,
            subs: HashMap::new(),
            sessions_of: HashMap::new(),
            disconnected_since: BTreeMap::new(),
            gone: HashSet::new(),
            rtt: BTreeMap::new(),
            logged_rtt: BTreeMap::new(),
            timer: None,
            appending: false,
            bot_rng: Rng::from_seed(Seed::from_os().unwrap_or(Seed(now as u128))),
            bot_pending: HashMap::new(),
            last_at: now,
            hold_until: i64::MIN,
            lease: None,
            close_timer: None,
            stall: None,
            resolve_backoff: RESOLVE_FIRST,
            stalled_since: None,
            kicked: Vec::new(),
            closed: false,
            closing: None,
            recent: std::collections::VecDeque::new(),
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
        lease: Option<String>,
    ) -> Result<RoomActor<G>, RebuildError> {
        let options: G::Options = serde_json::from_value(info.options.clone())
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
            },
            deps,
        );
        actor.seats = seats;
        actor.created_at = info.created_at;
        actor.lease = lease;
        actor.kicked = info.kicked.clone();
        actor.closed = info.status == RoomStatus::Ended && stored.is_none();
        if let Some(stored) = &stored {
            let skip = stored.entries.len().saturating_sub(RECENT_ENTRIES);
            actor.recent = stored.entries.iter().skip(skip).map(recent_entry).collect();
        }
        if let Some(stored) = stored {
            let rebuilt = rebuild::<G>(&stored, From::LatestSnapshot)?;
            actor.logged_rtt =
                stored.entries.iter().rev().find_map(|e| e.rtt.clone()).unwrap_or(stored.start.rtt.clone());
            actor.last_at = now.max(rebuilt.last_at);
            actor.hold_until = actor.last_at + RECOVERY_HOLD_MS;
            // Everyone is away until they reconnect; their grace starts now.
            for seat in actor.seats.iter().filter(|s| !s.bot) {
                actor.disconnected_since.insert(seat.user.clone(), actor.last_at);
            }
            let run = Running {
                game_pk: stored.start.game_pk.clone(),
                start: stored.start.clone(),
                state: rebuilt.state,
                rng: rebuilt.rng,
                seq: rebuilt.seq,
                applied: rebuilt.applied,
            };
            // Who left the running game stays gone here too: away with their grace spent.
            let grace_ms = G::disconnect_grace_ms(&run.state).unwrap_or(i64::from(actor.grace_sec) * 1000);
            for user in info.gone.iter().filter(|u| actor.seats.iter().any(|s| &s.user == *u && !s.bot)) {
                actor.disconnected_since.insert(user.clone(), actor.last_at - grace_ms);
                actor.gone.insert(user.clone());
            }
            actor.phase = match G::result(&run.state) {
                Some(result) => Phase::Ended(run, result),
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
        let handle = RoomHandle {
            subscribe: addr.clone().recipient(),
            unsubscribe: addr.clone().recipient(),
            act: addr.clone().recipient(),
            rtt: addr.clone().recipient(),
            info: addr.clone().recipient(),
            take_seat: addr.clone().recipient(),
            leave_seat: addr.clone().recipient(),
            remove_seat: addr.clone().recipient(),
            start: addr.clone().recipient(),
            handover: addr.clone().recipient(),
            close: addr.clone().recipient(),
            kick: addr.clone().recipient(),
            inspect: addr.recipient(),
        };
        directory.insert(info, handle.clone());
        handle
    }

    fn now(&mut self) -> i64 {
        let now = self.deps.clock.now_ms().max(self.last_at);
        self.last_at = now;
        now
    }

    fn info(&self) -> RoomInfo {
        let range = G::players_for(&self.options);
        let (status, game_pk) = match &self.phase {
            Phase::Waiting if self.closed => (RoomStatus::Ended, None),
            Phase::Waiting => (RoomStatus::Waiting, None),
            Phase::Playing(r) => (RoomStatus::Playing, Some(r.game_pk.clone())),
            Phase::Ended(r, _) => (RoomStatus::Ended, Some(r.game_pk.clone())),
        };
        RoomInfo {
            room_id: self.id.clone(),
            game: G::ID.to_owned(),
            options: self.options_json.clone(),
            host: self.host.clone(),
            seats: self
                .seats
                .iter()
                .map(|s| SeatInfo { user_id: s.user.clone(), name: s.name.clone(), bot: s.bot })
                .collect(),
            status,
            game_pk,
            node: Some(self.deps.node_id.clone()),
            grace_sec: self.grace_sec,
            min_players: range.min,
            max_players: range.max,
            created_at: self.created_at,
            gone: {
                let mut gone: Vec<PlayerId> = self.gone.iter().cloned().collect();
                gone.sort();
                gone
            },
            kicked: self.kicked.clone(),
        }
    }

    fn is_seated(&self, user: &PlayerId) -> bool {
        self.seats.iter().any(|s| &s.user == user)
    }

    fn is_bot(&self, user: &PlayerId) -> bool {
        self.seats.iter().any(|s| &s.user == user && s.bot)
    }

    /// Sends without waiting; `false` if the session's mailbox is full (a slow reader).
    fn send(out: &Recipient<ToClient>, text: impl Into<Arc<str>>) -> bool {
        !matches!(out.try_send(ToClient { text: text.into(), close: false }), Err(SendError::Full(_)))
    }

    /// Sends to every subscriber; a subscriber that cannot keep up is dropped and its
    /// socket told to close, rather than the room buffering for it without bound.
    fn send_all(&mut self, mut text_for: impl FnMut(&Sub) -> Arc<str>) {
        let mut slow = Vec::new();
        for (session, sub) in &self.subs {
            if !Self::send(&sub.out, text_for(sub)) {
                slow.push(*session);
            }
        }
        for session in slow {
            if let Some(sub) = self.subs.remove(&session) {
                warn!(room = %self.id, user = %sub.user, "slow subscriber dropped");
                let text = wire::error(
                    "slow_consumer",
                    "연결이 너무 느려서 끊었어요. 다시 접속해 주세요",
                    Some(&self.id),
                    None,
                );
                // do_send ignores the mailbox bound: this last message always arrives.
                sub.out.do_send(ToClient { text: text.into(), close: true });
                // A seated player dropped is away from now on; the timer picks that up when
                // it is re-armed right after this broadcast (`commit`).
                let _ = self.left(sub.user);
            }
        }
    }

    fn publish_info(&mut self) {
        let info = self.info();
        let text: Arc<str> = wire::room_info(&self.id, &info).into();
        // Saved so that another node can restore the room (cluster mode); the store keeps
        // the order of writes from one room.
        let save = self.deps.store.put_room(&info);
        let room = self.id.clone();
        actix::spawn(async move {
            if let Err(e) = save.await {
                warn!(room = %room, error = %e, "room info not saved");
            }
        });
        self.deps.directory.update(info);
        self.send_all(|_| text.clone());
    }

    /// The lease is lost: tell every watcher to resubscribe (the new owner will answer)
    /// and stop.
    fn fenced(&mut self, ctx: &mut Context<Self>) {
        let text: Arc<str> =
            wire::error("room_moved", "방이 다른 서버로 옮겨졌어요. 다시 접속해 주세요", Some(&self.id), None).into();
        self.send_all(|_| text.clone());
        self.subs.clear();
        ctx.stop();
    }

    fn view_json(&self, state: &G::State, viewer: Option<&PlayerId>, now: i64, full: bool) -> String {
        let ctx = ViewCtx { now, rtt: Some(&self.rtt) };
        let result = if full {
            serde_json::to_string(&G::sync_view(state, viewer, &ctx))
        } else {
            serde_json::to_string(&G::view(state, viewer, &ctx))
        };
        result.unwrap_or_else(|e| {
            error!(room = %self.id, error = %e, "view does not serialize");
            "null".to_owned()
        })
    }

    /// Sends one subscriber the full picture: `sync`, and `result` if the game is over.
    fn sync_one(&self, sub: &Sub, now: i64) {
        match &self.phase {
            Phase::Waiting => {
                let info = serde_json::to_string(&self.info()).unwrap_or_else(|_| "null".into());
                Self::send(&sub.out, wire::sync(&self.id, 0, &info));
            }
            Phase::Playing(run) => {
                Self::send(
                    &sub.out,
                    wire::sync(&self.id, run.seq, &self.view_json(&run.state, sub.viewer.as_ref(), now, true)),
                );
            }
            Phase::Ended(run, result) => {
                Self::send(
                    &sub.out,
                    wire::sync(&self.id, run.seq, &self.view_json(&run.state, sub.viewer.as_ref(), now, true)),
                );
                let result_json = serde_json::to_string(&named(result, &run.start)).unwrap_or_else(|_| "null".into());
                Self::send(&sub.out, wire::result(&self.id, &run.game_pk, &result_json));
            }
        }
    }

    fn sync_all(&mut self, now: i64) {
        for sub in self.subs.values() {
            self.sync_one(sub, now);
        }
    }

    /// One `update` per subscriber, each view serialized once per distinct viewer.
    fn broadcast_update(&mut self, events: &[G::Event], now: i64) {
        let Phase::Playing(run) = &self.phase else { return };
        let events_json = serde_json::to_string(events).unwrap_or_else(|_| "[]".into());
        let mut by_viewer: HashMap<Option<PlayerId>, Arc<str>> = HashMap::new();
        for viewer in self.subs.values().map(|s| s.viewer.clone()) {
            if let std::collections::hash_map::Entry::Vacant(slot) = by_viewer.entry(viewer) {
                let view = self.view_json(&run.state, slot.key().as_ref(), now, false);
                slot.insert(wire::update(&self.id, run.seq, &view, &events_json).into());
            }
        }
        self.send_all(|sub| by_viewer.get(&sub.viewer).cloned().unwrap_or_else(|| Arc::from("")));
    }

    fn reject(&self, origin: &Origin, code: &str, reason: &str) {
        self.deps.metrics.rejected.with_label_values(&[code]).inc();
        match origin {
            Origin::Client { cs, out, .. } => {
                Self::send(out, wire::reject(&self.id, *cs, code, reason));
            }
            Origin::Timer | Origin::Bot => warn!(room = %self.id, code, reason, "server input refused"),
        }
    }

    /// Validates and applies `input`, then persists it; `false` if it was refused.
    fn process(&mut self, ctx: &mut Context<Self>, actor: GameActor, input: InputOf<G>, origin: Origin) -> bool {
        if self.appending || self.stall.is_some() {
            // actix 0.13 polls the context's spawned items (timer and bot wakes) once more
            // after a mailbox handler started a `ctx.wait`, before it notices the wait: an
            // input decided now would take the seq of the one in flight. Timer and bot
            // inputs are decided again after the append (it re-arms the timer and re-plans
            // the bots); a client is told to resend. The same while the room waits for an
            // unknown outcome to resolve.
            if let Origin::Client { cs, out, .. } = &origin {
                Self::send(
                    out,
                    wire::error("room_unavailable", "잠시 후 같은 요청을 다시 보내 주세요", Some(&self.id), Some(*cs)),
                );
            }
            return true;
        }
        let now = self.now();
        let rtt_ms = actor.player().and_then(|p| self.rtt.get(p).copied());
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
            rtt: (self.rtt != self.logged_rtt).then(|| self.rtt.clone()),
        };
        let append_started = Instant::now();
        let fut = match &self.lease {
            Some(token) => self.deps.store.append_leased(&run.game_pk, entry.clone(), token),
            None => self.deps.store.append(&run.game_pk, entry.clone()),
        };
        // Hold the mailbox until the store confirms: nothing is acknowledged or broadcast
        // before it is durable, and no later input overtakes this one.
        self.appending = true;
        ctx.wait(fut.into_actor(self).map(move |res, act, ctx| {
            act.appending = false;
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
                    if let Origin::Client { cs, out, .. } = &origin {
                        let text = wire::error(
                            "room_unavailable",
                            "잠시 후 같은 요청을 다시 보내 주세요",
                            Some(&act.id),
                            Some(*cs),
                        );
                        Self::send(out, text);
                    }
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

    /// The room cannot know where its log stands: it answers `room_unavailable` (the
    /// client resends the same `cs`: deduplicated if its input turns out stored) and
    /// resolves the stall by itself, retrying with a bounded backoff.
    fn stalled(&mut self, ctx: &mut Context<Self>, stall: Stall<G>, e: &StoreError) {
        self.deps.metrics.store_unknown_outcomes.inc();
        if self.stalled_since.is_none() {
            self.stalled_since = Some(Instant::now());
            self.deps.metrics.rooms_stalled.inc();
        }
        if let Stall::Append(p) = &stall {
            error!(room = %self.id, seq = p.entry.seq, error = %e,
                "log append outcome unknown; room unavailable until the log is read back");
            if let Origin::Client { cs, out, .. } = &p.origin {
                Self::send(
                    out,
                    wire::error("room_unavailable", "잠시 후 같은 요청을 다시 보내 주세요", Some(&self.id), Some(*cs)),
                );
            }
        } else {
            error!(room = %self.id, error = %e, "room behind its log; catching up from the log");
        }
        self.stall = Some(stall);
        self.resolve_backoff = RESOLVE_FIRST;
        self.resolve_later(ctx);
    }

    fn resolve_later(&mut self, ctx: &mut Context<Self>) {
        let wait = self.resolve_backoff;
        self.resolve_backoff = (self.resolve_backoff * 2).min(RESOLVE_MAX);
        ctx.run_later(wait, |act, ctx| act.resolve(ctx));
    }

    /// One attempt to resolve the stall.
    fn resolve(&mut self, ctx: &mut Context<Self>) {
        let Phase::Playing(run) = &self.phase else { return self.unstall() };
        let game_pk = run.game_pk.clone();
        match &self.stall {
            None => {}
            Some(Stall::Append(p)) => {
                // The same entry again: stored at most once whatever happened to the first.
                let fut = match &self.lease {
                    Some(token) => self.deps.store.append_leased(&game_pk, p.entry.clone(), token),
                    None => self.deps.store.append(&game_pk, p.entry.clone()),
                };
                ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
                    Ok(()) => act.resolved_stored(ctx, "stored on retry"),
                    Err(StoreError::Conflict { .. }) => act.read_back(ctx, game_pk),
                    Err(StoreError::Fenced) => {
                        act.deps.metrics.fenced_appends.inc();
                        warn!(room = %act.id, "fenced while resolving an append: lease lost, room stops here");
                        act.unstall();
                        act.fenced(ctx);
                    }
                    Err(e) => {
                        warn!(room = %act.id, error = %e, "append outcome still unknown; retrying");
                        act.resolve_later(ctx);
                    }
                }));
            }
            Some(Stall::CatchUp) => {
                let fut = self.deps.store.load(&game_pk);
                ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
                    Ok(Some(stored)) => match rebuild::<G>(&stored, From::LatestSnapshot) {
                        Ok(rebuilt) => act.caught_up(ctx, rebuilt, &stored),
                        Err(e) => {
                            error!(room = %act.id, error = %e, "log cannot be rebuilt; room gives itself up");
                            act.unstall();
                            act.fenced(ctx);
                        }
                    },
                    Ok(None) => {
                        error!(room = %act.id, "game log gone; room gives itself up");
                        act.unstall();
                        act.fenced(ctx);
                    }
                    Err(e) => {
                        warn!(room = %act.id, error = %e, "log not readable yet; retrying");
                        act.resolve_later(ctx);
                    }
                }));
            }
        }
    }

    /// The log already has our seq: is the entry there ours?
    fn read_back(&mut self, ctx: &mut Context<Self>, game_pk: String) {
        let Some(Stall::Append(p)) = &self.stall else { return };
        let seq = p.entry.seq;
        let fut = self.deps.store.entry(&game_pk, seq);
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            let Some(Stall::Append(p)) = &act.stall else { return };
            match res {
                Ok(Some(found)) if found == p.entry => act.resolved_stored(ctx, "stored by the first attempt"),
                Ok(_) => {
                    // Another entry holds our seq (or the log is elsewhere): ours was not
                    // stored. Its client already heard `room_unavailable` and resends.
                    if let Some(Stall::Append(p)) = &act.stall {
                        if !matches!(p.origin, Origin::Client { .. }) {
                            warn!(room = %act.id, seq, "server input not stored; decided again after catching up");
                        }
                    }
                    act.stall = Some(Stall::CatchUp);
                    act.resolve(ctx);
                }
                Err(e) => {
                    warn!(room = %act.id, error = %e, "log entry not readable yet; retrying");
                    act.resolve_later(ctx);
                }
            }
        }));
    }

    /// The pending entry is in the log: applied and acknowledged as if the first attempt
    /// had answered.
    fn resolved_stored(&mut self, ctx: &mut Context<Self>, how: &str) {
        let Some(Stall::Append(p)) = self.stall.take() else { return };
        let waited = self.stalled_since.map(|t| t.elapsed().as_millis()).unwrap_or(0);
        info!(room = %self.id, seq = p.entry.seq, waited_ms = waited as u64, how, "append outcome resolved: stored");
        self.unstall();
        let Pending { entry, applied, rng, origin } = *p;
        self.commit(ctx, entry, applied, rng, origin);
    }

    /// The room is back in step with its log.
    fn caught_up(&mut self, ctx: &mut Context<Self>, rebuilt: Rebuilt<G>, stored: &StoredGame) {
        let waited = self.stalled_since.map(|t| t.elapsed().as_millis()).unwrap_or(0);
        self.unstall();
        let Phase::Playing(run) = &mut self.phase else { return };
        info!(room = %self.id, from = run.seq, to = rebuilt.seq, waited_ms = waited as u64, "room caught up with its log");
        run.state = rebuilt.state;
        run.rng = rebuilt.rng;
        run.seq = rebuilt.seq;
        run.applied = rebuilt.applied;
        self.logged_rtt = stored.entries.iter().rev().find_map(|e| e.rtt.clone()).unwrap_or(stored.start.rtt.clone());
        self.last_at = self.last_at.max(rebuilt.last_at);
        let now = self.now();
        self.sync_all(now);
        let Phase::Playing(run) = &self.phase else { return };
        match G::result(&run.state) {
            Some(result) => self.finish(ctx, result, now),
            None => {
                self.rearm(ctx);
                self.schedule_bots(ctx);
            }
        }
    }

    fn unstall(&mut self) {
        self.stall = None;
        if self.stalled_since.take().is_some() {
            self.deps.metrics.rooms_stalled.dec();
        }
    }

    fn commit(
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
        if let (GameActor::Player(p), Some(cs)) = (&entry.actor, entry.cs) {
            run.applied.insert(p, cs, entry.seq);
        }
        if let Some(rtt) = &entry.rtt {
            self.logged_rtt = rtt.clone();
        }
        if self.recent.len() >= RECENT_ENTRIES {
            self.recent.pop_front();
        }
        self.recent.push_back(recent_entry(&entry));
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
        let Phase::Playing(run) = &self.phase else { return };
        match G::result(&run.state) {
            Some(result) => self.finish(ctx, result, entry.at),
            None => {
                self.rearm(ctx);
                self.schedule_bots(ctx);
            }
        }
    }

    fn finish(&mut self, ctx: &mut Context<Self>, result: GameResult, now: i64) {
        let Phase::Playing(run) = std::mem::replace(&mut self.phase, Phase::Waiting) else { return };
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        for (_, (h, _)) in self.bot_pending.drain() {
            ctx.cancel_future(h);
        }
        let result_json = serde_json::to_string(&result).unwrap_or_else(|_| "null".into());
        let record = GameRecord {
            game_pk: run.game_pk.clone(),
            room_id: self.id.clone(),
            game: G::ID.to_owned(),
            players: run.start.players.clone(),
            names: run.start.names.clone(),
            started_at: run.start.started_at,
            ended_at: now,
            state_version: G::STATE_VERSION,
            final_seq: run.seq,
            result_json: result_json.clone(),
            final_state_json: serde_json::to_string(&run.state).unwrap_or_default(),
        };
        info!(room = %self.id, game_pk = %run.game_pk, seq = run.seq, "game finished");
        self.deps.metrics.games_finished.inc();
        let shown = serde_json::to_string(&named(&result, &run.start)).unwrap_or_else(|_| "null".into());
        let text: Arc<str> = wire::result(&self.id, &run.game_pk, &shown).into();
        self.phase = Phase::Ended(run, result);
        let fut = self.deps.store.finish(record.clone());
        // The result goes out once the record is stored, so a client that asks for its
        // games or the replay right after `result` finds them.
        ctx.wait(fut.into_actor(self).map(move |res, act, ctx| {
            if let Err(e) = res {
                // Writing the record is idempotent (SETs and EXPIREs): whatever the first
                // attempt did, trying again until the store answers leaves one record.
                error!(room = %act.id, error = %e, "finished game not recorded yet; retrying");
                let store = act.deps.store.clone();
                let room = act.id.clone();
                actix::spawn(async move {
                    let mut wait = RESOLVE_FIRST;
                    for _ in 0..RECORD_ATTEMPTS {
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(RESOLVE_MAX);
                        match store.finish(record.clone()).await {
                            Ok(()) => return info!(room = %room, "finished game recorded on retry"),
                            Err(e) => warn!(room = %room, error = %e, "finished game not recorded yet"),
                        }
                    }
                    error!(room = %room, "finished game not recorded: store unavailable for too long");
                });
            }
            act.send_all(|_| text.clone());
            act.publish_info();
            match act.closing.take() {
                Some(reason) => act.close_now(ctx, &reason),
                None => act.close_if_abandoned(ctx),
            }
        }));
    }

    /// Once the game has ended and nobody watches, the room closes after [`ENDED_LINGER`]
    /// unless someone subscribes meanwhile. In cluster mode the node then releases the
    /// room's lease (it notices the room left the directory).
    fn close_if_abandoned(&mut self, ctx: &mut Context<Self>) {
        let abandoned = (self.closed || matches!(self.phase, Phase::Ended(..))) && self.subs.is_empty();
        if !abandoned || self.close_timer.is_some() {
            return;
        }
        self.close_timer = Some(ctx.run_later(self.deps.ended_linger, |act, ctx| {
            act.close_timer = None;
            if (act.closed || matches!(act.phase, Phase::Ended(..))) && act.subs.is_empty() {
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
        let age = Duration::from_millis(u64::try_from(self.deps.clock.now_ms() - self.created_at).unwrap_or(0));
        let left = self.deps.waiting_ttl.saturating_sub(age);
        ctx.run_later(left, |act, ctx| {
            if !matches!(act.phase, Phase::Waiting) {
                return;
            }
            if act.starting {
                // The start is being stored: look again shortly.
                return act.expire_if_never_started(ctx);
            }
            info!(room = %act.id, "waiting room closed: not started in time");
            let text: Arc<str> =
                wire::error("room_expired", "오래 시작하지 않아서 방을 닫았어요", Some(&act.id), None).into();
            act.send_all(|_| text.clone());
            act.subs.clear();
            let mut info = act.info();
            info.status = RoomStatus::Ended;
            let save = act.deps.store.put_room(&info);
            let room = act.id.clone();
            actix::spawn(async move {
                if let Err(e) = save.await {
                    warn!(room = %room, error = %e, "expired room not saved as ended");
                }
            });
            ctx.stop();
        });
    }

    /// Re-arms the room's single timer at the earliest thing the server must do.
    fn rearm(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let Phase::Playing(run) = &self.phase else { return };
        let grace_ms = i64::from(self.grace_sec) * 1000;
        let presence = Presence {
            disconnected_since: &self.disconnected_since,
            room_grace_ms: grace_ms,
            hold_until: self.hold_until,
        };
        if let Some(at) = schedule::next_wake::<G>(&run.state, &presence) {
            let delay = u64::try_from(at - self.deps.clock.now_ms()).unwrap_or(0);
            self.timer = Some(ctx.notify_later(Wake, Duration::from_millis(delay)));
        }
    }

    /// Gives every idle bot a move to think about.
    fn schedule_bots(&mut self, ctx: &mut Context<Self>) {
        let Phase::Playing(run) = &self.phase else { return };
        let now = self.deps.clock.now_ms().max(self.last_at);
        let bots: Vec<PlayerId> = self.seats.iter().filter(|s| s.bot).map(|s| s.user.clone()).collect();
        for bot in bots {
            if self.bot_pending.contains_key(&bot) {
                continue;
            }
            let legal = G::legal_actions(&run.state, &bot, now);
            if legal.is_empty() {
                continue;
            }
            let view = G::view(&run.state, Some(&bot), &ViewCtx { now, rtt: Some(&self.rtt) });
            if let Some(m) = G::bot_move(&view, &bot, &legal, &mut self.bot_rng) {
                let delay = Duration::from_millis(u64::try_from(m.delay_ms.clamp(0, 60_000)).unwrap_or(0));
                let handle = ctx.notify_later(BotWake { bot: bot.clone() }, delay);
                self.bot_pending.insert(bot, (handle, m.input));
            }
        }
    }

    /// One session of `user` is gone; `true` if that made a seated human disconnected
    /// (the timer must then be re-armed for their grace).
    fn left(&mut self, user: PlayerId) -> bool {
        let remaining = self.sessions_of.get_mut(&user).map(|n| {
            *n = n.saturating_sub(1);
            *n
        });
        if remaining.unwrap_or(0) > 0 {
            return false;
        }
        self.sessions_of.remove(&user);
        if self.is_seated(&user) && !self.is_bot(&user) && matches!(self.phase, Phase::Playing(_)) {
            // Away since now, unless already away for longer (a player who left the game
            // keeps the grace they were given as spent).
            let now = self.now();
            self.disconnected_since.entry(user).or_insert(now);
            return true;
        }
        false
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

impl<G: Game> Handler<Subscribe> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) {
        if self.kicked.contains(&msg.user) {
            Self::send(&msg.out, wire::error("kicked", KICKED_REASON, Some(&self.id), None));
            return;
        }
        let seated = self.is_seated(&msg.user);
        let viewer = (seated && !matches!(self.phase, Phase::Waiting)).then(|| msg.user.clone());
        let sub = Sub { user: msg.user.clone(), viewer, out: msg.out };
        let now = self.now();
        self.sync_one(&sub, now);
        if let Some(old) = self.subs.insert(msg.session, sub) {
            // The same session subscribing again: count its presence once.
            if let Some(n) = self.sessions_of.get_mut(&old.user) {
                *n = n.saturating_sub(1);
            }
        }
        *self.sessions_of.entry(msg.user.clone()).or_insert(0) += 1;
        if let Some(h) = self.close_timer.take() {
            ctx.cancel_future(h);
        }
        if !self.gone.contains(&msg.user) && self.disconnected_since.remove(&msg.user).is_some() {
            self.rearm(ctx);
        }
    }
}

impl<G: Game> Handler<Unsubscribe> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Context<Self>) {
        let Some(sub) = self.subs.remove(&msg.session) else { return };
        if self.left(sub.user) {
            self.rearm(ctx);
        }
        self.close_if_abandoned(ctx);
    }
}

impl<G: Game> Handler<Act> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: Act, ctx: &mut Context<Self>) {
        let origin = Origin::Client { cs: msg.cs, out: msg.out, received: msg.received };
        let run = match &self.phase {
            Phase::Playing(run) => run,
            Phase::Waiting => return self.reject(&origin, "not_started", "아직 게임이 시작되지 않았어요"),
            Phase::Ended(..) => return self.reject(&origin, "game_over", "게임이 이미 끝났어요"),
        };
        if !run.start.players.contains(&msg.user) {
            return self.reject(&origin, "not_seated", "이 게임의 플레이어가 아니에요");
        }
        if let Some(seq) = run.applied.get(&msg.user, msg.cs) {
            // A retry of an applied action: acknowledged again, never applied twice.
            if let Origin::Client { out, .. } = &origin {
                Self::send(out, wire::ack(&self.id, msg.cs, seq));
            }
            return;
        }
        let action: G::Action = match serde_json::from_value(msg.action) {
            Ok(a) => a,
            Err(e) => {
                // The decoder's message quotes the client's input: the log gets it, the
                // client a short reason.
                info!(room = %self.id, error = %e, "action does not decode");
                return self.reject(&origin, "bad_action", "올바르지 않은 행동이에요");
            }
        };
        self.process(ctx, GameActor::Player(msg.user), Input::Client(action), origin);
    }
}

impl<G: Game> Handler<RttSample> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: RttSample, _ctx: &mut Context<Self>) {
        // While the start entry is being stored, the table stays as that entry records it
        // (the first views show it); the next sample comes with the next ping.
        if self.is_seated(&msg.user) && !self.starting {
            self.rtt.insert(msg.user, msg.rtt_ms);
        }
    }
}

impl<G: Game> Handler<GetInfo> for RoomActor<G> {
    type Result = MessageResult<GetInfo>;

    fn handle(&mut self, _msg: GetInfo, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.info())
    }
}

const NOT_WAITING: RoomOpError = RoomOpError::new(409, "already_started", "이미 시작한 방이에요");
const NOT_HOST: RoomOpError = RoomOpError::new(403, "not_host", "방장만 할 수 있어요");
const ROOM_FULL: RoomOpError = RoomOpError::new(409, "room_full", "자리가 없어요");
const KICKED_REASON: &str = "운영자가 이 방에서 내보냈어요. 이 방에는 다시 들어올 수 없어요";

impl<G: Game> Handler<TakeSeat> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, msg: TakeSeat, _ctx: &mut Context<Self>) -> Self::Result {
        if !matches!(self.phase, Phase::Waiting) || self.starting || self.closed {
            return Err(NOT_WAITING);
        }
        if self.kicked.contains(&msg.user) {
            return Err(RoomOpError::new(403, "kicked", KICKED_REASON));
        }
        let max = G::players_for(&self.options).max;
        if msg.bot {
            if msg.user != self.host {
                return Err(NOT_HOST);
            }
            if self.seats.len() >= max {
                return Err(ROOM_FULL);
            }
            let n = (1..)
                .find(|n| !self.seats.iter().any(|s| s.user.as_str() == format!("bot_{}_{n}", self.id)))
                .unwrap_or(1);
            self.seats.push(Seat {
                user: PlayerId::new(format!("bot_{}_{n}", self.id)),
                name: format!("봇 {n}"),
                bot: true,
            });
        } else if !self.is_seated(&msg.user) {
            if self.seats.len() >= max {
                return Err(ROOM_FULL);
            }
            self.seats.push(Seat { user: msg.user, name: msg.name, bot: false });
        }
        self.publish_info();
        Ok(self.info())
    }
}

impl<G: Game> Handler<LeaveSeat> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, msg: LeaveSeat, ctx: &mut Context<Self>) -> Self::Result {
        if !self.is_seated(&msg.user) || self.is_bot(&msg.user) {
            return Err(RoomOpError::new(409, "not_seated", "이 방에 앉아 있지 않아요"));
        }
        match &self.phase {
            Phase::Waiting if !self.starting => {
                self.seats.retain(|s| s.user != msg.user);
                if msg.user == self.host {
                    match self.seats.iter().find(|s| !s.bot) {
                        Some(next) => self.host = next.user.clone(),
                        None => {
                            // Nobody left but bots: the room closes.
                            let info = self.info();
                            ctx.stop();
                            return Ok(info);
                        }
                    }
                }
                self.publish_info();
                Ok(self.info())
            }
            Phase::Playing(_) if self.stall.is_some() || self.appending => {
                Err(RoomOpError::new(503, "room_unavailable", "잠시 후 다시 시도해 주세요"))
            }
            Phase::Playing(run) => {
                match G::on_leave(&run.state, &msg.user) {
                    Some(input) => {
                        self.process(ctx, GameActor::Player(msg.user), input, Origin::Timer);
                    }
                    None => {
                        // The game has no forfeit: the player counts as away with their grace
                        // already spent, so their turns time out without waiting.
                        let grace_ms = G::disconnect_grace_ms(&run.state).unwrap_or(i64::from(self.grace_sec) * 1000);
                        let since = self.now() - grace_ms;
                        self.disconnected_since.insert(msg.user.clone(), since);
                        self.gone.insert(msg.user);
                        // Saved with the room's info, so a failover keeps them gone.
                        self.publish_info();
                        self.rearm(ctx);
                    }
                }
                Ok(self.info())
            }
            _ => Err(NOT_WAITING),
        }
    }
}

impl<G: Game> Handler<RemoveSeat> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, msg: RemoveSeat, _ctx: &mut Context<Self>) -> Self::Result {
        if msg.by != self.host {
            return Err(NOT_HOST);
        }
        if !matches!(self.phase, Phase::Waiting) || self.starting {
            return Err(NOT_WAITING);
        }
        if msg.user == self.host {
            return Err(RoomOpError::new(409, "cannot_remove_host", "방장은 나가기로만 자리를 비울 수 있어요"));
        }
        if !self.is_seated(&msg.user) {
            return Err(RoomOpError::new(404, "not_seated", "이 방에 앉아 있지 않아요"));
        }
        self.seats.retain(|s| s.user != msg.user);
        info!(room = %self.id, user = %msg.user, "host removed a seated player");
        let text: Arc<str> =
            wire::error("removed_from_seat", "방장이 자리에서 내보냈어요", Some(&self.id), None).into();
        for sub in self.subs.values().filter(|s| s.user == msg.user) {
            Self::send(&sub.out, text.clone());
        }
        self.publish_info();
        Ok(self.info())
    }
}

impl<G: Game> Handler<Start> for RoomActor<G> {
    type Result = ResponseActFuture<Self, Result<String, RoomOpError>>;

    fn handle(&mut self, msg: Start, _ctx: &mut Context<Self>) -> Self::Result {
        let refuse = |e: RoomOpError| -> Self::Result { Box::pin(fut::ready(Err(e))) };
        if msg.user != self.host {
            return refuse(NOT_HOST);
        }
        if !matches!(self.phase, Phase::Waiting) || self.starting {
            return refuse(NOT_WAITING);
        }
        let range = G::players_for(&self.options);
        if !range.contains(self.seats.len()) {
            return refuse(RoomOpError::new(409, "bad_player_count", "인원이 맞지 않아 시작할 수 없어요"));
        }
        let seed = match self.fixed_seed.map(Ok).unwrap_or_else(Seed::from_os) {
            Ok(seed) => seed,
            Err(e) => {
                error!(room = %self.id, error = %e, "no OS randomness");
                return refuse(RoomOpError::new(503, "no_entropy", "잠시 후 다시 시도해 주세요"));
            }
        };
        let now = self.now();
        let players: Vec<PlayerId> = self.seats.iter().map(|s| s.user.clone()).collect();
        let mut rng = Rng::from_seed(seed);
        let setup = SetupCtx { players: &players, options: &self.options, now, game_no: None };
        let state = match G::setup(setup, &mut rng) {
            Ok(state) => state,
            Err(e) => {
                error!(room = %self.id, error = %e, "setup failed");
                return refuse(RoomOpError::new(500, "internal_error", INTERNAL_REASON));
            }
        };
        let game_pk = crate::keys::game_pk(&self.id, &Seed::from_os().unwrap_or(Seed(now as u128)).to_hex()[..16]);
        let start = StartEntry {
            game_pk: game_pk.clone(),
            room_id: self.id.clone(),
            game: G::ID.to_owned(),
            seed,
            players: players.clone(),
            bots: self.seats.iter().filter(|s| s.bot).map(|s| s.user.clone()).collect(),
            names: self.seats.iter().map(|s| s.name.clone()).collect(),
            options_json: self.options_json.to_string(),
            state_version: G::STATE_VERSION,
            started_at: now,
            rtt: self.rtt.clone(),
        };
        self.starting = true;
        let fut = self.deps.store.begin(start.clone());
        Box::pin(fut.into_actor(self).map(move |res, act, ctx| {
            act.starting = false;
            if let Err(e) = res {
                error!(room = %act.id, error = %e, "game start not stored");
                return Err(RoomOpError::new(503, "store_unavailable", "잠시 후 다시 시도해 주세요"));
            }
            act.logged_rtt = start.rtt.clone();
            act.phase = Phase::Playing(Running {
                game_pk: game_pk.clone(),
                start,
                state,
                rng,
                seq: 0,
                applied: AppliedCs::new(),
            });
            // Seated humans without a socket are away from the first moment.
            act.gone.clear();
            for seat in act.seats.iter().filter(|s| !s.bot) {
                if act.sessions_of.get(&seat.user).copied().unwrap_or(0) == 0 {
                    act.disconnected_since.insert(seat.user.clone(), now);
                }
            }
            // Everyone already watching now sees the game, as a player if seated.
            let seated: Vec<PlayerId> = players;
            for sub in act.subs.values_mut() {
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

impl<G: Game> Handler<Handover> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, _msg: Handover, ctx: &mut Context<Self>) {
        // Every earlier input is already stored (appends hold the mailbox), so the log is
        // complete: whoever takes the room next rebuilds exactly this state.
        let text: Arc<str> =
            wire::error("room_moved", "방이 다른 서버로 옮겨져요. 다시 접속해 주세요", Some(&self.id), None).into();
        self.send_all(|_| text.clone());
        self.subs.clear();
        ctx.stop();
    }
}

impl<G: Game> Handler<Wake> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, _msg: Wake, ctx: &mut Context<Self>) {
        self.timer = None;
        let Phase::Playing(run) = &self.phase else { return };
        let now = self.deps.clock.now_ms().max(self.last_at);
        let grace_ms = i64::from(self.grace_sec) * 1000;
        let presence = Presence {
            disconnected_since: &self.disconnected_since,
            room_grace_ms: grace_ms,
            hold_until: self.hold_until,
        };
        match schedule::due::<G>(&run.state, now, &presence) {
            Some((actor, input)) => {
                if !self.process(ctx, actor, input, Origin::Timer) {
                    // A refused timer input is a game bug; do not spin on it.
                    self.timer = Some(ctx.notify_later(Wake, TIMER_RETRY));
                }
            }
            None => self.rearm(ctx),
        }
    }
}

impl<G: Game> Handler<BotWake> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: BotWake, ctx: &mut Context<Self>) {
        let Some((_, planned)) = self.bot_pending.remove(&msg.bot) else { return };
        let Phase::Playing(run) = &self.phase else { return };
        let now = self.deps.clock.now_ms().max(self.last_at);
        let actor = GameActor::Player(msg.bot.clone());
        let valid = |input: &InputOf<G>| G::validate(&run.state, &actor, input, &Ctx { now, rtt_ms: None }).is_ok();
        // The plan was made on an older view: keep it if it still holds, else think again
        // on the current view (no new delay), else do nothing and wait for the next change.
        let input = if valid(&planned) {
            Some(planned)
        } else {
            let legal = G::legal_actions(&run.state, &msg.bot, now);
            let view = G::view(&run.state, Some(&msg.bot), &ViewCtx { now, rtt: Some(&self.rtt) });
            G::bot_move(&view, &msg.bot, &legal, &mut self.bot_rng).map(|m| m.input).filter(valid)
        };
        match input {
            Some(input) => {
                if !self.process(ctx, actor, input, Origin::Bot) {
                    self.schedule_bots(ctx);
                }
            }
            None => self.schedule_bots(ctx),
        }
    }
}

impl<G: Game> RoomActor<G> {
    /// An operator closed the room: every watcher is told why, the room is saved as ended
    /// (it leaves the open-room set) and the actor stops.
    fn close_now(&mut self, ctx: &mut Context<Self>, reason: &str) {
        self.closed = true;
        self.publish_info();
        let text: Arc<str> =
            wire::error("room_closed", &format!("운영자가 방을 닫았어요: {reason}"), Some(&self.id), None).into();
        self.send_all(|_| text.clone());
        self.subs.clear();
        info!(room = %self.id, reason, "room closed by an operator");
        ctx.stop();
    }
}

/// The result of a game an operator ended: no ranking, the reason in the summary.
fn operator_result(reason: &str) -> GameResult {
    let summary = if reason.is_empty() {
        "운영자가 게임을 끝냈어요".to_owned()
    } else {
        format!("운영자가 게임을 끝냈어요: {reason}")
    };
    GameResult {
        ranking: Vec::new(),
        scores: None,
        summary,
        reason: engine::ResultReason::Abandoned,
        details: serde_json::json!({"closedBy": "operator", "reason": reason}),
    }
}

/// The largest operator reason kept (characters).
const MAX_ADMIN_REASON: usize = 200;

fn admin_reason(reason: &str) -> String {
    let reason: String = reason.trim().chars().filter(|c| !c.is_control()).take(MAX_ADMIN_REASON).collect();
    if reason.is_empty() {
        "운영 정책".to_owned()
    } else {
        reason
    }
}

impl<G: Game> Handler<Close> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, msg: Close, ctx: &mut Context<Self>) -> Self::Result {
        let reason = admin_reason(&msg.reason);
        if self.closing.is_some() || self.closed {
            return Err(RoomOpError::new(409, "already_closed", "이미 닫힌 방이에요"));
        }
        if self.starting || self.appending {
            // The start entry or an input is being stored: a moment later the room is in
            // a definite state.
            return Err(RoomOpError::new(409, "busy", "잠시 후 다시 시도해 주세요"));
        }
        if matches!(self.phase, Phase::Playing(_)) {
            let result = operator_result(&reason);
            let now = self.now();
            self.closing = Some(reason);
            self.finish(ctx, result, now);
        } else {
            self.close_now(ctx, &reason);
        }
        let mut info = self.info();
        info.status = RoomStatus::Ended;
        Ok(info)
    }
}

impl<G: Game> Handler<Kick> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, msg: Kick, ctx: &mut Context<Self>) -> Self::Result {
        let reason = admin_reason(&msg.reason);
        let watching: Vec<SessionId> =
            self.subs.iter().filter(|(_, sub)| sub.user == msg.user).map(|(session, _)| *session).collect();
        let seated = self.is_seated(&msg.user) && !self.is_bot(&msg.user);
        if !seated && watching.is_empty() {
            return Err(RoomOpError::new(404, "not_in_room", "이 방에 없는 사용자예요"));
        }
        if !self.kicked.contains(&msg.user) {
            self.kicked.push(msg.user.clone());
        }
        let text: Arc<str> =
            wire::error("kicked", &format!("운영자가 이 방에서 내보냈어요: {reason}"), Some(&self.id), None).into();
        for session in watching {
            if let Some(sub) = self.subs.remove(&session) {
                sub.out.do_send(ToClient { text: text.clone(), close: false });
                if self.left(sub.user) {
                    self.rearm(ctx);
                }
            }
        }
        info!(room = %self.id, user = %msg.user, reason, "user kicked by an operator");
        if seated
            && (matches!(self.phase, Phase::Playing(_)) || (matches!(self.phase, Phase::Waiting) && !self.starting))
        {
            // The seat goes exactly as if they had left (a forfeit or a spent grace in a
            // running game); that also saves the info with the kicked list.
            let left = <Self as Handler<LeaveSeat>>::handle(self, LeaveSeat { user: msg.user }, ctx);
            return left.or_else(|_| Ok(self.info()));
        }
        self.publish_info();
        Ok(self.info())
    }
}

impl<G: Game> Handler<Inspect> for RoomActor<G> {
    type Result = MessageResult<Inspect>;

    fn handle(&mut self, _msg: Inspect, _ctx: &mut Context<Self>) -> Self::Result {
        let seq = match &self.phase {
            Phase::Waiting => 0,
            Phase::Playing(run) | Phase::Ended(run, _) => run.seq,
        };
        MessageResult(AdminView {
            info: self.info(),
            seq,
            subscribers: self.subs.len(),
            recent: self.recent.iter().cloned().collect(),
        })
    }
}

#[cfg(test)]
mod admin_tests {
    use super::*;

    #[test]
    fn input_kinds_name_the_action_type_and_nothing_else() {
        assert_eq!(input_kind(r#"{"client":{"type":"offer","cardId":17,"claim":"rat"}}"#), "client:offer");
        assert_eq!(input_kind(r#"{"system":"timeout"}"#), "system:timeout");
        assert_eq!(input_kind(r#"{"system":{"type":"tick","hand":[1,2]}}"#), "system:tick");
        assert_eq!(input_kind(r#"{"client":{"type":"a\"b{c}"}}"#), "client:abc");
        assert_eq!(input_kind("garbage"), "unknown");
    }
}
