//! The node: builds the shared state ([`AppState`], `state.rs`), serves the actix-web
//! app, and drains. The node's mode is decided here, once: `AppState::build` opens the
//! store (and on a cluster node creates its `ClusterNode`) and hands them to the rooms
//! service (`RoomsService::embedded` or `RoomsService::cluster`), which alone keeps them.

use crate::auth::Auth;
use crate::config::{Settings, StoreKind};
use crate::limits::AddrLimits;
pub use crate::state::{AppState, GatewayMetrics};
use crate::{admin, api, http_metrics, ws};
use actix_web::dev::Server;
use actix_web::middleware::DefaultHeaders;
use actix_web::{web, App, HttpServer};
use prometheus::{IntCounter, IntGauge, Registry};
use room_actor::cluster::failover::FailoverMetrics;
use room_actor::cluster::link::LinkKey;
use room_actor::cluster::node::{ClusterConfig, ClusterNode, PeerConfig};
use room_actor::messages::Notice;
use room_actor::metrics::RoomMetrics;
use room_actor::replay::ReplayCache;
use room_actor::room::Clock;
use room_actor::rooms_service::Caps;
use room_actor::supervise::{self, Ended, Policy, Supervisor};
use room_actor::RedisStore;
use room_actor::{Directory, FileStore, MemoryStore, RoomDeps, RoomStore, RoomsService};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tracing::{info, warn};

/// The development secret older builds compiled in: public, so refused in any mode.
const OLD_PUBLIC_SECRET: &str = "roomd-dev-secret-change-me";

/// The web client's Content-Security-Policy: scripts and styles from this origin only (no
/// inline script or style), never framed; connections to this origin and, when the node
/// has a public URL, to where the cluster's nodes are ([`node_sources`]): the page's SDK
/// opens a room's socket straight at its owner (the room's `nodeUrl`).
pub fn csp(public_url: Option<&str>) -> String {
    let mut connect = String::from("'self'");
    for source in public_url.map(node_sources).unwrap_or_default() {
        connect.push(' ');
        connect.push_str(&source);
    }
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src {connect}; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

/// Where a cluster's nodes are, as CSP sources, worked out from one node's public URL:
/// the nodes of a deployment share its scheme and either its parent domain, one host per
/// node (`https://roomd-3.rooms.example.com`: `*.rooms.example.com`, the Kubernetes
/// manifests' form), or its host, one port per node (`http://localhost:8081`:
/// `localhost:*`, compose's; also an IP address or a two-label domain). Each for HTTP and
/// its WebSocket scheme (a CSP source for `https:` does not cover `wss:`).
fn node_sources(public_url: &str) -> Vec<String> {
    let Ok(url) = url::Url::parse(public_url) else { return Vec::new() };
    let ws = if url.scheme() == "https" { "wss" } else { "ws" };
    let any_port = if url.port().is_some() { ":*" } else { "" };
    let place = match url.host() {
        Some(url::Host::Domain(domain)) => match domain.split_once('.') {
            Some((_, parent)) if parent.contains('.') => format!("*.{parent}{any_port}"),
            _ => format!("{domain}:*"),
        },
        Some(url::Host::Ipv4(ip)) => format!("{ip}:*"),
        Some(url::Host::Ipv6(ip)) => format!("[{ip}]:*"),
        None => return Vec::new(),
    };
    vec![format!("{}://{place}", url.scheme()), format!("{ws}://{place}")]
}

/// Headers every response carries unless its handler set its own: a strict CSP ([`csp`]),
/// no sniffing, no framing, no referrer, and `no-store` (API answers carry tokens and
/// private views; static files set their own `no-cache`).
pub fn security_headers(csp: &str) -> DefaultHeaders {
    DefaultHeaders::new()
        .add(("Content-Security-Policy", csp))
        .add(("X-Content-Type-Options", "nosniff"))
        .add(("X-Frame-Options", "DENY"))
        .add(("Referrer-Policy", "no-referrer"))
        .add(("Cache-Control", "no-store"))
}

/// The token secret: configured, or (embedded mode only) generated once and kept in the
/// data directory.
fn token_secret(settings: &Settings) -> Result<String, StartError> {
    if let Some(secret) = settings.auth.secret.as_deref().filter(|s| !s.is_empty()) {
        if secret == OLD_PUBLIC_SECRET {
            return Err(StartError::Config(
                "ROOMD__AUTH__SECRET is the public development secret of older builds: choose a random one".into(),
            ));
        }
        if secret.len() < 16 {
            warn!("ROOMD__AUTH__SECRET is shorter than 16 characters; use 32 random bytes or more");
        }
        return Ok(secret.to_owned());
    }
    if settings.redis.is_set() {
        return Err(StartError::Config(
            "cluster mode (ROOMD__REDIS__URL or ROOMD__REDIS__CLUSTER_URLS set) needs ROOMD__AUTH__SECRET, the \
             same on every node"
                .into(),
        ));
    }
    let dir = std::path::Path::new(&settings.store.path);
    let (secret, path, created) = crate::auth::load_or_create_secret(dir)
        .map_err(|e| StartError::Config(format!("token secret in {}: {e}", dir.display())))?;
    let shown = path.canonicalize().unwrap_or(path);
    if created {
        info!(path = %shown.display(), "generated a token secret (ROOMD__AUTH__SECRET unset)");
        eprintln!("roomd: generated a token secret in {} (set ROOMD__AUTH__SECRET to choose one)", shown.display());
    } else {
        info!(path = %shown.display(), "token secret from the data directory (ROOMD__AUTH__SECRET unset)");
        eprintln!("roomd: token secret from {}", shown.display());
    }
    Ok(secret)
}

#[derive(Debug, Error)]
pub enum StartError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("store: {0}")]
    Store(#[from] room_actor::store::file::OpenError),
    #[error("resuming rooms from the store: {0}")]
    Resume(room_actor::StoreError),
}

