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
    pub next_session: AtomicU64,
    /// Every open WebSocket session (drain closes them with 1012); in cluster mode the
    /// same registry the cluster node delivers remote rooms' frames through.
    pub sessions: Arc<Sessions>,
    /// Open sockets per user (the per-user cap).
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

impl AppState {
    /// Takes one of `user`'s socket slots; `false` when they already use them all.
    pub fn open_socket(&self, user: &engine::PlayerId) -> bool {
        let Ok(mut sockets) = self.sockets.lock() else { return false };
        let open = sockets.entry(user.clone()).or_insert(0);
        if *open >= self.settings.ws.max_sockets_per_user {
            return false;
        }
        *open += 1;
        true
    }

    pub fn close_socket(&self, user: &engine::PlayerId) {
        if let Ok(mut sockets) = self.sockets.lock() {
            if let Some(open) = sockets.get_mut(user) {
                *open = open.saturating_sub(1);
                if *open == 0 {
                    sockets.remove(user);
                }
            }
        }
    }
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
