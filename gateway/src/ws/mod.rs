//! One session actor per WebSocket (the only module that touches actix-web-actors, so a
//! move to actix-ws stays local).
//!
//! The session authenticates before the upgrade, keeps a heartbeat (ping every
//! `heartbeat_s`, close after `client_timeout_s` of silence), measures RTT as an EMA
//! (alpha 0.2) and forwards it to its rooms, limits frame size (from each frame's header:
//! [`crate::ws_frames`]) and message rate (control frames count like data frames), parses
//! client messages and routes them to rooms. Rooms answer through `ToClient`.

mod handshake;
mod timing;

pub use handshake::upgrade;

use crate::protocol::{parse, ClientMsg};
use crate::state::AppState;
use crate::ws_frames::{is_not_utf8, Frames};
use actix::prelude::*;
use actix_web::web;
use actix_web_actors::ws;
use engine::PlayerId;
use governor::DefaultDirectRateLimiter;
use room_actor::messages::{Act, Chat, Notice, Out, SessionId, Subscribe, ToClient, Unsubscribe};
use room_actor::room_ref::{Caller, RouteLost};
use room_actor::session_rooms::SessionRooms;
use room_actor::sessions::Session;
use room_actor::wire;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use timing::{tick_every, RttSent, Tick, Ticks};
use tracing::{debug, info_span};

/// Rooms answer into the session's mailbox; a session that cannot keep up is closed
/// instead of growing without bound.
const MAILBOX_CAPACITY: usize = 1024;
/// RTT EMA weight of a new sample.
const RTT_ALPHA: f64 = 0.2;
/// Window over which over-limit messages are counted towards a flood close.
const FLOOD_WINDOW: Duration = Duration::from_secs(10);

pub struct WsSession {
    id: SessionId,
    user: PlayerId,
    state: web::Data<AppState>,
    /// The rooms this socket watches or acts in, each through a route that follows its
    /// room wherever it moves (`room_actor::session_rooms`), once started.
    rooms: Option<SessionRooms>,
    last_seen: Instant,
    ping_sent: Option<Instant>,
    rtt_ema: Option<f64>,
    /// Which RTT estimates go to the rooms.
    rtt_sent: RttSent,
    limiter: DefaultDirectRateLimiter,
    over_limit: u32,
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
        let due = self.rtt_sent.due(rtt_ms);
        if let Some(rooms) = &self.rooms {
            rooms.rtt(rtt_ms, due);
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
        let Some(rooms) = &self.rooms else { return };
        match msg {
            ClientMsg::Sub { room } => rooms.tell(&room, Subscribe, received),
            ClientMsg::Unsub { room } => rooms.tell(&room, Unsubscribe, received),
            ClientMsg::Chat { room, phrase } => rooms.tell(&room, Chat { phrase }, received),
            ClientMsg::Act { room, cs, action } => {
                let Some(action) = action else {
                    return ctx.text(wire::reject(&room, cs, "bad_action", "행동(`a`)이 없어요"));
                };
                rooms.tell(&room, Act { cs, action }, received);
            }
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
        let caller = Caller {
            session: self.id,
            user: self.user.clone(),
            out: Out::Local(ctx.address().recipient()),
            lost: ctx.address().recipient(),
        };
        let errors = self.state.metrics.ws_errors.clone();
        self.rooms = Some(self.state.rooms.session_rooms(caller, errors));
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
        if let Some(rooms) = &self.rooms {
            rooms.close();
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
            if let Some(rooms) = &self.rooms {
                rooms.recheck();
            }
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
            Notice::Moved(moved) => {
                if let Some(rooms) = &self.rooms {
                    rooms.follow(moved.iter().cloned());
                }
            }
        }
    }
}

/// A command could not reach the room's node (it is gone, or Redis is): the route is
/// dropped and the client told to resend.
impl Handler<RouteLost> for WsSession {
    type Result = ();

    fn handle(&mut self, msg: RouteLost, _ctx: &mut Self::Context) {
        if let Some(rooms) = &self.rooms {
            rooms.lost(&msg.room, msg.cs);
        }
    }
}

impl Handler<ToClient> for WsSession {
    type Result = ();

    fn handle(&mut self, msg: ToClient, ctx: &mut Self::Context) {
        // A room that moved (or whose node cannot take actions now) is looked up again
        // on the client's next message, or after a moment if it is watched.
        if let (Some(room), Some(rooms)) = (&msg.stale_route, &self.rooms) {
            rooms.stale(room);
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
