//! The operators' API (`/admin/api/…`) and console (`/admin`), on the same port as the
//! player API but behind their own bearer token (`ROOMD__ADMIN__TOKEN`; unset = every
//! admin path answers 404, as if it did not exist). A player's token is never accepted.
//!
//! Reads work in both modes through the rooms service (`room_actor::rooms_service`):
//! embedded from this node's directory, cluster-wide from Redis in a fixed number of round
//! trips per page. Verbs travel to
//! the room wherever it lives through the rooms service, exactly like the player verbs
//! (`close`, `kick`, `unkick`, `inspect`), waiting out a room between owners, and a node drain goes to its node as `NodeCmd::Drain`,
//! which drains exactly as SIGTERM does.
//!
//! Every verb writes one audit line (`target: "audit"`: who, action, target, outcome) and
//! counts `roomd_admin_actions_total{action,outcome}`.

use crate::admin_auth::Refusal;
pub use crate::admin_auth::{fingerprint, Admin, FAILURE_REPORT_EVERY};
use crate::error::ApiError;
use crate::state::AppState;
use actix_web::dev::Payload;
use actix_web::http::{header, StatusCode};
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use engine::PlayerId;
use room_actor::messages::{Ask, Close, Kick, Unkick};
use room_actor::room_ref::Inspection;
use room_actor::rooms_service::{DrainRefused, RoomFilter};
use room_actor::RoomInfo;
use serde::Deserialize;
use serde_json::{json, Value};
use std::future::{ready, Ready};
use std::sync::atomic::Ordering;

/// Rows per page when the caller does not say, and the most it may ask for.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 200;

/// An authenticated operator (the extractor refuses everyone else).
pub struct Operator;

impl FromRequest for Operator {
    type Error = ApiError;
    type Future = Ready<Result<Operator, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let Some(state) = req.app_data::<web::Data<AppState>>() else {
            return ready(Err(ApiError::unavailable()));
        };
        if !state.admin.enabled() {
            return ready(Err(ApiError::not_found()));
        }
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim);
        // Refusals are summarised in the log every 10 s (`Admin::report_failures`), not
        // logged one by one: a guesser must not be able to flood the log.
        match state.admin.authorize(state.limits.client_ip(req), token) {
            Ok(()) => ready(Ok(Operator)),
            Err(Refusal::Wrong) => {
                ready(Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "운영자 토큰이 필요해요")))
            }
            Err(Refusal::Throttled(wait)) => {
                let mut err = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    "운영자 토큰이 너무 많이 틀렸어요. 잠시 후 다시 시도해 주세요",
                );
                err.retry_after_s = Some(crate::limits::retry_after_secs(wait));
                ready(Err(err))
            }
        }
    }
}

/// `/admin` (console) and `/admin/api/…`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin", web::get().to(console))
        .route("/admin/", web::get().to(console))
        .service(
            web::scope("/admin/api")
                .route("/nodes", web::get().to(nodes))
                .route("/nodes/{node}/drain", web::post().to(drain))
                .route("/rooms", web::get().to(rooms))
                .route("/rooms/{room}", web::get().to(room))
                .route("/rooms/{room}/close", web::post().to(close))
                .route("/rooms/{room}/kick", web::post().to(kick))
                .route("/rooms/{room}/unkick", web::post().to(unkick)),
        )
        .route("/admin/{file}", web::get().to(asset));
}

/// The console's files (`gateway/static/admin/`), embedded in the binary.
const CONSOLE: &[(&str, &str, &str)] = &[
    ("console.js", "text/javascript; charset=utf-8", include_str!("../static/admin/console.js")),
    ("console.css", "text/css; charset=utf-8", include_str!("../static/admin/console.css")),
];

async fn console(state: web::Data<AppState>) -> HttpResponse {
    if !state.admin.enabled() {
        return actix_web::ResponseError::error_response(&ApiError::not_found());
    }
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(include_str!("../static/admin/index.html"))
}

