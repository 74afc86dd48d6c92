//! The HTTP API of `PROTOCOL.md`.

use crate::auth::User;
use crate::error::ApiError;
use crate::limits::Kind;
use crate::state::AppState;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use engine::registry;
use engine::{PlayerId, Seed};
use prometheus::{Encoder, TextEncoder};
use room_actor::lobby;
use room_actor::messages::{LeaveSeat, RemoveSeat, Start, TakeSeat};
use room_actor::rooms_service::{LobbyFilter, Readiness, Refused, Unready};
use room_actor::spawn::{CreateError, NewRoom};
use room_actor::supervise::Down;
use room_actor::RoomStatus;
use serde::Deserialize;
use serde_json::json;
use std::sync::atomic::Ordering;

/// Largest JSON body the API reads.
const MAX_BODY: usize = 64 * 1024;
/// What a malformed body or query gets (the parser's own message goes to the log only:
/// it quotes the client's input and names our fields).
const BAD_REQUEST_REASON: &str = "요청 형식이 올바르지 않아요";

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(index))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(player_metrics))
        .configure(crate::web::routes)
        .service(
            web::scope("/api")
                .route("/session", web::post().to(create_session))
                .route("/games", web::get().to(games))
                .route("/rooms", web::post().to(create))
                .route("/rooms", web::get().to(list))
                .route("/rooms/{room}", web::get().to(get_room))
                .route("/rooms/{room}/seats", web::post().to(sit))
                .route("/rooms/{room}/seats/me", web::delete().to(leave))
                .route("/rooms/{room}/seats/{user}", web::delete().to(remove_seat))
                .route("/rooms/{room}/start", web::post().to(start))
                .route("/me/games", web::get().to(my_games))
                .route("/replays/{game_pk}", web::get().to(crate::replay::get)),
        );
}

/// Bad JSON bodies get our error shape, not actix's plain text.
pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default().limit(MAX_BODY).error_handler(|err, _| {
        let api = match &err {
            actix_web::error::JsonPayloadError::Overflow { .. }
            | actix_web::error::JsonPayloadError::OverflowKnownLength { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", "요청이 너무 커요")
            }
            other => {
                tracing::info!(error = %other, "bad JSON body refused");
                ApiError::bad_request("bad_json", BAD_REQUEST_REASON)
            }
        };
        actix_web::Error::from(api)
    })
}

pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err, _| {
        tracing::info!(error = %err, "bad query refused");
        ApiError::bad_request("bad_query", BAD_REQUEST_REASON).into()
    })
}

async fn index() -> HttpResponse {
    HttpResponse::Ok().content_type("text/html; charset=utf-8").body(include_str!("../static/index.html"))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Readiness: 200 only when the node can serve; otherwise 503 with the first reason that
/// holds, as a status word (and a field or two operators can read):
/// `draining` (it is leaving), `task_gone` (a core task cannot run: the process exits),
/// `task_restarting` (a core task ended and starts again after a back-off),
/// `store_unreachable` / `store_unavailable` (Redis, or the embedded node's disk), and
/// `bus_unverified` (no probe came back through its bus subscription lately: it would
/// not hear other nodes' frames for its rooms and players), `reconciling` (the
/// reconciler's last pass did not succeed, or none did lately: after a Redis outage,
/// rooms this node should hold may not be restored yet; `pendingRooms` says how many).
async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let unavailable = |body: serde_json::Value| HttpResponse::ServiceUnavailable().json(body);
    if state.draining.load(Ordering::Relaxed) {
        return unavailable(json!({"status": "draining"}));
    }
    match state.supervisor.down() {
        Some((task, Down::Gone)) => return unavailable(json!({"status": "task_gone", "task": task})),
        Some((task, Down::Restarting)) => return unavailable(json!({"status": "task_restarting", "task": task})),
        None => {}
    }
    let node = &state.node_id;
    match state.rooms.readiness().await {
        Readiness::Ready { live_nodes: Some(live) } => {
            HttpResponse::Ok().json(json!({"status": "ready", "node": node, "liveNodes": live}))
        }
        Readiness::Ready { live_nodes: None } => HttpResponse::Ok().json(json!({"status": "ready", "node": node})),
        Readiness::StoreUnreachable => unavailable(json!({"status": "store_unreachable"})),
        Readiness::StoreUnavailable => unavailable(json!({"status": "store_unavailable"})),
        Readiness::BusUnverified { silent_ms } => {
            unavailable(json!({"status": "bus_unverified", "node": node, "silentMs": silent_ms}))
        }
        Readiness::Reconciling(Unready::Pending { rooms }) => {
            unavailable(json!({"status": "reconciling", "node": node, "pendingRooms": rooms}))
        }
        Readiness::Reconciling(Unready::Stale { error }) => {
            unavailable(json!({"status": "reconciling", "node": node, "error": error}))
        }
    }
}

