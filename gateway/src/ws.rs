//! One session actor per WebSocket (the only module that touches actix-web-actors, so a
//! move to actix-ws stays local).
//!
//! The session authenticates before the upgrade, keeps a heartbeat (ping every
//! `heartbeat_s`, close after `client_timeout_s` of silence), measures RTT as an EMA
//! (alpha 0.2) and forwards it to its rooms, limits frame size and message rate, parses
//! client messages and routes them to rooms. Rooms answer through `ToClient`.

use crate::server::AppState;
use actix::prelude::*;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_web_actors::ws;
use engine::PlayerId;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use room_actor::messages::{Act, RttSample, SessionId, Subscribe, ToClient, Unsubscribe};
use room_actor::{wire, RoomHandle};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing::{debug, info_span};

/// Rooms answer into the session's mailbox; a session that cannot keep up is closed
/// instead of growing without bound.
const MAILBOX_CAPACITY: usize = 1024;
/// RTT EMA weight of a new sample.
const RTT_ALPHA: f64 = 0.2;
/// Window over which over-limit messages are counted towards a flood close.
const FLOOD_WINDOW: Duration = Duration::from_secs(10);

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// `GET /ws?token=…`: refuses a bad or missing token with 401 before the upgrade.
pub async fn upgrade(
    req: HttpRequest,
    stream: web::Payload,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let token = web::Query::<TokenQuery>::from_query(req.query_string()).ok().and_then(|q| q.into_inner().token);
    let Some(claims) = token.as_deref().and_then(|t| state.auth.verify(t)) else {
        return Ok(crate::error::ApiError::unauthorized().into_response());
    };
    let user = PlayerId(claims.sub);
    if !state.open_socket(&user) {
        let err = crate::error::ApiError::new(
            actix_web::http::StatusCode::TOO_MANY_REQUESTS,
            "too_many_sockets",
            "동시에 열 수 있는 연결이 너무 많아요",
        );
        return Ok(err.into_response());
    }
    let settings = &state.settings.ws;
    let rate = NonZeroU32::new(settings.rate_per_s).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(settings.burst).unwrap_or(rate);
    let session = WsSession {
        id: SessionId(state.next_session.fetch_add(1, Ordering::Relaxed)),
        user: user.clone(),
        state: state.clone(),
        rooms: HashMap::new(),
        last_seen: Instant::now(),
        ping_sent: None,
        rtt_ema: None,
        limiter: RateLimiter::direct(Quota::per_second(rate).allow_burst(burst)),
        over_limit: 0,
        window_start: Instant::now(),
    };
    let response = ws::WsResponseBuilder::new(session, &req, stream).frame_size(settings.max_frame_bytes).start();
    if response.is_err() {
        // The handshake failed, so no session will ever close this slot.
        state.close_socket(&user);
    }
    response
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
    /// Rooms this socket watches.
    rooms: HashMap<String, RoomHandle>,
    last_seen: Instant,
    ping_sent: Option<Instant>,
    rtt_ema: Option<f64>,
    limiter: DefaultDirectRateLimiter,
    over_limit: u32,
    window_start: Instant,
}

/// What a client may send.
enum ClientMsg {
    Sub { room: String },
    Unsub { room: String },
    Act { room: String, cs: u64, action: Option<Value> },
}