/// Replay rebuilds allowed at once (each runs on the blocking pool).
const REPLAY_BUILDS_AT_ONCE: usize = 2;

impl AppState {
    /// The state of an embedded node (file or in-memory store, no cluster).
    pub fn new(settings: Settings) -> Result<AppState, StartError> {
        if settings.redis.is_set() {
            return Err(StartError::Config(
                "ROOMD__REDIS__URL or ROOMD__REDIS__CLUSTER_URLS is set: start the node with `start_node`".into(),
            ));
        }
        AppState::build(settings, None)
    }

    fn build(settings: Settings, redis: Option<RedisStore>) -> Result<AppState, StartError> {
        // Checked before anything is written (the token secret may be created next).
        let public_url = settings.node.public_url().map_err(StartError::Config)?.map(Arc::from);
        settings.admin.token().map_err(StartError::Config)?;
        settings.metrics.listen(&settings.http).map_err(StartError::Config)?;
        let batch_window = settings.cluster.batch_window().map_err(StartError::Config)?;
        let secret = token_secret(&settings)?;
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
        let file_store = match (&redis, settings.store.kind) {
            (None, StoreKind::File) => {
                let dir = std::path::Path::new(&settings.store.path);
                Some(FileStore::open(dir, settings.store.retention_days)?)
            }
            _ => None,
        };
        let store: Arc<dyn RoomStore> = match (&redis, &file_store) {
            (Some(redis), _) => Arc::new(redis.clone()),
            (None, Some(file)) => Arc::new(file.clone()),
            (None, None) => Arc::new(MemoryStore::new()),
        };
        let room_deps = RoomDeps {
            store,
            directory: Arc::new(Directory::new()),
            metrics: room_metrics,
            node_id: node_id.clone(),
            public_url,
            snapshot_every: settings.rooms.snapshot_every,
            clock: Clock::System,
            ended_linger: Duration::from_secs(settings.rooms.ended_linger_s),
            waiting_ttl: Duration::from_secs(settings.rooms.waiting_ttl_s),
            stall_give_up: room_actor::room::STALL_GIVE_UP,
        };
        let failover = FailoverMetrics::new()?;
        failover.register(&registry)?;
        let supervisor = Supervisor::new(exit_process)?;
        supervisor.register(&registry)?;
        let cluster = match (redis, settings.redis.target().ok().flatten()) {
            (Some(redis), Some(target)) => {
                let socket = peer_socket(&settings)?;
                if socket.is_some() && target.uses_tls() {
                    warn!("peer links are authenticated, not encrypted, while Redis is reached over TLS: keep the nodes' peer addresses on a private network");
                }
                let peer = socket.as_ref().map(|(_, advertise)| PeerConfig {
                    advertise: advertise.clone(),
                    key: Arc::new(LinkKey::from_secret(&secret)),
                });
                let node = ClusterNode::new(
                    ClusterConfig {
                        node_id: node_id.clone(),
                        redis: target,
                        prefix: settings.redis.prefix.clone(),
                        lease_ms: settings.cluster.lease_ms,
                        heartbeat_ms: settings.cluster.heartbeat_ms,
                        batch_window,
                        peer,
                    },
                    redis,
                    room_deps.clone(),
                    failover,
                )?;
                if let Some((listener, _)) = socket {
                    node.listen_for_peers(listener);
                }
                node.bus_check().register(&registry)?;
                node.reconciled().register(&registry)?;
                Some(node)
            }
            _ => {
                if settings.cluster.peer_listen_at(&settings.http.bind).is_some() && !settings.cluster.peer_links_auto()
                {
                    warn!("ROOMD__CLUSTER__PEER_LISTEN is set but this node is not in a cluster (no Redis): ignored");
                }
                None
            }
        };
        // The node's mode, decided here once: the service holds the store and the cluster.
        let caps = Caps {
            open_rooms_per_user: settings.rooms.max_open_per_user,
            waiting_seats_per_user: settings.rooms.max_waiting_seats_per_user,
            sockets_per_user: settings.ws.max_sockets_per_user,
        };
        let rooms = match cluster {
            Some(node) => RoomsService::cluster(room_deps, node, caps),
            None => RoomsService::embedded(room_deps, file_store, caps),
        };
        let open_sessions = rooms.sessions().clone();
        let drain_request = rooms.drain_request().clone();
        // Session ids are unique across nodes: a random high half per process.
        let session_base = u64::from(uuid::Uuid::new_v4().as_u128() as u32) << 32;
        Ok(AppState {
            auth: Auth::new(&secret, settings.auth.token_ttl_s, settings.auth.max_token_lifetime_s),
            limits: AddrLimits::new(
                settings.http.addr_rate_per_min,
                settings.http.addr_burst,
                settings.http.addr_max_sockets,
                settings.http.trusted_proxies.clone(),
            ),
            settings,
            node_id,
            rooms,
            metrics: GatewayMetrics { registry, sessions, ws_closed_flood, ws_errors },
            draining: AtomicBool::new(false),
            exit_after_drain: AtomicBool::new(false),
            next_session: AtomicU64::new(session_base + 1),
            sessions: open_sessions,
            replays: ReplayCache::new(Duration::from_secs(600), 32),
            replay_permits: tokio::sync::Semaphore::new(REPLAY_BUILDS_AT_ONCE),
            closed_since_trim: AtomicU64::new(0),
            admin,
            http_metrics,
            drain_request,
            room_threads: Arc::default(),
            supervisor: Arc::new(supervisor),
        })
    }
}

