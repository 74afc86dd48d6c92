//! The node: shared state, the actix-web app, and `run`.

use crate::auth::Auth;
use crate::config::{Settings, DEV_SECRET};
use crate::{admin, api, http_metrics, ws};
use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};
use prometheus::{IntCounter, IntGauge, Registry};
use room_actor::cluster::node::{ClusterConfig, ClusterNode};
use room_actor::metrics::RoomMetrics;
use room_actor::replay::ReplayCache;
use room_actor::room::Clock;
use room_actor::RedisStore;
use room_actor::{Directory, MemoryStore, RoomDeps, RoomStore};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tracing::warn;

#[derive(Debug, Error)]
pub enum StartError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
}

/// Replay rebuilds allowed at once (each runs on the blocking pool).
const REPLAY_BUILDS_AT_ONCE: usize = 2;

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
    pub directory: Arc<Directory>,
    pub store: Arc<dyn RoomStore>,
    pub room_deps: RoomDeps,
    /// Cluster mode: this node's membership, leases, placement and bus.
    pub cluster: Option<Arc<ClusterNode>>,
    pub metrics: GatewayMetrics,
    /// Set on SIGTERM: `/readyz` answers 503 and no rooms are created.
    pub draining: AtomicBool,
    pub next_session: AtomicU64,
    /// Every open WebSocket session (drain closes them with 1012).
    pub live_sessions: std::sync::Mutex<std::collections::HashMap<u64, actix::Addr<crate::ws::WsSession>>>,
    /// Open sockets per user (the per-user cap).
    pub sockets: std::sync::Mutex<std::collections::HashMap<engine::PlayerId, usize>>,
    /// Rebuilt replays (10 minutes, 32 entries).
    pub replays: ReplayCache,
    /// Replay rebuilds running at once.
    pub replay_permits: tokio::sync::Semaphore,
    /// The operators' API (`admin.rs`).
    pub admin: admin::Admin,
    /// HTTP request metrics by route (`http_metrics.rs`).
    pub http_metrics: http_metrics::HttpMetrics,
    /// Notified to drain the node as SIGTERM does (the admin API, locally or over the bus).
    pub drain_request: Arc<tokio::sync::Notify>,
}

impl AppState {
    /// The state of an embedded node (in-memory store, no cluster).
    pub fn new(settings: Settings) -> Result<AppState, StartError> {
        if settings.redis.url.is_some() {
            return Err(StartError::Config("ROOMD__REDIS__URL is set: start the node with `start_node`".into()));
        }
        AppState::build(settings, None)
    }

