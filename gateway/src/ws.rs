//! One session actor per WebSocket (the only module that touches actix-web-actors, so a
//! move to actix-ws stays local).
//!
//! The session authenticates before the upgrade, keeps a heartbeat (ping every
//! `heartbeat_s`, close after `client_timeout_s` of silence), measures RTT as an EMA
//! (alpha 0.2) and forwards it to its rooms, limits frame size (from each frame's header:
//! [`crate::ws_frames`]) and message rate (control frames count like data frames), parses
//! client messages and routes them to rooms. Rooms answer through `ToClient`.

use crate::protocol::{parse, ClientMsg};
use crate::state::AppState;
use crate::ws_frames::{is_not_utf8, Frames};
use actix::fut;
use actix::prelude::*;
use actix_http::error::PayloadError;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_web_actors::ws;
use bytes::Bytes;
use engine::PlayerId;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use room_actor::messages::{Act, Chat, Notice, Out, Rtt, SessionId, Subscribe, ToClient, Unsubscribe};
use room_actor::room_ref::{Caller, Lookup, Missing, RouteLost};
use room_actor::sessions::Session;
use room_actor::{wire, RoomRef};
use serde::Deserialize;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing::{debug, info, info_span};

/// Rooms answer into the session's mailbox; a session that cannot keep up is closed
/// instead of growing without bound.
const MAILBOX_CAPACITY: usize = 1024;
/// RTT EMA weight of a new sample.
const RTT_ALPHA: f64 = 0.2;
/// An RTT estimate within [`RTT_SAME_MS`] or a tenth of the one last sent (an EMA's
/// jitter: below what latency compensation or a shown RTT can tell apart) counts as
/// unchanged. An unchanged estimate is sent to the rooms again only
/// every this many pongs (every 10 s at the default 2 s heartbeat): a room takes a
/// sample only from a seated player, so one who sat down later still gets theirs, and
/// 18,000 idle sockets do not cost 9,000 room messages a second.
const RTT_RESEND_EVERY: u32 = 5;
const RTT_SAME_MS: u32 = 2;
/// Window over which over-limit messages are counted towards a flood close.
const FLOOD_WINDOW: Duration = Duration::from_secs(10);

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// `GET /ws?token=…`: refuses an address over its upgrade limit or holding its share of
/// the node's sockets with 429, a full node with 503, and a bad or missing token with 401,
/// before the upgrade.
pub async fn upgrade(
    req: HttpRequest,
    stream: web::Payload,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    if let Err(e) = state.limits.check(crate::limits::Kind::Socket, &req) {
        return Ok(e.into_response());
    }
    let addr_slot = match state.limits.open_socket(&req) {
        Ok(slot) => slot,
        Err(e) => return Ok(e.into_response()),
    };
    let open = state.sessions.len();
    if open >= state.settings.http.max_connections {
        info!(open, "WebSocket refused: node at http.max_connections");
        let mut err = crate::error::ApiError::new(
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
            "server_full",
            "접속한 사람이 너무 많아요. 잠시 후 다시 시도해 주세요",
        );
        err.retry_after_s = Some(5);
        return Ok(err.into_response());
    }
    let token = web::Query::<TokenQuery>::from_query(req.query_string()).ok().and_then(|q| q.into_inner().token);
    let Some(claims) = token.as_deref().and_then(|t| state.auth.verify(t)) else {
        return Ok(crate::error::ApiError::unauthorized().into_response());
    };
    let token_exp = claims.exp;
    let user = PlayerId::from(claims.sub);
    if let Err(err) = state.open_socket(&user).await {
        return Ok(err.into_response());
    }
    let settings = &state.settings.ws;
    let rate = NonZeroU32::new(settings.rate_per_s).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(settings.burst).unwrap_or(rate);
    let session = WsSession {
        id: SessionId(state.next_session.fetch_add(1, Ordering::Relaxed)),
        user: user.clone(),
        state: state.clone(),
        rooms: room_actor::FastMap::default(),
        watching: std::collections::HashSet::new(),
        last_seen: Instant::now(),
        ping_sent: None,
        rtt_ema: None,
        rtt_sent: RttSent::default(),
        limiter: RateLimiter::direct(Quota::per_second(rate).allow_burst(burst)),
        over_limit: 0,
        window_start: Instant::now(),
        caller: None,
        token_exp,
        fragments: None,
        ticks: 0,
        expiry_armed: false,
        incoming: Some(Frames::new(stream, settings.max_frame_bytes)),
        _addr_slot: addr_slot,
    };
    let mut response = match ws::handshake(&req) {
        Ok(response) => response,
        Err(e) => {
            // The handshake failed, so no session will ever close this slot.
            state.close_socket(&user);
            return Err(e.into());
        }
    };
    // The context's own reader gets a body that never yields: the session reads the real
    // one through `Frames`, added as a stream when it starts (see `ws_frames.rs` for why).
    let unused = futures_util::stream::pending::<Result<Bytes, PayloadError>>();
    Ok(response.streaming(ws::WebsocketContext::create(session, unused)))
}

