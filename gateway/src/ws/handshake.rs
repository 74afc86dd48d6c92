//! The WebSocket upgrade: the refusals before it (an address over its limits, a full
//! node, a bad token, a user's socket cap) and the session it starts. Apart from the
//! session actor, which only ever sees an accepted socket.

use super::timing::RttSent;
use super::WsSession;
use crate::state::AppState;
use crate::ws_frames::Frames;
use actix_http::error::PayloadError;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_web_actors::ws;
use bytes::Bytes;
use engine::PlayerId;
use governor::{Quota, RateLimiter};
use room_actor::messages::SessionId;
use serde::Deserialize;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tracing::info;

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
        rooms: None,
        last_seen: Instant::now(),
        ping_sent: None,
        rtt_ema: None,
        rtt_sent: RttSent::default(),
        limiter: RateLimiter::direct(Quota::per_second(rate).allow_burst(burst)),
        over_limit: 0,
        window_start: Instant::now(),
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