async fn asset(state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    match CONSOLE.iter().find(|(name, _, _)| *name == path.as_str()) {
        Some((_, content_type, body)) if state.admin.enabled() => HttpResponse::Ok()
            .content_type(*content_type)
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(*body),
        _ => actix_web::ResponseError::error_response(&ApiError::not_found()),
    }
}

fn now_ms(state: &AppState) -> i64 {
    state.rooms.now_ms()
}

/// This node's own report (also what it publishes for the others in cluster mode).
pub fn self_stats(state: &AppState) -> Value {
    json!({
        "address": state.admin.addr.get(),
        "rooms": state.rooms.local_rooms(),
        "sockets": state.sessions.len(),
        "version": env!("CARGO_PKG_VERSION"),
        "at": now_ms(state),
    })
}

/// Cluster mode: publishes this node's stats every heartbeat for `GET /admin/api/nodes`
/// (`RoomsService::spawn_stats_reporter`; nothing on an embedded node).
pub fn spawn_reporter(state: web::Data<AppState>) {
    let every = std::time::Duration::from_millis(state.settings.cluster.heartbeat_ms.max(100));
    let stats = state.clone();
    state.rooms.spawn_stats_reporter(&state.supervisor, every, move || self_stats(&stats));
}

/// `GET /admin/api/nodes`: the live nodes (an embedded node is the only one).
async fn nodes(state: web::Data<AppState>, _op: Operator) -> Result<HttpResponse, ApiError> {
    let draining = state.draining.load(Ordering::Relaxed);
    let rows = state.rooms.nodes(draining).await.map_err(|_| ApiError::unavailable())?;
    let nodes: Vec<Value> = rows
        .into_iter()
        .map(|n| {
            // This node answers for itself with live numbers, the others with their report.
            let stats = if n.id == state.node_id { Some(self_stats(&state)) } else { n.stats };
            let stat = |k: &str| stats.as_ref().map(|s| s[k].clone()).unwrap_or(Value::Null);
            json!({
                "id": n.id,
                "address": stat("address"),
                "draining": n.draining,
                "rooms": stat("rooms"),
                "sockets": stat("sockets"),
                "lastHeartbeat": n.last_heartbeat_ms,
                // Where it takes peer links (null: frames to it go through Redis).
                "peer": n.peer,
                "self": n.id == state.node_id,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "nodes": nodes })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RoomsQuery {
    cursor: Option<String>,
    limit: Option<usize>,
    game: Option<String>,
    node: Option<String>,
}

fn row(info: &RoomInfo, owner: Option<&str>, seq: Option<u64>, now: i64) -> Value {
    json!({
        "roomId": info.room_id,
        "game": info.game,
        "status": info.status,
        "node": owner,
        "host": info.host,
        "players": info.seats.len(),
        "humans": info.seats.iter().filter(|s| !s.bot).count(),
        "seats": info.seats,
        "seq": seq,
        "gamePk": info.game_pk,
        "createdAt": info.created_at,
        "ageMs": (now - info.created_at).max(0),
    })
}

async fn rooms(state: web::Data<AppState>, _op: Operator, q: web::Query<RoomsQuery>) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let filter = RoomFilter { game: nonempty(q.game), node: nonempty(q.node) };
    let cursor = nonempty(q.cursor);
    let now = now_ms(&state);
    let (rows, next) =
        state.rooms.admin_rooms(cursor.as_deref(), limit, &filter).await.map_err(|_| ApiError::unavailable())?;
    let rooms: Vec<Value> = rows.iter().map(|r| row(&r.info, r.owner.as_deref(), r.seq, now)).collect();
    Ok(HttpResponse::Ok().json(json!({"rooms": rooms, "next": next})))
}

async fn room(state: web::Data<AppState>, _op: Operator, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let (mut view, owner) = match state.rooms.inspect(&path).await? {
        Inspection::Live { view, node } => (serde_json::to_value(view).unwrap_or_default(), Some(node)),
        Inspection::Stored(info) => (json!({"info": info, "seq": null, "subscribers": 0, "recent": []}), None),
    };
    if let Some(obj) = view.as_object_mut() {
        obj.insert("node".into(), json!(owner));
        obj.insert("active".into(), json!(owner.is_some()));
    }
    Ok(HttpResponse::Ok().json(view))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CloseBody {
    #[serde(default)]
    reason: String,
}

/// The body of a verb about one user (`kick`, `unkick`): `{"user":ID,"reason":…}`, the
/// reason optional (told to a kicked user, written in the audit line).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserBody {
    user: String,
    #[serde(default)]
    reason: String,
}

impl UserBody {
    fn parse(body: &[u8]) -> Result<UserBody, ApiError> {
        let body: UserBody = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request("bad_json", format!("{{\"user\":ID}} 형식이어야 해요 ({e})")))?;
        if body.user.is_empty() {
            return Err(ApiError::bad_request("bad_user", "user가 비어 있어요"));
        }
        Ok(body)
    }
}

/// A JSON body where an empty one means the defaults.
fn body_or_default<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("bad_json", format!("요청 형식이 올바르지 않아요 ({e})")))
}