/// Why a frame is not a client message: `(code, Korean reason)`.
fn parse(text: &str) -> Result<ClientMsg, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("JSON이 아니에요 ({e})"))?;
    let t = v.get("t").and_then(Value::as_str).ok_or("`t`가 없어요")?;
    let room = || v.get("room").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| "`room`이 없어요".to_owned());
    match t {
        "sub" => Ok(ClientMsg::Sub { room: room()? }),
        "unsub" => Ok(ClientMsg::Unsub { room: room()? }),
        "act" => {
            let cs = v.get("cs").and_then(Value::as_u64).ok_or("`cs`는 0 이상의 정수여야 해요")?;
            Ok(ClientMsg::Act { room: room()?, cs, action: v.get("a").cloned() })
        }
        other => Err(format!("알 수 없는 메시지 종류예요: {other}")),
    }
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
        self.state.metrics.ws_errors.inc();
        ctx.text(wire::error(code, reason, room, cs));
    }

    fn heartbeat(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        let timeout = Duration::from_secs(self.state.settings.ws.client_timeout_s);
        if self.last_seen.elapsed() > timeout {
            debug!(session = self.id.0, "heartbeat timeout");
            ctx.close(Some(ws::CloseReason {
                code: ws::CloseCode::Away,
                description: Some("heartbeat timeout".into()),
            }));
            ctx.stop();
            return;
        }
        self.ping_sent = Some(Instant::now());
        ctx.ping(b"");
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
        for room in self.rooms.values() {
            let _ = room.rtt.try_send(RttSample { user: self.user.clone(), rtt_ms });
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

    fn on_text(&mut self, text: &str, ctx: &mut ws::WebsocketContext<Self>) {
        let received = Instant::now();
        let msg = match parse(text) {
            Ok(msg) => msg,
            Err(reason) => return self.send_error(ctx, "bad_message", &reason, None, None),
        };
        match msg {
            ClientMsg::Sub { room } => {
                let Some(handle) = self.state.directory.handle(&room) else {
                    return self.send_error(ctx, "unknown_room", "없는 방이에요", Some(&room), None);
                };
                let out = ctx.address().recipient();
                let _ = handle.subscribe.try_send(Subscribe { session: self.id, user: self.user.clone(), out });
                if let Some(rtt) = self.rtt_ema {
                    let _ = handle.rtt.try_send(RttSample { user: self.user.clone(), rtt_ms: rtt.round() as u32 });
                }
                self.rooms.insert(room, handle);
            }
            ClientMsg::Unsub { room } => {
                if let Some(handle) = self.rooms.remove(&room) {
                    let _ = handle.unsubscribe.try_send(Unsubscribe { session: self.id });
                }
            }
            ClientMsg::Act { room, cs, action } => {
                let handle = match self.rooms.get(&room).cloned().or_else(|| self.state.directory.handle(&room)) {
                    Some(h) => h,
                    None => {
                        self.state.metrics.ws_errors.inc();
                        return ctx.text(wire::reject(&room, cs, "unknown_room", "없는 방이에요"));
                    }
                };
                let Some(action) = action else {
                    return ctx.text(wire::reject(&room, cs, "bad_action", "행동(`a`)이 없어요"));
                };
                let act = Act {
                    session: self.id,
                    user: self.user.clone(),
                    cs,
                    action,
                    out: ctx.address().recipient(),
                    received,
                };
                if handle.act.try_send(act).is_err() {
                    ctx.text(wire::error(
                        "room_unavailable",
                        "잠시 후 같은 요청을 다시 보내 주세요",
                        Some(&room),
                        Some(cs),
                    ));
                }
            }
        }
    }
}

impl Actor for WsSession {
    type Context = ws::WebsocketContext<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        self.state.metrics.sessions.inc();
        let interval = Duration::from_secs(self.state.settings.ws.heartbeat_s.max(1));
        ctx.run_interval(interval, |act, ctx| act.heartbeat(ctx));
        let _span = info_span!("session", session_id = self.id.0, user_id = %self.user).entered();
        debug!("socket open");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.state.metrics.sessions.dec();
        self.state.close_socket(&self.user);
        for handle in self.rooms.values() {
            let _ = handle.unsubscribe.try_send(Unsubscribe { session: self.id });
        }
    }
}

impl Handler<ToClient> for WsSession {
    type Result = ();

    fn handle(&mut self, msg: ToClient, ctx: &mut Self::Context) {
        ctx.text(msg.text.as_ref());
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
            Ok(ws::Message::Ping(bytes)) => ctx.pong(&bytes),
            Ok(ws::Message::Pong(_)) => self.on_pong(),
            Ok(ws::Message::Binary(_)) => {
                if self.within_rate(ctx) {
                    self.send_error(ctx, "bad_message", "텍스트(JSON) 메시지만 받아요", None, None);
                }
            }
            Ok(ws::Message::Close(reason)) => {
                ctx.close(reason);
                ctx.stop();
            }
            Ok(ws::Message::Continuation(_)) | Ok(ws::Message::Nop) => {}
            Err(ws::ProtocolError::Overflow) => {
                self.state.metrics.ws_errors.inc();
                ctx.close(Some(ws::CloseReason {
                    code: ws::CloseCode::Size,
                    description: Some("frame too large".into()),
                }));
                ctx.stop();
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
    fn parses_the_three_client_messages() {
        assert!(matches!(parse(r#"{"t":"sub","room":"R"}"#), Ok(ClientMsg::Sub { room }) if room == "R"));
        assert!(matches!(parse(r#"{"t":"unsub","room":"R"}"#), Ok(ClientMsg::Unsub { .. })));
        assert!(matches!(
            parse(r#"{"t":"act","room":"R","cs":7,"a":{"type":"bump"}}"#),
            Ok(ClientMsg::Act { cs: 7, action: Some(_), .. })
        ));
        assert!(matches!(parse(r#"{"t":"act","room":"R","cs":7}"#), Ok(ClientMsg::Act { action: None, .. })));
    }

    #[test]
    fn refuses_everything_else_with_a_reason() {
        for bad in [
            "nope",
            "[]",
            r#"{"t":1}"#,
            r#"{"t":"dance"}"#,
            r#"{"t":"sub"}"#,
            r#"{"t":"act","room":"R","cs":-1}"#,
            r#"{"t":"act","room":"R"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