trait IntoResponse {
    fn into_response(self) -> HttpResponse;
}

impl IntoResponse for crate::error::ApiError {
    fn into_response(self) -> HttpResponse {
        actix_web::ResponseError::error_response(&self)
    }
}

pub struct WsSession {
    id: SessionId,
    user: PlayerId,
    state: web::Data<AppState>,
    /// Each room this socket watches or acts in (a cache: dropped when a room moves,
    /// looked up again on the next message or route check).
    rooms: room_actor::FastMap<String, RoomRef>,
    /// Rooms the client subscribed to: they are subscribed again wherever they move.
    watching: std::collections::HashSet<String>,
    last_seen: Instant,
    ping_sent: Option<Instant>,
    rtt_ema: Option<f64>,
    /// Which RTT estimates go to the rooms.
    rtt_sent: RttSent,
    limiter: DefaultDirectRateLimiter,
    over_limit: u32,
    /// This session as rooms see it, once started.
    caller: Option<Caller>,
    window_start: Instant,
    /// The token's `exp` (epoch s): the socket closes then (1008 after a
    /// `token_expired` error), so an expired token keeps no socket alive.
    token_exp: u64,
    /// A fragmented message being reassembled: its kind and the bytes so far.
    fragments: Option<(FragmentKind, Vec<u8>)>,
    /// Ticks of the session's one timer since the socket opened (see [`Ticks`]).
    ticks: u64,
    /// The token's expiry is armed as a timer of its own (only in its last tick).
    expiry_armed: bool,
    /// The socket's incoming frames, until the session starts reading them.
    incoming: Option<Frames<web::Payload>>,
    /// This socket's place among its client address's open sockets, given back when
    /// the session is dropped.
    _addr_slot: Option<crate::limits::SocketSlot>,
}

/// How often a session checks its routes to rooms (cluster mode): a safety net. A room
/// whose holder changes is announced to the node's sessions by the node's route board
/// (`Notice::Moved`), and a route a room dropped is looked up again after
/// [`ROUTE_RETRY`]; this catches anything else (an actor here that stopped unannounced).
/// It keeps the board reading the rooms asked about (`routes::KEEP` is longer).
const ROUTE_RECHECK: Duration = Duration::from_secs(2);
/// How long after a room dropped its route (it moved, or cannot act now) a session that
/// still watches it looks it up again, if no message of its client did first.
const ROUTE_RETRY: Duration = Duration::from_secs(1);

/// A session's one periodic timer. actix polls every timer an actor runs on each of its
/// wakes (every frame it sends or receives), so the heartbeat, the route checks and the
/// token's expiry share one, as long as the longest whole number of seconds both
/// cadences are multiples of: the heartbeat runs every `heartbeat_every`th tick, the
/// route check (cluster mode) every `routes_every`th (0: never). The tick itself runs on
/// a task of its own that messages the session ([`Tick`], [`tick_every`]), so a wake of
/// the session for a frame polls no timer at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ticks {
    tick: Duration,
    heartbeat_every: u64,
    routes_every: u64,
}