/// Runs a room verb on the room wherever it is (waiting out a move) and audits it.
async fn room_verb(
    state: &AppState,
    action: &'static str,
    room: &str,
    detail: &str,
    verb: impl Ask<Answer = RoomInfo>,
) -> Result<HttpResponse, ApiError> {
    let outcome: Result<RoomInfo, ApiError> = state.rooms.ask(room, verb).await.map_err(ApiError::from);
    match outcome {
        Ok(info) => {
            state.admin.audit(action, room, "ok", detail);
            Ok(HttpResponse::Ok().json(json!({"ok": true, "room": info})))
        }
        Err(e) => {
            state.admin.audit(action, room, &e.code, detail);
            Err(e)
        }
    }
}

async fn close(
    state: web::Data<AppState>,
    _op: Operator,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let body: CloseBody = body_or_default(&body)?;
    let detail = format!("reason={}", body.reason);
    room_verb(&state, "close", &path, &detail, Close { reason: body.reason }).await
}

async fn kick(
    state: web::Data<AppState>,
    _op: Operator,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let body = UserBody::parse(&body)?;
    let detail = format!("user={} reason={}", body.user, body.reason);
    let verb = Kick { user: PlayerId::from(body.user), reason: body.reason };
    room_verb(&state, "kick", &path, &detail, verb).await
}

/// `POST /admin/api/rooms/{room}/unkick` (body `{"user":ID}`): the user may come back.
async fn unkick(
    state: web::Data<AppState>,
    _op: Operator,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let body = UserBody::parse(&body)?;
    let detail = format!("user={} reason={}", body.user, body.reason);
    let verb = Unkick { user: PlayerId::from(body.user) };
    room_verb(&state, "unkick", &path, &detail, verb).await
}

async fn drain(state: web::Data<AppState>, _op: Operator, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let node = path.into_inner();
    let outcome: Result<(), ApiError> = async {
        if node == state.node_id {
            state.drain_request.notify_one();
            return Ok(());
        }
        match state.rooms.drain_node(&node, state.admin.who.clone()).await {
            Ok(()) => Ok(()),
            Err(DrainRefused::UnknownNode) => {
                Err(ApiError::new(StatusCode::NOT_FOUND, "unknown_node", "없는 노드예요"))
            }
            Err(DrainRefused::Unavailable) => Err(ApiError::unavailable()),
        }
    }
    .await;
    match outcome {
        Ok(()) => {
            state.admin.audit("drain", &node, "ok", "");
            Ok(HttpResponse::Accepted().json(json!({"ok": true, "node": node, "draining": true})))
        }
        Err(e) => {
            state.admin.audit("drain", &node, &e.code, "");
            Err(e)
        }
    }
}
