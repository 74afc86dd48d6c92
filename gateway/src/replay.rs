//! `GET /api/replays/{gamePk}`: participants only; rebuilt off the actor threads.

use crate::auth::User;
use crate::error::ApiError;
use crate::state::AppState;
use actix_web::http::header::{CacheControl, CacheDirective};
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use room_actor::replay::{build_any, ReplayGone};
use std::sync::Arc;

fn gone(e: &ReplayGone) -> ApiError {
    ApiError::new(StatusCode::GONE, e.code(), e.reason())
}

fn private(body: &room_actor::replay::Replay) -> HttpResponse {
    HttpResponse::Ok().insert_header(CacheControl(vec![CacheDirective::Private, CacheDirective::NoStore])).json(body)
}

pub async fn get(state: web::Data<AppState>, user: User, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let game_pk = path.into_inner();
    let record = state
        .rooms
        .game_record(&game_pk)
        .await
        .map_err(|_| ApiError::unavailable())?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "unknown_game", "없는 게임 기록이에요"))?;
    if !record.players.contains(&user.id) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_participant",
            "이 게임에 참가한 사람만 다시 볼 수 있어요",
        ));
    }
    if let Some(cached) = state.replays.get(&game_pk, &user.id) {
        return Ok(private(&cached));
    }
    let stored = state
        .rooms
        .game_log(&game_pk)
        .await
        .map_err(|_| ApiError::unavailable())?
        .ok_or_else(|| gone(&ReplayGone::Expired))?;
    // Rebuilds run on the blocking pool, a bounded number at a time, so a burst of
    // replay requests never competes with rooms for their threads.
    let _permit = state.replay_permits.acquire().await.map_err(|_| ApiError::unavailable())?;
    let viewer = user.id.clone();
    let replay = web::block(move || build_any(&stored, &record, &viewer)).await.map_err(|_| ApiError::unavailable())?;
    let replay = Arc::new(replay.map_err(|e| {
        tracing::warn!(game_pk = %game_pk, error = %e, "replay refused");
        gone(&e)
    })?);
    state.replays.put(&user.id, replay.clone());
    Ok(private(&replay))
}