impl Ticks {
    fn new(heartbeat_s: u64, cluster: bool) -> Ticks {
        let heartbeat = heartbeat_s.max(1);
        let recheck = ROUTE_RECHECK.as_secs();
        let (tick, heartbeat_every, routes_every) = if !cluster {
            (heartbeat, 1, 0)
        } else if heartbeat <= recheck {
            (heartbeat, 1, 1)
        } else if heartbeat.is_multiple_of(recheck) {
            (recheck, heartbeat / recheck, 1)
        } else {
            (1, heartbeat, recheck)
        };
        Ticks { tick: Duration::from_secs(tick), heartbeat_every, routes_every }
    }

    /// Whether tick number `n` (from 1) is a heartbeat.
    fn heartbeat(&self, n: u64) -> bool {
        n.is_multiple_of(self.heartbeat_every)
    }

    /// Whether tick number `n` (from 1) checks the routes.
    fn routes(&self, n: u64) -> bool {
        self.routes_every > 0 && n.is_multiple_of(self.routes_every)
    }
}

/// The RTT (ms) last sent to the rooms and the pongs since: a changed estimate goes at
/// once, an unchanged one (see [`RTT_SAME_MS`]) every [`RTT_RESEND_EVERY`] pongs.
#[derive(Debug, Default)]
struct RttSent(Option<(u32, u32)>);

impl RttSent {
    /// `true` if `rtt_ms` is to be sent now.
    fn due(&mut self, rtt_ms: u32) -> bool {
        match &mut self.0 {
            Some((sent, pongs))
                if sent.abs_diff(rtt_ms) <= RTT_SAME_MS.max(*sent / 10) && *pongs + 1 < RTT_RESEND_EVERY =>
            {
                *pongs += 1;
                false
            }
            _ => {
                self.0 = Some((rtt_ms, 0));
                true
            }
        }
    }
}

/// What a fragmented message started as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FragmentKind {
    Text,
    Binary,
}

impl WsSession {
    fn send_error(
        &self,
        ctx: &mut ws::WebsocketContext<Self>,
        code: &str,
        reason: &str,
        room: Option<&str>,
        cs: Option<u64>,
    ) {
        self.send_frame(ctx, wire::error(code, reason, room, cs));
    }

    /// An error frame for the client, counted.
    fn send_frame(&self, ctx: &mut ws::WebsocketContext<Self>, frame: String) {
        self.state.metrics.ws_errors.inc();
        ctx.text(frame);
    }

    /// Pings the client; `false` if it has been silent too long (the socket is closed).
    fn heartbeat(&mut self, ctx: &mut ws::WebsocketContext<Self>) -> bool {
        let timeout = Duration::from_secs(self.state.settings.ws.client_timeout_s);
        if self.last_seen.elapsed() > timeout {
            debug!(session = self.id.0, "heartbeat timeout");
            ctx.close(Some(ws::CloseReason {
                code: ws::CloseCode::Away,
                description: Some("heartbeat timeout".into()),
            }));
            ctx.stop();
            return false;
        }
        self.ping_sent = Some(Instant::now());
        ctx.ping(b"");
        true
    }

    /// Arms the close at the token's `exp` once it is due within the next `tick` (a timer
    /// armed hours ahead would be polled on every wake of the socket until then).
    fn arm_expiry(&mut self, ctx: &mut ws::WebsocketContext<Self>, tick: Duration) {
        if self.expiry_armed {
            return;
        }
        let left = Duration::from_secs(self.token_exp.saturating_sub(jsonwebtoken::get_current_timestamp()));
        if left > tick {
            return;
        }
        self.expiry_armed = true;
        ctx.run_later(left, |act, ctx| {
            debug!(session = act.id.0, "token expired");
            ctx.text(wire::error("token_expired", "로그인이 만료됐어요. 다시 로그인해 주세요", None, None));
            act.close_with(ctx, ws::CloseCode::Policy, "token expired");
        });
    }