/// Binds the peer link socket unless `ROOMD__CLUSTER__PEER_LISTEN` is `off` (the
/// default, `auto`, binds the HTTP address on any free port): the socket and the address
/// other nodes dial.
fn peer_socket(settings: &Settings) -> Result<Option<(std::net::TcpListener, String)>, StartError> {
    let Some(listen) = settings.cluster.peer_listen_at(&settings.http.bind) else {
        return Ok(None);
    };
    let bind_error = |source| StartError::Bind { addr: listen.clone(), source };
    let listener = std::net::TcpListener::bind(&listen).map_err(bind_error)?;
    let bound = listener.local_addr().map_err(bind_error)?;
    let advertise = settings.cluster.peer_advertise(bound).map_err(StartError::Config)?;
    info!(bound = %bound, advertise = %advertise, "peer link socket bound");
    Ok(Some((listener, advertise)))
}

/// A running node: the server future to await and the address it listens on.
pub struct Running {
    pub server: Server,
    pub addr: SocketAddr,
    /// Where `/metrics` is served when it has a listener of its own
    /// (`ROOMD__METRICS__PORT`); `None`: on `addr` with everything else.
    pub metrics_addr: Option<SocketAddr>,
    pub state: web::Data<AppState>,
}

/// Binds and starts an embedded node (call inside an actix system). On the file store
/// the open rooms are resumed in the background; [`start_node`] resumes them before it
/// listens.
pub fn start(settings: Settings) -> Result<Running, StartError> {
    let state = web::Data::new(AppState::new(settings)?);
    let resuming = state.clone();
    actix::spawn(async move {
        if let Err(e) = resuming.rooms.resume().await {
            tracing::error!(error = %e, "rooms not resumed");
        }
    });
    serve(state)
}