    fn build(settings: Settings, redis: Option<RedisStore>) -> Result<AppState, StartError> {
        if settings.redis.url.is_some() && settings.auth.secret == DEV_SECRET {
            return Err(StartError::Config(
                "cluster mode (ROOMD__REDIS__URL set) needs ROOMD__AUTH__SECRET: the default secret is public".into(),
            ));
        }
        if settings.auth.secret == DEV_SECRET {
            warn!("using the built-in development token secret; set ROOMD__AUTH__SECRET in production");
        }
        let node_id = settings
            .node
            .id
            .clone()
            .unwrap_or_else(|| format!("n_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
        let registry = Registry::new();
        let room_metrics = RoomMetrics::new(&registry)?;
        let sessions = IntGauge::new("roomd_sessions", "open WebSocket sessions")?;
        let ws_closed_flood = IntCounter::new("roomd_ws_flood_closed_total", "sockets closed for flooding")?;
        let ws_errors = IntCounter::new("roomd_ws_bad_messages_total", "malformed or over-limit client messages")?;
        registry.register(Box::new(sessions.clone()))?;
        registry.register(Box::new(ws_closed_flood.clone()))?;
        registry.register(Box::new(ws_errors.clone()))?;
        http_metrics::register_process_metrics(&registry)?;
        let admin = admin::Admin::new(&settings.admin, &registry)?;
        let http_metrics = http_metrics::HttpMetrics::new(&registry)?;
        let store: Arc<dyn RoomStore> = match &redis {
            Some(redis) => Arc::new(redis.clone()),
            None => Arc::new(MemoryStore::new()),
        };
        let directory = Arc::new(Directory::new());
        let room_deps = RoomDeps {
            store: store.clone(),
            directory: directory.clone(),
            metrics: room_metrics,
            node_id: node_id.clone(),
            snapshot_every: settings.rooms.snapshot_every,
            clock: Clock::System,
            ended_linger: Duration::from_secs(settings.rooms.ended_linger_s),
        };
        let cluster = match (redis, &settings.redis.url) {
            (Some(redis), Some(url)) => Some(ClusterNode::new(
                ClusterConfig {
                    node_id: node_id.clone(),
                    redis_url: url.clone(),
                    prefix: settings.redis.prefix.clone(),
                    lease_ms: settings.cluster.lease_ms,
                    heartbeat_ms: settings.cluster.heartbeat_ms,
                },
                redis,
                room_deps.clone(),
            )),
            _ => None,
        };
        let drain_request = cluster.as_ref().map_or_else(Default::default, |c| c.drain_request.clone());
        // Session ids are unique across nodes: a random high half per process.
        let session_base = u64::from(uuid::Uuid::new_v4().as_u128() as u32) << 32;
        Ok(AppState {
            auth: Auth::new(&settings.auth.secret, settings.auth.token_ttl_s),
            settings,
            node_id,
            directory,
            store,
            room_deps,
            cluster,
            metrics: GatewayMetrics { registry, sessions, ws_closed_flood, ws_errors },
            draining: AtomicBool::new(false),
            next_session: AtomicU64::new(session_base + 1),
            sockets: std::sync::Mutex::new(std::collections::HashMap::new()),
            live_sessions: std::sync::Mutex::new(std::collections::HashMap::new()),
            replays: ReplayCache::new(Duration::from_secs(600), 32),
            replay_permits: tokio::sync::Semaphore::new(REPLAY_BUILDS_AT_ONCE),
            admin,
            http_metrics,
            drain_request,
        })
    }
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

/// A running node: the server future to await and the address it listens on.
pub struct Running {
    pub server: Server,
    pub addr: SocketAddr,
    pub state: web::Data<AppState>,
}

/// Binds and starts an embedded node (call inside an actix system).
pub fn start(settings: Settings) -> Result<Running, StartError> {
    let state = web::Data::new(AppState::new(settings)?);
    serve(state)
}

/// Starts a node in either mode: with `ROOMD__REDIS__URL` it connects to Redis and joins
/// the cluster, else it is an embedded node.
pub async fn start_node(settings: Settings) -> Result<Running, StartError> {
    let Some(url) = settings.redis.url.clone() else { return start(settings) };
    let redis = RedisStore::connect(&url, &settings.redis.prefix)
        .await
        .map_err(|e| StartError::Config(format!("cannot reach Redis at ROOMD__REDIS__URL: {e}")))?;
    let state = web::Data::new(AppState::build(settings, Some(redis))?);
    if let Some(cluster) = &state.cluster {
        cluster.run();
    }
    serve(state)
}

fn serve(state: web::Data<AppState>) -> Result<Running, StartError> {
    let bind = format!("{}:{}", state.settings.http.bind, state.settings.http.port);
    let workers = state.settings.http.workers;
    let app_state = state.clone();
    let mut server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(http_metrics::track))
            .app_data(app_state.clone())
            .app_data(api::json_config())
            .app_data(api::query_config())
            .configure(api::routes)
            .route("/ws", web::get().to(ws::upgrade))
            .configure(admin::routes)
    })
    // Signals are ours (`drain`), so a SIGTERM hands rooms over before the server stops.
    .disable_signals()
    // Each action is answered with small writes (update, ack): with Nagle on, the second
    // waits for the client's delayed ACK, a ~40 ms tail measured by the latency example.
    .tcp_nodelay(true)
    .shutdown_timeout(5);
    if workers > 0 {
        server = server.workers(workers);
    }
    let server = server.bind(&bind).map_err(|source| StartError::Bind { addr: bind.clone(), source })?;
    let addr =
        server.addrs().first().copied().ok_or_else(|| StartError::Config(format!("no address bound for {bind}")))?;
    let server = server.run();
    let _ = state.admin.addr.set(addr.to_string());
    admin::spawn_reporter(state.clone());
    // An operator's drain (`POST /admin/api/nodes/{id}/drain`, here or over the bus) does
    // what SIGTERM does in `main`: drain, then stop serving.
    let (drain_state, handle) = (state.clone(), server.handle());
    actix_web::rt::spawn(async move {
        drain_state.drain_request.notified().await;
        if drain_state.draining.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        tracing::info!(node = %drain_state.node_id, "draining at an operator's request");
        drain(&drain_state).await;
        handle.stop(true).await;
    });
    Ok(Running { server, addr, state })
}

/// Drains the node (SIGTERM): `/readyz` goes false and no rooms are created; in cluster
/// mode every room is handed over after its last append; sockets are closed with 1012
/// so clients reconnect elsewhere; returns when they are gone or the grace is over.
/// Handing rooms over may take at most half the grace; the rest is for the sockets.
pub async fn drain(state: &AppState) {
    state.draining.store(true, std::sync::atomic::Ordering::Relaxed);
    let grace = Duration::from_secs(state.settings.cluster.drain_grace_s);
    if let Some(cluster) = &state.cluster {
        cluster.hand_over_all(grace / 2).await;
    }
    let sessions: Vec<actix::Addr<crate::ws::WsSession>> =
        state.live_sessions.lock().map(|l| l.values().cloned().collect()).unwrap_or_default();
    for session in sessions {
        session.do_send(crate::ws::Drain);
    }
    let deadline = tokio::time::Instant::now() + grace / 2;
    while tokio::time::Instant::now() < deadline && state.live_sessions.lock().map(|l| !l.is_empty()).unwrap_or(false) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(cluster) = &state.cluster {
        cluster.leave().await;
    }
}