    fn on_pong(&mut self) {
        let Some(sent) = self.ping_sent.take() else { return };
        let sample = sent.elapsed().as_secs_f64() * 1000.0;
        let ema = match self.rtt_ema {
            Some(prev) => RTT_ALPHA * sample + (1.0 - RTT_ALPHA) * prev,
            None => sample,
        };
        self.rtt_ema = Some(ema);
        let rtt_ms = ema.round().clamp(0.0, f64::from(u32::MAX)) as u32;
        if !self.rtt_sent.due(rtt_ms) {
            return;
        }
        let Some(caller) = &self.caller else { return };
        for room in self.rooms.values() {
            let _ = room.tell(caller, Rtt { rtt_ms }, Instant::now());
        }
    }

    /// `true` if the message may be handled; closes the socket on a persistent flood.
    fn within_rate(&mut self, ctx: &mut ws::WebsocketContext<Self>) -> bool {
        if self.limiter.check().is_ok() {
            return true;
        }
        if self.window_start.elapsed() > FLOOD_WINDOW {
            self.window_start = Instant::now();
            self.over_limit = 0;
        }
        self.over_limit += 1;
        if self.over_limit > self.state.settings.ws.flood_limit {
            self.state.metrics.ws_closed_flood.inc();
            ctx.close(Some(ws::CloseReason { code: ws::CloseCode::Policy, description: Some("flooding".into()) }));
            ctx.stop();
        } else {
            self.send_error(ctx, "rate_limited", "메시지를 너무 빨리 보내고 있어요", None, None);
        }
        false
    }

    /// Closes with `code` and a short reason, and stops.
    fn close_with(&mut self, ctx: &mut ws::WebsocketContext<Self>, code: ws::CloseCode, why: &str) {
        ctx.close(Some(ws::CloseReason { code, description: Some(why.into()) }));
        ctx.stop();
    }

    /// One frame of a fragmented message: collected within `ws.max_frame_bytes` (larger
    /// closes with 1009, like one big frame), handled when the last fragment arrives.
    /// Every fragment counts against the message rate.
    fn on_fragment(&mut self, item: actix_http::ws::Item, ctx: &mut ws::WebsocketContext<Self>) {
        if !self.within_rate(ctx) {
            // Dropped fragments would leave a broken message: refuse the whole socket
            // only on a flood (within_rate closes then); else forget the partial message.
            self.fragments = None;
            return;
        }
        let max = self.state.settings.ws.max_frame_bytes;
        let (kind, bytes, last) = match item {
            actix_http::ws::Item::FirstText(b) => (Some(FragmentKind::Text), b, false),
            actix_http::ws::Item::FirstBinary(b) => (Some(FragmentKind::Binary), b, false),
            actix_http::ws::Item::Continue(b) => (None, b, false),
            actix_http::ws::Item::Last(b) => (None, b, true),
        };
        match (kind, &mut self.fragments) {
            (Some(_), Some(_)) | (None, None) => {
                self.state.metrics.ws_errors.inc();
                debug!(session = self.id.0, "fragment out of order");
                return self.close_with(ctx, ws::CloseCode::Protocol, "fragment out of order");
            }
            (Some(kind), None) => self.fragments = Some((kind, Vec::with_capacity(bytes.len().min(max)))),
            (None, Some(_)) => {}
        }
        let Some((kind, buf)) = self.fragments.as_mut() else { return };
        if buf.len() + bytes.len() > max {
            self.fragments = None;
            self.state.metrics.ws_errors.inc();
            return self.close_with(ctx, ws::CloseCode::Size, "message too large");
        }
        buf.extend_from_slice(&bytes);
        if !last {
            return;
        }
        let kind = *kind;
        let Some((_, whole)) = self.fragments.take() else { return };
        match (kind, String::from_utf8(whole)) {
            (FragmentKind::Text, Ok(text)) => self.on_text(&text, ctx),
            (FragmentKind::Text, Err(_)) => {
                self.state.metrics.ws_errors.inc();
                self.close_with(ctx, ws::CloseCode::Invalid, "text is not UTF-8");
            }
            (FragmentKind::Binary, _) => {
                self.send_error(ctx, "bad_message", "텍스트(JSON) 메시지만 받아요", None, None)
            }
        }
    }