/// Starts a node in either mode: with `ROOMD__REDIS__URL` (or `ROOMD__REDIS__CLUSTER_URLS`) it connects to Redis and joins
/// the cluster, else it is an embedded node, which first resumes every open room of its
/// store.
pub async fn start_node(settings: Settings) -> Result<Running, StartError> {
    // Settings that stop a node are reported before it reaches for Redis.
    settings.admin.token().map_err(StartError::Config)?;
    settings.metrics.listen(&settings.http).map_err(StartError::Config)?;
    let Some(target) = settings.redis.target().map_err(StartError::Config)? else {
        if settings.redis.ack_replicas > 0 {
            return Err(StartError::Config(
                "ROOMD__REDIS__ACK_REPLICAS is set but neither ROOMD__REDIS__URL nor ROOMD__REDIS__CLUSTER_URLS is: \
                 replicated acknowledgements need a Redis"
                    .into(),
            ));
        }
        let state = web::Data::new(AppState::new(settings)?);
        if let Some(resumed) = state.rooms.resume().await.map_err(StartError::Resume)? {
            if !resumed.failed.is_empty() {
                warn!(failed = ?resumed.failed, "some rooms could not be resumed; they stay in the store");
            }
        }
        return serve(state);
    };
    let batch_window = settings.cluster.batch_window().map_err(StartError::Config)?;
    let connected = async {
        RedisStore::connect_to(&target, &settings.redis.prefix)
            .await?
            .with_acks(&target, settings.redis.ack_replicas, settings.redis.ack_timeout_ms)
            .await
            .map(|store| store.with_batch_window(batch_window))
    };
    let redis =
        connected.await.map_err(|e| StartError::Config(format!("cannot reach Redis at {}: {e}", target.setting())))?;
    let state = web::Data::new(AppState::build(settings, Some(redis))?);
    // Socket counts of this node id's previous run zeroed, then the cluster's core tasks.
    state.rooms.run(state.room_threads.clone(), &state.supervisor).await;
    serve(state)
}

