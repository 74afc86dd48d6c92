//! The HTTP API of `PROTOCOL.md`.

use crate::auth::User;
use crate::error::ApiError;
use crate::server::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use engine::registry;
use engine::{PlayerId, Seed};
use prometheus::{Encoder, TextEncoder};
use room_actor::cluster::bus::{Reply, RoomCmd};
use room_actor::cluster::node::{ClusterNode, Owner};
use room_actor::messages::GetInfo;
use room_actor::messages::{LeaveSeat, Start, TakeSeat};
use room_actor::spawn::{create_room, initial_info, CreateError, NewRoom};
use room_actor::RoomStatus;
use room_actor::{RoomHandle, RoomInfo};
use serde::Deserialize;
use serde_json::json;
use std::sync::atomic::Ordering;

/// Largest JSON body the API reads.
const MAX_BODY: usize = 64 * 1024;
const MAX_NAME_CHARS: usize = 20;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(index))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(metrics))
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
            other => ApiError::bad_request("bad_json", format!("요청 형식이 올바르지 않아요 ({other})")),
        };
        actix_web::Error::from(api)
    })
}

pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err, _| {
        ApiError::bad_request("bad_query", format!("요청 형식이 올바르지 않아요 ({err})")).into()
    })
}

async fn index() -> HttpResponse {
    HttpResponse::Ok().content_type("text/html; charset=utf-8").body(include_str!("../static/index.html"))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if state.draining.load(Ordering::Relaxed) {
        return HttpResponse::ServiceUnavailable().json(json!({"status": "draining"}));
    }
    if let Some(cluster) = &state.cluster {
        if !cluster.store.ping().await {
            return HttpResponse::ServiceUnavailable().json(json!({"status": "store_unreachable"}));
        }
        let live = cluster.members.live(state.room_deps.clock.now_ms()).await.map(|m| m.len()).unwrap_or(0);
        return HttpResponse::Ok().json(json!({"status": "ready", "node": state.node_id, "liveNodes": live}));
    }
    if let Some(store) = &state.file_store {
        // A real write and fsync: a full disk or a failing device answers 503.
        if !store.probe().await {
            return HttpResponse::ServiceUnavailable().json(json!({"status": "store_unavailable"}));
        }
    }
    HttpResponse::Ok().json(json!({"status": "ready", "node": state.node_id}))
}