    fn on_text(&mut self, text: &str, ctx: &mut ws::WebsocketContext<Self>) {
        let received = Instant::now();
        let msg = match parse(text) {
            Ok(msg) => msg,
            Err(reason) => {
                debug!(session = self.id.0, len = text.len(), reason, "bad client message");
                return self.send_error(ctx, "bad_message", &reason, None, None);
            }
        };
        match msg {
            ClientMsg::Sub { room } => self.with_route(room, ctx, |act, room, route, resubscribed, ctx| match route {
                Err(Missing::Unknown) => act.send_frame(ctx, wire::unknown_room(&room)),
                Err(Missing::Moving) => {
                    // The room exists but is moving: watched from now on, so the route
                    // check subscribes as soon as its new owner answers (with a sync).
                    act.watching.insert(room.clone());
                    act.send_frame(ctx, wire::room_unavailable(&room));
                }
                // Found again after a move: `with_route` has just subscribed (and the
                // room answers with a sync), so once is enough.
                Ok(_) if resubscribed => {}
                Ok(route) => act.subscribe(room, route),
            }),
            ClientMsg::Unsub { room } => {
                if let (Some(route), Some(caller)) =
                    (self.watching.remove(&room).then(|| self.rooms.remove(&room)).flatten(), &self.caller)
                {
                    let _ = route.tell(caller, Unsubscribe, received);
                }
            }
            ClientMsg::Chat { room, phrase } => {
                self.with_route(room, ctx, move |act, room, route, _, ctx| match route {
                    Err(Missing::Unknown) => act.send_frame(ctx, wire::unknown_room(&room)),
                    Err(Missing::Moving) => act.send_frame(ctx, wire::room_unavailable(&room)),
                    Ok(route) => {
                        let Some(caller) = &act.caller else { return };
                        if route.tell(caller, Chat { phrase }, received).is_err() {
                            act.send_frame(ctx, wire::room_unavailable(&room));
                        }
                    }
                })
            }
            ClientMsg::Act { room, cs, action } => {
                let Some(action) = action else {
                    return ctx.text(wire::reject(&room, cs, "bad_action", "행동(`a`)이 없어요"));
                };
                self.with_route(room, ctx, move |act, room, route, _, ctx| match route {
                    Err(Missing::Unknown) => {
                        act.state.metrics.ws_errors.inc();
                        ctx.text(wire::reject_unknown_room(&room, cs));
                    }
                    // Not a reject: the room exists, the client resends the same cs.
                    Err(Missing::Moving) => act.send_frame(ctx, wire::resend(&room, Some(cs))),
                    Ok(route) => {
                        let Some(caller) = &act.caller else { return };
                        if route.tell(caller, Act { cs, action }, received).is_err() {
                            ctx.text(wire::resend(&room, Some(cs)));
                        }
                    }
                });
            }
        }
    }

    /// Runs `then` with the room's route: known, found on this node, or (cluster mode)
    /// looked up in the cluster, holding this session's later messages meanwhile so
    /// their order is kept.
    /// `then` learns whether the lookup re-subscribed a watched room that had moved.
    fn with_route<F>(&mut self, room: String, ctx: &mut ws::WebsocketContext<Self>, then: F)
    where
        F: FnOnce(&mut Self, String, Result<RoomRef, Missing>, bool, &mut ws::WebsocketContext<Self>) + 'static,
    {
        if let Some(route) = self.rooms.get(&room).cloned() {
            return then(self, room, Ok(route), false, ctx);
        }
        let lookup = match self.state.rooms.route(&room) {
            Lookup::Now(route) => return then(self, room, route, false, ctx),
            Lookup::Later(lookup) => lookup,
        };
        ctx.wait(fut::wrap_future(lookup).map(move |route: Result<RoomRef, Missing>, act: &mut Self, ctx| {
            // A watched room found again (it moved): watch it at its new place.
            let mut resubscribed = false;
            if let Ok(found) = &route {
                if act.watching.contains(&room) && !act.rooms.contains_key(&room) {
                    act.subscribe(room.clone(), found.clone());
                    resubscribed = true;
                }
            }
            then(act, room, route, resubscribed, ctx)
        }));
    }