fn serve(state: web::Data<AppState>) -> Result<Running, StartError> {
    let bind = format!("{}:{}", state.settings.http.bind, state.settings.http.port);
    let workers = state.settings.http.workers;
    let app_state = state.clone();
    // (Checked when the state was built.)
    let csp = csp(state.settings.node.public_url().ok().flatten().as_deref());
    let mut server = HttpServer::new(move || {
        // Runs on each worker as it starts.
        app_state.room_threads.register_current();
        App::new()
            .wrap(actix_web::middleware::from_fn(http_metrics::track))
            .app_data(app_state.clone())
            .app_data(api::json_config())
            .app_data(api::query_config())
            .wrap(security_headers(&csp))
            .configure(api::routes)
            .route("/ws", web::get().to(ws::upgrade))
            .configure(admin::routes)
            .app_data(web::Data::new(app_state.http_metrics.clone()))
    })
    // Signals are ours (`drain`), so a SIGTERM hands rooms over before the server stops.
    .disable_signals()
    // Each action is answered with small writes (update, ack): with Nagle on, the second
    // waits for the client's delayed ACK, a ~40 ms tail measured by the latency example.
    .tcp_nodelay(true)
    .shutdown_timeout(SHUTDOWN_TIMEOUT.as_secs());
    if workers > 0 {
        server = server.workers(workers);
    }
    // A bound on TCP connections per worker too (beyond it, accepting pauses): room for
    // every WebSocket the node takes plus plain HTTP calls.
    server = server.max_connections(state.settings.http.max_connections.saturating_add(256));
    // Addresses back at a full burst are forgotten, so the limiter tables stay small; and
    // memory freed by closed sockets goes back to the OS. Refused admin requests are
    // summarised in one log line per tick. Started again if it ends: its state is a tick
    // count.
    let chores = state.clone();
    state.supervisor.spawn("chores", Policy::Restart, move || {
        let chores = chores.clone();
        async move {
            let mut tick = 0u64;
            loop {
                tokio::time::sleep(admin::FAILURE_REPORT_EVERY).await;
                tick += 1;
                if tick.is_multiple_of(6) {
                    chores.limits.forget_idle();
                    chores.admin.forget_idle();
                }
                chores.admin.report_failures();
                trim_after_closes(&chores);
            }
        }
    });
    let server = server.bind(&bind).map_err(|source| StartError::Bind { addr: bind.clone(), source })?;
    let addr =
        server.addrs().first().copied().ok_or_else(|| StartError::Config(format!("no address bound for {bind}")))?;
    let metrics_addr = serve_metrics(&state)?;
    let server = server.run();
    let _ = state.admin.addr.set(addr.to_string());
    admin::spawn_reporter(state.clone());
    // An operator's drain (`POST /admin/api/nodes/{id}/drain`, here or over the bus) does
    // what SIGTERM does in `main`: drain, then stop serving. Not started again if it dies:
    // a drain half done cannot be resumed (rooms handed over, sockets told to go), and
    // the process was on its way out; exiting leaves the rest to failover.
    let (drain_state, handle) = (state.clone(), server.handle());
    state.supervisor.spawn("operator_drain", Policy::ExitOnFailure, move || {
        let (drain_state, handle) = (drain_state.clone(), handle.clone());
        async move {
            drain_state.drain_request.notified().await;
            if drain_state.draining.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            tracing::info!(node = %drain_state.node_id, "draining at an operator's request");
            exit_after_grace(&drain_state);
            drain(&drain_state).await;
            handle.stop(true).await;
        }
    });
    Ok(Running { server, addr, metrics_addr, state })
}

/// With `ROOMD__METRICS__PORT` set, serves `/metrics` on a listener of its own (one
/// worker, nothing else routed there; the player port then answers 404 for it): the
/// address it is bound to. It runs until the process ends, so a draining node can still
/// be watched.
fn serve_metrics(state: &web::Data<AppState>) -> Result<Option<SocketAddr>, StartError> {
    let Some(bind) = state.settings.metrics.listen(&state.settings.http).map_err(StartError::Config)? else {
        return Ok(None);
    };
    let app_state = state.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(app_state.clone())
            .wrap(security_headers(&csp(None)))
            .route("/metrics", web::get().to(api::metrics))
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .bind(&bind)
    .map_err(|source| StartError::Bind { addr: bind.clone(), source })?;
    let addr = server.addrs().first().copied();
    info!(addr = ?addr, "serving /metrics on a listener of its own (ROOMD__METRICS__PORT)");
    actix_web::rt::spawn(server.run());
    Ok(addr)
}

/// Sockets closed since the last trim before the allocator is asked to give memory back.
const TRIM_AFTER_CLOSES: u64 = 32;