async fn metrics(state: web::Data<AppState>) -> HttpResponse {
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

async fn create_session(state: web::Data<AppState>, body: web::Json<SessionBody>) -> Result<HttpResponse, ApiError> {
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request("bad_name", format!("이름은 1~{MAX_NAME_CHARS}자로 정해 주세요")));
    }
    let user_id = format!("u_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
    let token = state.auth.mint(&user_id, name).map_err(|_| {
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
}

const GRACE_RANGE: std::ops::RangeInclusive<u32> = 5..=600;

async fn create(state: web::Data<AppState>, user: User, body: web::Json<CreateBody>) -> Result<HttpResponse, ApiError> {
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
    if state.directory.open_rooms_of(&user.id) >= state.settings.rooms.max_open_per_user {
        return Err(ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_rooms", "열어 둔 방이 너무 많아요"));
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
    };
    let refused = |e: CreateError| match e {
        CreateError::UnknownGame(g) => ApiError::bad_request("unknown_game", format!("없는 게임이에요: {g}")),
        CreateError::Options(o) => ApiError::bad_request(o.code(), format!("{} ({o})", o.reason())),
    };
    match &state.cluster {
        None => {
            create_room(new, state.room_deps.clone()).map_err(refused)?;
        }
        Some(cluster) => {
            if new.seed.is_some() {
                return Err(ApiError::bad_request("seed_not_allowed", "클러스터 모드에서는 시드를 정할 수 없어요"));
            }
            // Saved, then placed: the node rendezvous hashing picks activates it.
            let info = initial_info(&new, &state.node_id, state.room_deps.clock.now_ms()).map_err(refused)?;
            state.store.put_room(&info).await.map_err(|_| ApiError::unavailable())?;
            cluster.locate(&room_id).await.map_err(|_| ApiError::unavailable())?;
        }
    }
    Ok(HttpResponse::Ok().json(json!({"roomId": room_id})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    game: Option<String>,
    status: Option<String>,
}

async fn list(state: web::Data<AppState>, _user: User, q: web::Query<ListQuery>) -> Result<HttpResponse, ApiError> {
    let status = match q.status.as_deref() {
        None | Some("") => None,
        Some("waiting") => Some(RoomStatus::Waiting),
        Some("playing") => Some(RoomStatus::Playing),
        Some("ended") => Some(RoomStatus::Ended),
        Some(_) => return Err(ApiError::bad_request("bad_query", "status는 waiting, playing, ended 중 하나예요")),
    };
    let game = q.game.as_deref().filter(|g| !g.is_empty());
    if state.cluster.is_some() {
        let mut rooms: Vec<RoomInfo> = state
            .store
            .open_rooms()
            .await
            .map_err(|_| ApiError::unavailable())?
            .into_iter()
            .filter(|i| game.is_none_or(|g| i.game == g) && status.is_none_or(|s| i.status == s))
            .collect();
        rooms.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.room_id.cmp(&b.room_id)));
        return Ok(HttpResponse::Ok().json(rooms));
    }
    Ok(HttpResponse::Ok().json(state.directory.list(game, status)))
}

async fn get_room(state: web::Data<AppState>, _user: User, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let info = match where_is(&state, &path).await? {
        Place::Local(room) => serde_json::to_value(room.info.send(GetInfo).await?).unwrap_or_default(),
        Place::Remote(node) => {
            let cluster = cluster_of(&state)?;
            match cluster.request(&node, &path, |req| RoomCmd::Info { req }).await {
                Reply::Info(json) => serde_json::from_str(&json).map_err(|_| ApiError::unavailable())?,
                _ => return Err(ApiError::unavailable()),
            }
        }
        Place::Stored(info) => serde_json::to_value(info).unwrap_or_default(),
    };
    Ok(HttpResponse::Ok().json(info))
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
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request("bad_json", format!("요청 형식이 올바르지 않아요 ({e})")))?
    };
    let bot = body.bot;
    match where_is(&state, &path).await? {
        Place::Local(room) => {
            Ok(HttpResponse::Ok().json(room.take_seat.send(TakeSeat { user: user.id, name: user.name, bot }).await??))
        }
        Place::Remote(node) => {
            let reply = cluster_of(&state)?
                .request(&node, &path, |req| RoomCmd::TakeSeat {
                    req,
                    user: user.id.to_string(),
                    name: user.name.clone(),
                    bot,
                })
                .await;
            info_reply(reply)
        }
        Place::Stored(_) => Err(ApiError::unavailable()),
    }
}

async fn leave(state: web::Data<AppState>, user: User, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    match where_is(&state, &path).await? {
        Place::Local(room) => Ok(HttpResponse::Ok().json(room.leave_seat.send(LeaveSeat { user: user.id }).await??)),
        Place::Remote(node) => {
            let reply = cluster_of(&state)?
                .request(&node, &path, |req| RoomCmd::LeaveSeat { req, user: user.id.to_string() })
                .await;
            info_reply(reply)
        }
        Place::Stored(_) => Err(ApiError::unavailable()),
    }
}

async fn start(state: web::Data<AppState>, user: User, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let game_pk = match where_is(&state, &path).await? {
        Place::Local(room) => room.start.send(Start { user: user.id }).await??,
        Place::Remote(node) => {
            match cluster_of(&state)?
                .request(&node, &path, |req| RoomCmd::Start { req, user: user.id.to_string() })
                .await
            {
                Reply::Start(Ok(pk)) => pk,
                Reply::Start(Err(e)) => return Err(op_error(e)),
                _ => return Err(ApiError::unavailable()),
            }
        }
        Place::Stored(_) => return Err(ApiError::unavailable()),
    };
    Ok(HttpResponse::Ok().json(json!({"gamePk": game_pk})))
}

/// Where a room is, for HTTP calls.
enum Place {
    Local(RoomHandle),
    Remote(String),
    /// Known (saved) but no node can take it this moment (a failover in progress).
    Stored(RoomInfo),
}

async fn where_is(state: &AppState, room: &str) -> Result<Place, ApiError> {
    let Some(cluster) = &state.cluster else {
        return state.directory.handle(room).map(Place::Local).ok_or_else(ApiError::unknown_room);
    };
    match cluster.locate(room).await.map_err(|_| ApiError::unavailable())? {
        Owner::Here(handle) => Ok(Place::Local(handle)),
        Owner::There(node) => Ok(Place::Remote(node)),
        Owner::Unknown => state
            .store
            .room(room)
            .await
            .map_err(|_| ApiError::unavailable())?
            .map(Place::Stored)
            .ok_or_else(ApiError::unknown_room),
    }
}

fn cluster_of(state: &AppState) -> Result<&std::sync::Arc<ClusterNode>, ApiError> {
    state.cluster.as_ref().ok_or_else(ApiError::unavailable)
}

fn op_error(e: room_actor::cluster::bus::OpError) -> ApiError {
    ApiError::new(StatusCode::from_u16(e.status).unwrap_or(StatusCode::CONFLICT), &e.code, e.reason)
}

fn info_reply(reply: Reply) -> Result<HttpResponse, ApiError> {
    match reply {
        Reply::Seat(Ok(json)) => {
            let info: serde_json::Value = serde_json::from_str(&json).map_err(|_| ApiError::unavailable())?;
            Ok(HttpResponse::Ok().json(info))
        }
        Reply::Seat(Err(e)) => Err(op_error(e)),
        _ => Err(ApiError::unavailable()),
    }
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
    let records = state.store.games_of(&me, q.before, limit).await.map_err(|_| ApiError::unavailable())?;
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