    fn subscribe(&mut self, room: String, route: RoomRef) {
        if let Some(caller) = &self.caller {
            let now = Instant::now();
            let _ = route.tell(caller, Subscribe, now);
            // The room learns the caller's RTT with the subscription (a ring's credit).
            if let Some(rtt) = self.rtt_ema {
                let _ = route.tell(caller, Rtt { rtt_ms: rtt.round() as u32 }, now);
            }
        }
        self.watching.insert(room.clone());
        self.rooms.insert(room, route);
    }

    /// Every [`ROUTE_RECHECK`] (cluster mode): rooms watched through another node (or
    /// whose actor here stopped, or not found yet) are looked up again, so a session
    /// follows its room to a new owner after a failover (and gets a fresh `sync`).
    fn recheck_routes(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        let watched: Vec<String> = self.watching.iter().cloned().collect();
        self.follow(watched, ctx);
    }

    /// Forgets the route to `room`: the next message to it looks it up, and a watched room
    /// is looked up again after [`ROUTE_RETRY`] in any case (once per route dropped).
    fn drop_route(&mut self, room: &str, ctx: &mut ws::WebsocketContext<Self>) {
        if self.rooms.remove(room).is_some() && self.watching.contains(room) {
            let room = room.to_owned();
            ctx.run_later(ROUTE_RETRY, move |act, ctx| act.follow([room], ctx));
        }
    }

    /// Looks each of `rooms` this session watches up again where its route may be stale,
    /// and subscribes where the room is now.
    fn follow(&mut self, rooms: impl IntoIterator<Item = String>, ctx: &mut ws::WebsocketContext<Self>) {
        let lookup = &self.state.rooms;
        let checks: Vec<_> = rooms
            .into_iter()
            .filter(|room| self.watching.contains(room))
            .filter_map(|room| {
                let check = lookup.follow(&room, self.rooms.get(&room))?;
                Some((room, check))
            })
            .collect();
        for (room, check) in checks {
            ctx.spawn(fut::wrap_future(check).map(move |found: Option<RoomRef>, act: &mut Self, _ctx| {
                if let Some(route) = found {
                    act.subscribe(room, route);
                }
            }));
        }
    }
}

impl Actor for WsSession {
    type Context = ws::WebsocketContext<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        if let Some(incoming) = self.incoming.take() {
            ctx.add_stream(incoming);
        }
        self.caller = Some(Caller {
            session: self.id,
            user: self.user.clone(),
            out: Out::Local(ctx.address().recipient()),
            lost: ctx.address().recipient(),
        });
        self.state
            .sessions
            .insert(self.id.0, Session { out: ctx.address().recipient(), notice: ctx.address().recipient() });
        self.state.metrics.sessions.inc();
        let ticks = Ticks::new(self.state.settings.ws.heartbeat_s, self.state.rooms.rooms_move());
        self.arm_expiry(ctx, ticks.tick);
        actix::spawn(tick_every(ctx.address().downgrade(), ticks));
        let _span = info_span!("session", session_id = self.id.0, user_id = %self.user).entered();
        debug!("socket open");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.state.metrics.sessions.dec();
        self.state.close_socket(&self.user);
        self.state.closed_since_trim.fetch_add(1, Ordering::Relaxed);
        self.state.sessions.remove(self.id.0);
        if let Some(caller) = &self.caller {
            for route in std::mem::take(&mut self.rooms).into_values() {
                let _ = route.tell(caller, Unsubscribe, Instant::now());
            }
        }
    }
}

/// One tick of a session's timer (see [`Ticks`]).
#[derive(Message)]
#[rtype(result = "()")]
struct Tick(Ticks);

/// Sends `session` a [`Tick`] every `ticks.tick` until it is gone. A task of its own, not
/// an interval of the actor's context: actix polls every item of a context on each of its
/// wakes, and a socket wakes for every frame it sends or receives.
async fn tick_every<A>(session: actix::WeakAddr<A>, ticks: Ticks)
where
    A: Actor + Handler<Tick>,
    A::Context: actix::dev::ToEnvelope<A, Tick>,
{
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + ticks.tick, ticks.tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        // `upgrade` is `None` once the session stopped (its mailbox disconnected).
        match session.upgrade() {
            // Past the mailbox's bound: a tick is never dropped for a busy socket.
            Some(addr) => addr.do_send(Tick(ticks)),
            None => return,
        }
    }
}