/// `GET /metrics` on the player port, unless the metrics have a listener of their own
/// (`ROOMD__METRICS__PORT`): then 404 here, as for any path that does not exist.
async fn player_metrics(state: web::Data<AppState>) -> HttpResponse {
    if state.settings.metrics.port.is_some() {
        return actix_web::ResponseError::error_response(&ApiError::not_found());
    }
    metrics(state).await
}

/// The Prometheus text of every metric of the node.
pub(crate) async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let mut buf = Vec::new();
    match TextEncoder::new().encode(&state.metrics.registry.gather(), &mut buf) {
        Ok(()) => HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(buf),
        Err(e) => HttpResponse::InternalServerError().body(e.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionBody {
    name: String,
}

async fn create_session(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<SessionBody>,
) -> Result<HttpResponse, ApiError> {
    state.limits.check(Kind::Session, &req)?;
    let Some(name) = crate::names::clean_name(&body.name) else {
        let (code, reason) = crate::names::BAD_NAME;
        return Err(ApiError::bad_request(code, reason));
    };
    let user_id = format!("u_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
    let token = state.auth.mint(&user_id, &name).map_err(|_| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "잠시 후 다시 시도해 주세요")
    })?;
    Ok(HttpResponse::Ok().json(json!({"userId": user_id, "token": token, "name": name})))
}

async fn games() -> HttpResponse {
    HttpResponse::Ok().json(registry::catalog())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CreateBody {
    game: String,
    options: Option<serde_json::Value>,
    grace_sec: Option<u32>,
    seed: Option<String>,
    /// In the players' lobby (default: the game's, true for player games, false for
    /// `tally`).
    listed: Option<bool>,
}

const GRACE_RANGE: std::ops::RangeInclusive<u32> = 5..=600;

async fn create(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: User,
    body: web::Json<CreateBody>,
) -> Result<HttpResponse, ApiError> {
    state.limits.check(Kind::Room, &req)?;
    if state.draining.load(Ordering::Relaxed) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "서버를 정리하는 중이에요. 잠시 후 다시 시도해 주세요",
        ));
    }
    let body = body.into_inner();
    let seed = match &body.seed {
        None => None,
        Some(_) if !state.settings.dev.allow_fixed_seed => {
            return Err(ApiError::bad_request("seed_not_allowed", "시드를 정할 수 없는 서버예요"));
        }
        Some(hex) => {
            Some(Seed::from_hex(hex).ok_or_else(|| ApiError::bad_request("bad_seed", "시드는 16진수 32자여야 해요"))?)
        }
    };
    let grace_sec = body.grace_sec.unwrap_or(state.settings.rooms.grace_sec);
    if !GRACE_RANGE.contains(&grace_sec) {
        return Err(ApiError::bad_request("bad_grace", "graceSec는 5~600초로 정해 주세요"));
    }
    let room_id = format!("r_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let new = NewRoom {
        room_id: room_id.clone(),
        game: body.game,
        options: body.options,
        host: user.id,
        host_name: user.name,
        grace_sec,
        seed,
        listed: body.listed,
    };
    // The service checks the host's waiting seats (the host sits in the new room from the
    // start) and open rooms, then creates it (`RoomsService::create`).
    state.rooms.create(new).await.map_err(refused)?;
    Ok(HttpResponse::Ok().json(json!({"roomId": room_id})))
}