/// Allocators keep the memory of freed sockets (2,000 sockets opened and closed left glibc's
/// RSS 33 MiB up; jemalloc's ~15 MiB 35 s later, its decay running only while the process
/// allocates). After enough closes the free pages go back to the OS: `malloc_trim` for
/// glibc's arenas, a purge of every jemalloc arena on a roomd built on it (the default).
/// Runs on the blocking pool (both walk every arena). jemalloc's background thread would
/// purge without this, but cost a saturated node a fifth of its Halli Galli throughput
/// (docs/bench-history-2026-12.md, "The allocator").
pub fn trim_after_closes(state: &AppState) {
    if state.closed_since_trim.load(std::sync::atomic::Ordering::Relaxed) < TRIM_AFTER_CLOSES {
        return;
    }
    state.closed_since_trim.store(0, std::sync::atomic::Ordering::Relaxed);
    tokio::task::spawn_blocking(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            // SAFETY: malloc_trim only releases free memory of the allocator's own arenas;
            // it takes the arena locks itself and touches no memory the program holds.
            let released = unsafe { libc::malloc_trim(0) };
            tracing::debug!(released, "glibc malloc trimmed after sockets closed");
        }
        #[cfg(feature = "jemalloc")]
        purge_jemalloc();
    });
}

/// Returns every jemalloc arena's unused dirty pages to the OS (`arena.<all>.purge`).
#[cfg(feature = "jemalloc")]
fn purge_jemalloc() {
    // `MALLCTL_ARENAS_ALL`: the arena index that names them all.
    const PURGE_ALL: &std::ffi::CStr = c"arena.4096.purge";
    use std::ptr::null_mut;
    // SAFETY: the name is NUL-terminated, and this control takes no old or new value: the
    // null pointers and zero length are what jemalloc requires of it. Purging touches only
    // pages no allocation holds.
    let failed = unsafe { tikv_jemalloc_sys::mallctl(PURGE_ALL.as_ptr(), null_mut(), null_mut(), null_mut(), 0) };
    if failed == 0 {
        tracing::debug!("jemalloc purged after sockets closed");
    } else {
        tracing::warn!(errno = failed, "jemalloc purge failed: the memory of closed sockets stays with the process");
    }
}

/// Drains the node (SIGTERM): `/readyz` goes false and no rooms are created; in cluster
/// mode every room is handed over after its last append; sockets are closed with 1012
/// so clients reconnect elsewhere; returns when they are gone or the grace is over.
/// Handing rooms over may take at most half the grace; the rest is for the sockets.
/// Every socket is told to close whether its room was handed over or not (Redis away,
/// a room stuck): the drain is bounded by the grace whatever Redis and the clients do,
/// and [`exit_after_grace`] bounds the whole process.
pub async fn drain(state: &AppState) {
    state.draining.store(true, std::sync::atomic::Ordering::Relaxed);
    let grace = Duration::from_secs(state.settings.cluster.drain_grace_s);
    let started = tokio::time::Instant::now();
    state.rooms.hand_over(grace / 2).await;
    state.sessions.tell_all(Notice::Drain);
    let deadline = started + grace.saturating_sub(LEAVE_WITHIN);
    while tokio::time::Instant::now() < deadline && !state.sessions.is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if !state.sessions.is_empty() {
        tracing::warn!(
            left = state.sessions.len(),
            "sockets still open at the end of the drain grace; the server closes them"
        );
    }
    if tokio::time::timeout(LEAVE_WITHIN, state.rooms.leave()).await.is_err() {
        tracing::warn!("leaving the membership timed out (Redis away?); this node's heartbeat expires instead");
    }
    // The server stops next (its workers' threads with it): nothing that ends now is a
    // failure.
    state.supervisor.stop();
}

/// The longest a draining node waits to leave the membership (one Redis call; when Redis
/// does not answer, the heartbeat expiring does the same a few seconds later).
const LEAVE_WITHIN: Duration = Duration::from_secs(1);

/// How long after SIGTERM the process ends whatever happens: the drain grace
/// (`ROOMD__CLUSTER__DRAIN_GRACE_S`) plus the server's shutdown (5 s), less a margin for
/// the exit itself. What is not done by then (a room not handed over, a socket whose
/// client does not answer its close) is left to failover and to the client's reconnect.
fn exit_deadline(state: &AppState) -> Duration {
    Duration::from_secs(state.settings.cluster.drain_grace_s) + SHUTDOWN_TIMEOUT - Duration::from_millis(300)
}