impl Handler<Tick> for WsSession {
    type Result = ();

    fn handle(&mut self, Tick(ticks): Tick, ctx: &mut Self::Context) {
        self.ticks += 1;
        if ticks.heartbeat(self.ticks) && !self.heartbeat(ctx) {
            return;
        }
        // Rooms move only between cluster nodes.
        if ticks.routes(self.ticks) {
            self.recheck_routes(ctx);
        }
        self.arm_expiry(ctx, ticks.tick);
    }
}

impl Handler<Notice> for WsSession {
    type Result = ();

    fn handle(&mut self, notice: Notice, ctx: &mut Self::Context) {
        match notice {
            Notice::Drain => {
                ctx.close(Some(ws::CloseReason {
                    code: ws::CloseCode::Restart,
                    description: Some("node draining".into()),
                }));
                ctx.stop();
            }
            Notice::Moved(rooms) => self.follow(rooms.iter().cloned(), ctx),
        }
    }
}

/// A command could not reach the room's node (it is gone, or Redis is): the route is
/// dropped and the client told to resend.
impl Handler<RouteLost> for WsSession {
    type Result = ();

    fn handle(&mut self, msg: RouteLost, ctx: &mut Self::Context) {
        self.drop_route(&msg.room, ctx);
        ctx.text(wire::resend(&msg.room, msg.cs));
    }
}

impl Handler<ToClient> for WsSession {
    type Result = ();

    fn handle(&mut self, msg: ToClient, ctx: &mut Self::Context) {
        // A room that moved (or whose node cannot take actions now) is looked up again
        // on the client's next message, or after a moment if it is watched.
        if let Some(room) = &msg.stale_route {
            self.drop_route(room, ctx);
        }
        ctx.text(msg.text);
        if msg.close {
            // The room dropped this session for not keeping up: close instead of letting
            // its buffers grow.
            ctx.close(Some(ws::CloseReason { code: ws::CloseCode::Policy, description: Some("slow consumer".into()) }));
            ctx.stop();
        }
    }
}

