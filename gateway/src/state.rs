//! What every handler shares: [`AppState`], built by `server.rs` and read by the HTTP
//! API, the WebSocket sessions and the admin API; and the player extractor ([`User`]),
//! which checks a bearer token against it.

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
use room_actor::cluster::node::ClusterNode;
use room_actor::replay::ReplayCache;
use room_actor::sessions::Sessions;
use room_actor::supervise::Supervisor;
use room_actor::{FileStore, RoomDeps, RoomStore, Rooms};
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info};

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
    /// The node's store (the same as `room_deps.store`).
    pub store: Arc<dyn RoomStore>,
    /// What rooms created or restored here share (the directory of this node's rooms
    /// among it).
    pub room_deps: RoomDeps,
    /// Every room, wherever it lives: handlers call rooms through this only.
    pub rooms: Rooms,
    /// Cluster mode: this node's membership, leases, placement and bus.
    pub cluster: Option<Arc<ClusterNode>>,
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
    /// Open sockets per user on an embedded node (the per-user cap; a cluster node counts
    /// them in Redis).
    pub sockets: std::sync::Mutex<std::collections::HashMap<engine::PlayerId, usize>>,
    /// Rebuilt replays (10 minutes, 32 entries).
    pub replays: ReplayCache,
    /// Replay rebuilds running at once.
    pub replay_permits: tokio::sync::Semaphore,
    /// Per-address limits on sessions, room creation and WebSocket upgrades.
    pub limits: AddrLimits,
    /// Sockets closed since the allocator was last trimmed ([`trim_after_closes`]).
    pub closed_since_trim: AtomicU64,
    /// The embedded node's file store (`store.kind = file`), for readiness.
    pub file_store: Option<FileStore>,
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

/// The longest an upgrade waits for Redis to count a socket before it answers 503.
const SOCKET_COUNT_TIMEOUT: Duration = Duration::from_secs(3);
/// Tries at giving a closed socket's count back to Redis, and the first and longest pause
/// between them (doubling): two to three minutes in all, so a Redis restart or failover
/// does not leave the sockets closed meanwhile counted against their users for a day.
const SOCKET_CLOSE_TRIES: u32 = 9;
const SOCKET_CLOSE_RETRY: Duration = Duration::from_secs(1);
const SOCKET_CLOSE_RETRY_MAX: Duration = Duration::from_secs(30);

impl AppState {
    /// Takes one of `user`'s socket slots: 429 `too_many_sockets` when they already use
    /// them all (`ws.max_sockets_per_user`). An embedded node counts in memory; a cluster
    /// node counts the user's sockets on every live node, in Redis (`UserSockets`).
    ///
    /// A cluster node that cannot reach Redis refuses the socket (503): it could not
    /// serve it anyway (rooms, their logs and the bus are all in Redis), and a socket it
    /// did not count would be taken off the count when it closes, letting the user past
    /// the cap later.
    pub async fn open_socket(&self, user: &engine::PlayerId) -> Result<(), ApiError> {
        let cap = self.settings.ws.max_sockets_per_user;
        let Some(cluster) = &self.cluster else {
            let Ok(mut sockets) = self.sockets.lock() else { return Err(ApiError::unavailable()) };
            let open = sockets.entry(user.clone()).or_insert(0);
            if *open >= cap {
                return Err(too_many_sockets());
            }
            *open += 1;
            return Ok(());
        };
        match tokio::time::timeout(SOCKET_COUNT_TIMEOUT, cluster.sockets.open(user, cap)).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(too_many_sockets()),
            // `info`, as for a full node: every client retrying during a Redis outage
            // would otherwise write a warning each (the node's own Redis errors warn).
            Ok(Err(e)) => {
                info!(user = %user, error = %e, "WebSocket refused: its user's sockets could not be counted in Redis");
                Err(try_again())
            }
            Err(_) => {
                info!(user = %user, "WebSocket refused: counting its user's sockets in Redis timed out");
                Err(try_again())
            }
        }
    }

    /// Gives back a slot [`AppState::open_socket`] took. In cluster mode the count in
    /// Redis is updated in the background, tried again a few times if Redis fails (a
    /// count that never comes back expires with the user's hash, `SOCKETS_TTL`).
    pub fn close_socket(&self, user: &engine::PlayerId) {
        let Some(cluster) = &self.cluster else {
            if let Ok(mut sockets) = self.sockets.lock() {
                if let Some(open) = sockets.get_mut(user) {
                    *open = open.saturating_sub(1);
                    if *open == 0 {
                        sockets.remove(user);
                    }
                }
            }
            return;
        };
        let (sockets, user) = (cluster.sockets.clone(), user.clone());
        tokio::spawn(async move {
            let mut pause = SOCKET_CLOSE_RETRY;
            for attempt in 1..=SOCKET_CLOSE_TRIES {
                match tokio::time::timeout(SOCKET_COUNT_TIMEOUT, sockets.close(&user)).await {
                    Ok(Ok(())) => return,
                    Ok(Err(e)) => debug!(user = %user, attempt, error = %e, "closed socket not yet uncounted in Redis"),
                    Err(_) => debug!(user = %user, attempt, "closed socket not yet uncounted in Redis: timed out"),
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(SOCKET_CLOSE_RETRY_MAX);
            }
            // `info`: a long Redis outage closes many sockets, and the node warns of the
            // outage itself.
            info!(user = %user, "a closed socket stays counted against its user until the count expires: Redis unreachable");
        });
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
