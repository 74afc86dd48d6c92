//! What every handler shares: [`AppState`], built by `server.rs` and read by the HTTP
//! API, the WebSocket sessions and the admin API; and the player extractor ([`User`]),
//! which checks a bearer token against it. Rooms, their store and (in cluster mode) the
//! cluster are behind `AppState.rooms` (`room_actor::RoomsService`) alone.

use crate::admin_auth::Admin;
use crate::auth::{Auth, User};
use crate::config::Settings;
use crate::error::ApiError;
use crate::http_metrics::HttpMetrics;
use crate::limits::AddrLimits;
use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpRequest};
use prometheus::{IntCounter, IntGauge, Registry};
use room_actor::replay::ReplayCache;
use room_actor::rooms_service::SocketRefused;
use room_actor::sessions::Sessions;
use room_actor::supervise::Supervisor;
use room_actor::RoomsService;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use tracing::info;

/// Gateway-level metrics (rooms register theirs in the same registry).
pub struct GatewayMetrics {
    pub registry: Registry,
    pub sessions: IntGauge,
    pub ws_closed_flood: IntCounter,
    pub ws_errors: IntCounter,
}

/// Everything handlers share.
pub struct AppState {
    pub settings: Settings,
    pub node_id: String,
    pub auth: Auth,
    /// Every room operation, whatever the node's mode (`room_actor::rooms_service`):
    /// finding a room and calling its verbs, creating and listing rooms, the per-user
    /// caps, game records, the operators' listings, readiness, drain. It holds the store
    /// and, on a cluster node, the cluster: handlers never reach either themselves.
    pub rooms: RoomsService,
    pub metrics: GatewayMetrics,
    /// Set on SIGTERM: `/readyz` answers 503 and no rooms are created.
    pub draining: AtomicBool,
    /// Set by the `roomd` binary: a drain ends the process within the drain grace plus
    /// the server's shutdown whatever happens (`server::exit_after_grace`; never in a
    /// process that embeds the server, such as the tests).
    pub exit_after_drain: AtomicBool,
    pub next_session: AtomicU64,
    /// Every open WebSocket session (drain closes them with 1012); in cluster mode the
    /// same registry the cluster node delivers remote rooms' frames through.
    pub sessions: Arc<Sessions>,
    /// Rebuilt replays (10 minutes, 32 entries).
    pub replays: ReplayCache,
    /// Replay rebuilds running at once.
    pub replay_permits: tokio::sync::Semaphore,
    /// Per-address limits on sessions, room creation and WebSocket upgrades.
    pub limits: AddrLimits,
    /// Sockets closed since the allocator was last trimmed ([`trim_after_closes`]).
    pub closed_since_trim: AtomicU64,
    /// The operators' API (`admin.rs`).
    pub admin: Admin,
    /// HTTP request metrics by route (`http_metrics.rs`).
    pub http_metrics: HttpMetrics,
    /// Notified to drain the node as SIGTERM does (the admin API, locally or over the bus).
    pub drain_request: Arc<tokio::sync::Notify>,
    /// The HTTP workers, registered as they start (a cluster node's bus receiver runs on
    /// the first).
    pub room_threads: Arc<room_actor::threads::RoomThreads>,
    /// Starts the node's core tasks and watches them (`room_actor::supervise`): a task
    /// that ends starts again, or the process exits; `/readyz` says when one is down.
    pub supervisor: Arc<Supervisor>,
}

impl AppState {
    /// Takes one of `user`'s socket slots: 429 `too_many_sockets` when they already use
    /// them all (`ws.max_sockets_per_user`). An embedded node counts in memory; a cluster
    /// node counts the user's sockets on every live node, in Redis
    /// ([`RoomsService::open_socket`]).
    ///
    /// A cluster node that cannot reach Redis refuses the socket (503): it could not
    /// serve it anyway (rooms, their logs and the bus are all in Redis), and a socket it
    /// did not count would be taken off the count when it closes, letting the user past
    /// the cap later.
    pub async fn open_socket(&self, user: &engine::PlayerId) -> Result<(), ApiError> {
        match self.rooms.open_socket(user).await {
            Ok(()) => Ok(()),
            Err(SocketRefused::Full) => Err(too_many_sockets()),
            Err(SocketRefused::Broken) => Err(ApiError::unavailable()),
            // `info`, as for a full node: every client retrying during a Redis outage
            // would otherwise write a warning each (the node's own Redis errors warn).
            Err(SocketRefused::Unreachable(e)) => {
                info!(user = %user, error = %e, "WebSocket refused: its user's sockets could not be counted in Redis");
                Err(try_again())
            }
            Err(SocketRefused::TimedOut) => {
                info!(user = %user, "WebSocket refused: counting its user's sockets in Redis timed out");
                Err(try_again())
            }
        }
    }

    /// Gives back a slot [`AppState::open_socket`] took (in cluster mode in the
    /// background, tried again a few times if Redis fails).
    pub fn close_socket(&self, user: &engine::PlayerId) {
        self.rooms.close_socket(user);
    }
}

/// 503 with `Retry-After`: the node cannot count sockets this moment.
fn try_again() -> ApiError {
    let mut err = ApiError::unavailable();
    err.retry_after_s = Some(1);
    err
}

fn too_many_sockets() -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_sockets", "동시에 열 수 있는 연결이 너무 많아요")
}

/// The caller, from `Authorization: Bearer <token>`.
impl FromRequest for User {
    type Error = ApiError;
    type Future = Ready<Result<User, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let user = (|| {
            let state = req.app_data::<web::Data<AppState>>()?;
            let header = req.headers().get("authorization")?.to_str().ok()?;
            let token = header.strip_prefix("Bearer ").or_else(|| header.strip_prefix("bearer "))?;
            state.auth.verify(token.trim()).map(User::from)
        })();
        ready(user.ok_or_else(ApiError::unauthorized))
    }
}