/// A room not created, or a seat not allowed, as the API answers it.
fn refused(refusal: Refused) -> ApiError {
    match refusal {
        Refused::TooManyRooms => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_rooms", "열어 둔 방이 너무 많아요")
        }
        Refused::TooManyWaitingSeats => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_waiting_seats",
            "시작을 기다리는 방에 너무 많이 앉아 있어요",
        ),
        Refused::SeedNotAllowed => {
            ApiError::bad_request("seed_not_allowed", "클러스터 모드에서는 시드를 정할 수 없어요")
        }
        Refused::Unavailable => ApiError::unavailable(),
        Refused::Invalid(e) => {
            tracing::info!(error = %e, "room refused");
            match e {
                CreateError::UnknownGame(_) => ApiError::bad_request("unknown_game", "없는 게임이에요"),
                // The reason names the option key the client sent: only when it is short.
                CreateError::Options(o) => match o.reason() {
                    reason if reason.chars().count() <= 60 => ApiError::bad_request(o.code(), reason),
                    _ => ApiError::bad_request(o.code(), "옵션을 확인해 주세요"),
                },
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    game: Option<String>,
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// `GET /api/rooms`: one page of the lobby (`lobby.rs`), newest first; a `Link` header
/// names the next page when more remain.
async fn list(state: web::Data<AppState>, _user: User, q: web::Query<ListQuery>) -> Result<HttpResponse, ApiError> {
    let status = match q.status.as_deref() {
        None | Some("") => None,
        Some("waiting") => Some(RoomStatus::Waiting),
        Some("playing") => Some(RoomStatus::Playing),
        Some("ended") => Some(RoomStatus::Ended),
        Some(_) => return Err(ApiError::bad_request("bad_query", "status는 waiting, playing, ended 중 하나예요")),
    };
    let limit = match q.limit {
        None => lobby::DEFAULT_PAGE,
        Some(n) if (1..=lobby::MAX_PAGE).contains(&n) => n,
        Some(_) => return Err(ApiError::bad_request("bad_query", "limit는 1에서 200 사이의 수예요")),
    };
    let cursor = q.cursor.as_deref().filter(|c| !c.is_empty());
    if cursor.is_some_and(|c| !lobby::valid_cursor(c)) {
        return Err(ApiError::bad_request("bad_query", "cursor가 올바르지 않아요: 이전 응답의 Link를 그대로 쓰세요"));
    }
    let game = q.game.as_deref().filter(|g| !g.is_empty());
    let filter = LobbyFilter { game: game.map(str::to_owned), status };
    let (rooms, next) = state.rooms.lobby_page(cursor, limit, &filter).await.map_err(|_| ApiError::unavailable())?;
    let mut response = HttpResponse::Ok();
    if let Some(next) = next {
        let mut query = vec![("limit", limit.to_string()), ("cursor", next)];
        query.extend(game.map(|g| ("game", g.to_owned())));
        query.extend(q.status.clone().filter(|s| !s.is_empty()).map(|s| ("status", s)));
        if let Ok(query) = serde_urlencoded::to_string(&query) {
            response.insert_header((header::LINK, format!("</api/rooms?{query}>; rel=\"next\"")));
        }
    }
    Ok(response.json(rooms))
}

async fn get_room(state: web::Data<AppState>, _user: User, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.rooms.info(&path).await?))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SitBody {
    #[serde(default)]
    bot: bool,
}

async fn sit(
    state: web::Data<AppState>,
    user: User,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // An empty body means `{}`; anything else must be exactly the documented shape.
    let body: SitBody = if body.iter().all(u8::is_ascii_whitespace) {
        SitBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            tracing::info!(error = %e, "bad seat body refused");
            ApiError::bad_request("bad_json", BAD_REQUEST_REASON)
        })?
    };
    let bot = body.bot;
    if !bot {
        state.rooms.take_waiting_seat(&user.id, &path).await.map_err(refused)?;
    }
    Ok(HttpResponse::Ok().json(state.rooms.ask(&path, TakeSeat { user: user.id, name: user.name, bot }).await?))
}

async fn leave(state: web::Data<AppState>, user: User, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.rooms.ask(&path, LeaveSeat { user: user.id }).await?))
}

/// `DELETE /api/rooms/{room}/seats/{userId}`: the host removes a seated player (or bot)
/// before the start.
async fn remove_seat(
    state: web::Data<AppState>,
    user: User,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (room, target) = path.into_inner();
    let verb = RemoveSeat { by: user.id, user: PlayerId::from(target) };
    Ok(HttpResponse::Ok().json(state.rooms.ask(&room, verb).await?))
}

async fn start(state: web::Data<AppState>, user: User, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let game_pk = state.rooms.ask(&path, Start { user: user.id }).await?;
    Ok(HttpResponse::Ok().json(json!({"gamePk": game_pk})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GamesQuery {
    before: Option<i64>,
    limit: Option<usize>,
}

async fn my_games(state: web::Data<AppState>, user: User, q: web::Query<GamesQuery>) -> Result<HttpResponse, ApiError> {
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    let me: PlayerId = user.id;
    let records = state.rooms.games_of(&me, q.before, limit).await.map_err(|_| ApiError::unavailable())?;
    let list: Vec<serde_json::Value> = records
        .into_iter()
        .map(|r| {
            let result: serde_json::Value = serde_json::from_str(&r.result_json).unwrap_or(serde_json::Value::Null);
            json!({
                "gamePk": r.game_pk,
                "game": r.game,
                "roomId": r.room_id,
                "players": r.players,
                "names": r.names,
                "startedAt": r.started_at,
                "endedAt": r.ended_at,
                "result": result,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(list))
}
