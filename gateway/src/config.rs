//! Settings: built-in defaults → optional file (`--config FILE` or `ROOMD_CONFIG`) →
//! environment `ROOMD__SECTION__KEY`. The names are part of `PROTOCOL.md`'s contract.

use config::{Config, Environment, File};
use serde::Deserialize;

/// The secret roomd uses when none is configured. Fine for a laptop; cluster mode
/// refuses to start with it.
pub const DEV_SECRET: &str = "roomd-dev-secret-change-me";

#[derive(Clone, Debug, Deserialize)]
pub struct Settings {
    pub http: Http,
    #[serde(default)]
    pub node: Node,
    #[serde(default)]
    pub redis: Redis,
    pub auth: Auth,
    pub dev: Dev,
    pub log: Log,
    pub cluster: Cluster,
    pub ws: Ws,
    pub rooms: Rooms,
    #[serde(default)]
    pub admin: Admin,
}

/// Operators' API and console (`/admin`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Admin {
    /// Bearer token of the admin API; unset = the admin API and console answer 404.
    pub token: Option<String>,
    /// Name written as `who` in audit lines; unset = a fingerprint of the token.
    pub operator: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Http {
    pub bind: String,
    /// 0 = any free port (the bound address is printed and logged).
    pub port: u16,
    /// HTTP worker threads; 0 = one per core.
    pub workers: usize,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Node {
    /// Generated when unset.
    pub id: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Redis {
    /// Unset = embedded single-node mode (in-memory store and bus).
    pub url: Option<String>,
    /// Prefix of every key and bus channel: the nodes of one cluster share it.
    #[serde(default = "default_prefix")]
    pub prefix: String,
}

fn default_prefix() -> String {
    "roomd".to_owned()
}

impl Default for Redis {
    fn default() -> Redis {
        Redis { url: None, prefix: default_prefix() }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Auth {
    /// HS256 secret for tokens.
    pub secret: String,
    /// Lifetime of guest tokens.
    pub token_ttl_s: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Dev {
    /// Accept `seed` in `POST /api/rooms` (scripted tests only).
    pub allow_fixed_seed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Log {
    pub format: LogFormat,
    /// `tracing` filter, e.g. `info` or `room_actor=debug,info`.
    pub level: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Cluster {
    /// Room lease TTL (ms).
    pub lease_ms: u64,
    /// How long a draining node waits before it exits (s).
    pub drain_grace_s: u64,
    /// Membership heartbeat interval (ms); a node is dead after three missed beats.
    pub heartbeat_ms: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Ws {
    /// Largest text frame (bytes); larger closes the socket with 1009.
    pub max_frame_bytes: usize,
    /// Sustained messages per second per socket.
    pub rate_per_s: u32,
    /// Burst above the sustained rate.
    pub burst: u32,
    /// Over-limit messages within 10 s before the socket is closed with 1008.
    pub flood_limit: u32,
    /// Ping interval (s).
    pub heartbeat_s: u64,
    /// No pong or message for this long closes the socket (s).
    pub client_timeout_s: u64,
    /// Open sockets one user may have on this node; more are refused with 429.
    pub max_sockets_per_user: usize,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Rooms {
    /// Default disconnect grace (`graceSec`).
    pub grace_sec: u32,
    /// A snapshot every this many log entries.
    pub snapshot_every: u64,
    /// Open (not finished) rooms one user may host.
    pub max_open_per_user: usize,
    /// Seconds an ended room nobody watches stays open.
    pub ended_linger_s: u64,
}

impl Settings {
    /// Loads the layers; `file` is the `--config` argument if any.
    pub fn load(file: Option<&str>) -> Result<Settings, config::ConfigError> {
        let mut builder = Config::builder()
            .set_default("http.bind", "127.0.0.1")?
            .set_default("http.port", 8080)?
            .set_default("http.workers", 0)?
            .set_default("auth.secret", DEV_SECRET)?
            .set_default("auth.token_ttl_s", 7 * 24 * 3600)?
            .set_default("dev.allow_fixed_seed", false)?
            .set_default("log.format", "pretty")?
            .set_default("log.level", "info")?
            .set_default("cluster.lease_ms", 5000)?
            .set_default("cluster.drain_grace_s", 20)?
            .set_default("cluster.heartbeat_ms", 1000)?
            .set_default("ws.max_frame_bytes", 64 * 1024)?
            .set_default("ws.rate_per_s", 30)?
            .set_default("ws.burst", 60)?
            .set_default("ws.flood_limit", 100)?
            .set_default("ws.heartbeat_s", 2)?
            .set_default("ws.client_timeout_s", 10)?
            .set_default("ws.max_sockets_per_user", 8)?
            .set_default("rooms.grace_sec", 60)?
            .set_default("rooms.snapshot_every", 64)?
            .set_default("rooms.max_open_per_user", 5)?
            .set_default("rooms.ended_linger_s", 60)?;
        let file = file.map(str::to_owned).or_else(|| std::env::var("ROOMD_CONFIG").ok());
        if let Some(path) = file {
            builder = builder.add_source(File::with_name(&path).required(true));
        }
        builder = builder
            .add_source(Environment::with_prefix("ROOMD").prefix_separator("__").separator("__").try_parsing(true));
        builder.build()?.try_deserialize()
    }
}