/// Seconds the HTTP server waits for its connections once it stops (`shutdown_timeout`).
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Ends the process [`exit_deadline`] from now if it has not ended by then: a thread of
/// its own, so no stuck task, runtime or Redis call can hold it back. Only where the
/// binary asked for it (`AppState::exit_after_drain`): a process that embeds the server
/// is not ended by it.
pub fn exit_after_grace(state: &AppState) {
    if !state.exit_after_drain.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let within = exit_deadline(state);
    let spawned = std::thread::Builder::new().name("exit-deadline".into()).spawn(move || {
        std::thread::sleep(within);
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "roomd: the drain did not finish within {within:?} of the signal; exiting now (rooms not handed over fail \
             over when their leases expire)"
        );
        std::process::exit(0);
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "the exit deadline thread did not start; the drain's own bounds apply");
    }
}

/// What ends the process when a core task cannot run (`room_actor::supervise`): a line
/// on stderr, written at once whatever the log writer's state, and the exit code an
/// orchestrator restarts on.
fn exit_process(task: &'static str, ended: &Ended) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "roomd: the core task {task} {ended} and cannot run again; exiting with code {} so the node is started \
         afresh",
        supervise::EXIT_CODE
    );
    std::process::exit(supervise::EXIT_CODE);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let mut s = Settings::load(None).unwrap_or_else(|e| panic!("default settings: {e}"));
        s.auth.secret = None;
        s
    }

    #[test]
    fn the_pages_connect_src_names_where_the_clusters_nodes_are_from_the_nodes_public_url() {
        let connect = |url: Option<&str>| {
            let csp = csp(url);
            let part = csp.split("; ").find(|p| p.starts_with("connect-src ")).map(str::to_owned);
            part.unwrap_or_else(|| panic!("no connect-src in {csp}"))
        };
        assert_eq!(connect(None), "connect-src 'self'");
        assert_eq!(
            connect(Some("https://roomd-3.rooms.example.com")),
            "connect-src 'self' https://*.rooms.example.com wss://*.rooms.example.com",
            "a host per node (the Kubernetes manifests)"
        );
        assert_eq!(
            connect(Some("https://roomd-3.rooms.example.com:8443")),
            "connect-src 'self' https://*.rooms.example.com:* wss://*.rooms.example.com:*"
        );
        assert_eq!(
            connect(Some("http://localhost:8081")),
            "connect-src 'self' http://localhost:* ws://localhost:*",
            "a port per node (compose)"
        );
        assert_eq!(connect(Some("http://10.0.3.7:8080")), "connect-src 'self' http://10.0.3.7:* ws://10.0.3.7:*");
        assert_eq!(connect(Some("http://[::1]:8080")), "connect-src 'self' http://[::1]:* ws://[::1]:*");
        assert_eq!(
            connect(Some("https://example.com/n/roomd-1")),
            "connect-src 'self' https://example.com:* wss://example.com:*",
            "no parent domain wider than the node's own"
        );
        let full = csp(Some("https://roomd-3.rooms.example.com"));
        for part in ["default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"] {
            assert!(full.contains(part), "{full} lacks {part}");
        }
    }

    #[test]
    fn cluster_mode_needs_a_secret_and_nobody_gets_the_old_public_one() {
        let mut cluster = settings();
        cluster.redis.url = Some("redis://127.0.0.1:1/".into());
        assert!(token_secret(&cluster).is_err());
        cluster.auth.secret = Some("a-cluster-secret-0123456789abcdef".into());
        assert_eq!(token_secret(&cluster).ok().as_deref(), Some("a-cluster-secret-0123456789abcdef"));
        let mut old = settings();
        old.auth.secret = Some(OLD_PUBLIC_SECRET.into());
        assert!(token_secret(&old).is_err());
    }

    #[test]
    fn an_embedded_node_without_a_secret_generates_one_in_its_data_directory() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let mut s = settings();
        s.store.path = dir.path().join("data").to_string_lossy().into_owned();
        let first = token_secret(&s).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(first, OLD_PUBLIC_SECRET);
        assert_eq!(token_secret(&s).ok(), Some(first));
        assert!(dir.path().join("data").join(crate::auth::SECRET_FILE).exists());
    }
}