impl StreamHandler<Result<ws::Message, ws::ProtocolError>> for WsSession {
    fn handle(&mut self, item: Result<ws::Message, ws::ProtocolError>, ctx: &mut Self::Context) {
        self.last_seen = Instant::now();
        match item {
            Ok(ws::Message::Text(text)) => {
                if self.within_rate(ctx) {
                    self.on_text(&text, ctx);
                }
            }
            // Control frames count against the message rate like data frames: a ping
            // flood is answered only within the rate and closed with 1008 past it.
            Ok(ws::Message::Ping(bytes)) => {
                if self.within_rate(ctx) {
                    ctx.pong(&bytes);
                }
            }
            Ok(ws::Message::Pong(_)) => {
                if self.within_rate(ctx) {
                    self.on_pong();
                }
            }
            Ok(ws::Message::Binary(_)) => {
                if self.within_rate(ctx) {
                    self.send_error(ctx, "bad_message", "텍스트(JSON) 메시지만 받아요", None, None);
                }
            }
            Ok(ws::Message::Close(reason)) => {
                // Counted too, but a close closes whatever the rate says.
                let _ = self.limiter.check();
                ctx.close(reason);
                ctx.stop();
            }
            Ok(ws::Message::Continuation(item)) => self.on_fragment(item, ctx),
            Ok(ws::Message::Nop) => {}
            Err(ws::ProtocolError::Overflow) => {
                self.state.metrics.ws_errors.inc();
                ctx.close(Some(ws::CloseReason {
                    code: ws::CloseCode::Size,
                    description: Some("frame too large".into()),
                }));
                ctx.stop();
            }
            Err(e) if is_not_utf8(&e) => {
                self.state.metrics.ws_errors.inc();
                self.close_with(ctx, ws::CloseCode::Invalid, "text is not UTF-8");
            }
            Err(e) => {
                debug!(session = self.id.0, error = %e, "protocol error");
                ctx.close(Some(ws::CloseReason { code: ws::CloseCode::Protocol, description: None }));
                ctx.stop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rtt_goes_to_the_rooms_when_it_changes_and_unchanged_every_few_pongs() {
        let mut sent = RttSent::default();
        assert!(sent.due(3), "the first estimate goes at once");
        let unchanged: Vec<bool> = (0..2 * RTT_RESEND_EVERY).map(|_| sent.due(3)).collect();
        let resent = unchanged.iter().filter(|due| **due).count();
        assert_eq!(resent, 2, "an unchanged estimate goes once per {RTT_RESEND_EVERY} pongs: {unchanged:?}");
        assert!(!unchanged[0], "not on the very next pong");
        assert!(!sent.due(5), "2 ms or less is the same");
        assert!(sent.due(6), "a changed estimate goes at once");
        assert!(!sent.due(6));
        assert!(sent.due(3), "and so does a change back");
        assert!(sent.due(300));
        assert!(!sent.due(329), "within a tenth is the same");
        assert!(sent.due(331));
    }

    /// Counts its ticks and stops after the second.
    struct Ticked(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl Actor for Ticked {
        type Context = Context<Self>;
    }

    impl Handler<Tick> for Ticked {
        type Result = ();
        fn handle(&mut self, _: Tick, ctx: &mut Context<Self>) {
            if self.0.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                ctx.stop();
            }
        }
    }

    #[actix::test]
    async fn the_tick_task_messages_its_session_each_tick_and_ends_with_it() {
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let ticks = Ticks { tick: Duration::from_millis(20), heartbeat_every: 1, routes_every: 0 };
        let addr = Ticked(count.clone()).start();
        let task = actix::spawn(tick_every(addr.downgrade(), ticks));
        // Two ticks, the actor stops after the second (its address still held, as the
        // node's session table holds a socket's), and the task ends at the third instead
        // of ticking on.
        tokio::time::timeout(Duration::from_secs(10), task).await.expect("the tick task ends").unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert!(!addr.connected());
    }

    #[test]
    fn one_timer_runs_the_heartbeat_and_the_route_checks_each_on_its_own_cadence() {
        let secs = |ticks: &Ticks, on: fn(&Ticks, u64) -> bool| -> Vec<u64> {
            (1..=12).filter(|n| on(ticks, *n)).map(|n| n * ticks.tick.as_secs()).collect()
        };
        // A single node: the tick is the heartbeat, no route checks.
        let single = Ticks::new(2, false);
        assert_eq!(single, Ticks { tick: Duration::from_secs(2), heartbeat_every: 1, routes_every: 0 });
        assert!(secs(&single, Ticks::routes).is_empty());
        // A cluster node at the default heartbeat: one tick every 2 s, both on each.
        let cluster = Ticks::new(2, true);
        assert_eq!(cluster.tick, ROUTE_RECHECK);
        assert_eq!(secs(&cluster, Ticks::heartbeat), [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24]);
        assert_eq!(secs(&cluster, Ticks::routes), secs(&cluster, Ticks::heartbeat));
        // A heartbeat of a second or less: every tick is both.
        let fast = Ticks::new(1, true);
        assert_eq!((fast.tick, secs(&fast, Ticks::routes).len()), (Duration::from_secs(1), 12));
        assert_eq!(Ticks::new(0, false).tick, Duration::from_secs(1), "0 s reads as 1 s");
        // A heartbeat the route check's cadence does not divide: ticks of a second.
        let odd = Ticks::new(3, true);
        assert_eq!(odd.tick, Duration::from_secs(1));
        assert_eq!(secs(&odd, Ticks::heartbeat), [3, 6, 9, 12]);
        assert_eq!(secs(&odd, Ticks::routes), [2, 4, 6, 8, 10, 12]);
        // A long heartbeat keeps its cadence, the route checks theirs.
        let long = Ticks::new(30, true);
        assert_eq!((long.tick, long.heartbeat_every), (ROUTE_RECHECK, 15));
        assert!((1..15).all(|n| !long.heartbeat(n)) && long.heartbeat(15) && long.routes(1));
    }
}
