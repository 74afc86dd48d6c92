//! Settings: built-in defaults → optional file (`--config FILE` or `ROOMD_CONFIG`) →
//! environment `ROOMD__SECTION__KEY`. The names are part of `PROTOCOL.md`'s contract.

use config::{Config, Environment, File};
use room_actor::redis::target::RedisTarget;
use serde::Deserialize;

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
    pub store: Store,
    #[serde(default)]
    pub admin: Admin,
    #[serde(default)]
    pub metrics: Metrics,
}

/// The shortest admin token a node accepts: a short one can be guessed, and the admin API
/// closes rooms, kicks players and drains nodes.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 32;

/// Operators' API and console (`/admin`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Admin {
    /// Bearer token of the admin API; unset = the admin API and console answer 404.
    pub token: Option<String>,
    /// Name written as `who` in audit lines; unset = a fingerprint of the token.
    pub operator: Option<String>,
}

impl Admin {
    /// The configured token (`None`: the admin API is off), or why the node must not start
    /// with it. The message gives its length, never the token.
    pub fn token(&self) -> Result<Option<&str>, String> {
        let Some(token) = self.token.as_deref().filter(|t| !t.is_empty()) else { return Ok(None) };
        let chars = token.chars().count();
        if chars < MIN_ADMIN_TOKEN_CHARS {
            return Err(format!(
                "ROOMD__ADMIN__TOKEN is {chars} characters long: it must be at least {MIN_ADMIN_TOKEN_CHARS} (a \
                 random one: `openssl rand -hex 32`), or unset to turn the admin API off"
            ));
        }
        Ok(Some(token))
    }
}

/// Where `/metrics` is served. By default on the player port, with everything else; with
/// `port` set, on a listener of its own only, which operators keep off the public network
/// (the metrics name the version, file descriptors and memory of the process).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Metrics {
    /// Address of the metrics listener; unset: `http.bind`.
    pub bind: Option<String>,
    /// Port of the metrics listener (0: any free port, logged). Set: `/metrics` is served
    /// there only, and the player port answers 404 for it.
    pub port: Option<u16>,
}

impl Metrics {
    /// `host:port` of the metrics listener (`None`: `/metrics` stays on the player port),
    /// or why the settings name none coherently.
    pub fn listen(&self, http: &Http) -> Result<Option<String>, String> {
        let bind = self.bind.as_deref().map(str::trim).filter(|b| !b.is_empty());
        match (bind, self.port) {
            (None, None) => Ok(None),
            (Some(bind), None) => Err(format!(
                "ROOMD__METRICS__BIND is {bind:?} but ROOMD__METRICS__PORT is unset: set the port of the metrics \
                 listener too (or neither, to serve /metrics on the player port)"
            )),
            (bind, Some(port)) => {
                let bind = bind.unwrap_or(&http.bind);
                if port != 0 && port == http.port && bind == http.bind {
                    return Err(format!(
                        "ROOMD__METRICS__PORT {port} is the player port (ROOMD__HTTP__PORT): choose another one"
                    ));
                }
                Ok(Some(format!("{bind}:{port}")))
            }
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Http {
    pub bind: String,
    /// 0 = any free port (the bound address is printed and logged).
    pub port: u16,
    /// HTTP worker threads; 0 = one per core.
    pub workers: usize,
    /// Guest sessions, room creations and WebSocket upgrades one client address may
    /// start per minute (each counted on its own), after the burst.
    pub addr_rate_per_min: u32,
    /// How many of each a client address may start at once before the rate applies.
    pub addr_burst: u32,
    /// WebSockets one client address (an IPv4 address or an IPv6 /64) may hold open on
    /// this node at once; more are refused with 429 `too_many_sockets`. Generous by
    /// default: a school or office behind one NAT address shares it.
    pub addr_max_sockets: u32,
    /// CIDRs (comma-separated, or a list in a file) of reverse proxies whose
    /// `X-Forwarded-For` is believed; default none: the peer address is the client.
    #[serde(default, deserialize_with = "crate::limits::cidrs")]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Open WebSocket sessions this node accepts in total (more: 503); keep it well
    /// below the process's file-descriptor limit.
    pub max_connections: usize,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Node {
    /// Generated when unset.
    pub id: Option<String>,
    /// The base URL clients can reach this very node at (`http://10.0.3.7:8080`,
    /// `https://rooms.example/n/roomd-1`), shown as `nodeUrl` in the info of the rooms it
    /// owns so clients may connect their WebSocket straight to the owner. Unset = none
    /// shown: clients use whichever node they reach, which forwards over the bus.
    pub public_url: Option<String>,
}

impl Node {
    /// The public URL, checked and without a trailing `/`, or why it is not one.
    pub fn public_url(&self) -> Result<Option<String>, String> {
        let Some(raw) = self.public_url.as_deref().map(str::trim).filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let bad = |why: &str| format!("ROOMD__NODE__PUBLIC_URL {raw:?}: {why}");
        let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("must be an http:// or https:// base URL (the WebSocket is at its /ws)"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("has no host"));
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
            return Err(bad("must not carry a query, a fragment or credentials"));
        }
        Ok(Some(raw.trim_end_matches('/').to_owned()))
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Redis {
    /// One Redis. Unset (and no `cluster_urls`) = embedded single-node mode.
    pub url: Option<String>,
    /// Comma-separated seed URLs of a Redis Cluster, instead of `url` (never both).
    pub cluster_urls: Option<String>,
    /// Prefix of every key and bus channel: the nodes of one cluster share it.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Replicas that must hold a log entry before it is acknowledged (`WAIT`); 0 = off.
    #[serde(default)]
    pub ack_replicas: u32,
    /// The longest an append waits for those replicas before the room answers
    /// `room_unavailable` and tries again.
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u64,
}

fn default_ack_timeout_ms() -> u64 {
    1000
}

impl Redis {
    /// Where the node's Redis is (`None`: the embedded node), or why the settings name
    /// none coherently.
    pub fn target(&self) -> Result<Option<RedisTarget>, String> {
        RedisTarget::from_settings(self.url.as_deref(), self.cluster_urls.as_deref())
    }

    /// Whether the node runs in cluster mode (a Redis or a Redis Cluster is set).
    pub fn is_set(&self) -> bool {
        self.target().map_or(true, |t| t.is_some())
    }
}

fn default_prefix() -> String {
    "roomd".to_owned()
}

impl Default for Redis {
    fn default() -> Redis {
        Redis {
            url: None,
            cluster_urls: None,
            prefix: default_prefix(),
            ack_replicas: 0,
            ack_timeout_ms: default_ack_timeout_ms(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Auth {
    /// HS256 secret for tokens. Unset: the embedded node generates one on first start
    /// and keeps it in `<store.path>/auth-secret` (mode 0600); cluster mode requires it.
    pub secret: Option<String>,
    /// Lifetime of guest tokens.
    pub token_ttl_s: u64,
    /// Longest lifetime a token may claim (`exp` at most this far ahead): tokens minted
    /// elsewhere with a longer one are refused.
    pub max_token_lifetime_s: u64,
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
    /// Room lease TTL (ms): a backstop, renewed every third of it; a room moves when its
    /// holder stops being a live member, whatever this is (`room_actor::cluster::lease`).
    pub lease_ms: u64,
    /// How long a draining node waits before it exits (s).
    pub drain_grace_s: u64,
    /// Membership heartbeat interval (ms); a node is dead after three missed beats.
    pub heartbeat_ms: u64,
    /// The longest a Redis batch (log appends; a frame to another node through Redis
    /// pub/sub, not one on a peer link) may wait after its first item for more (ms; 0 =
    /// never): only while its queue is busy enough to bring two more within it, and then
    /// until five more have come, at most as long as its rate says they take
    /// (`room_actor::pace`).
    pub batch_window_ms: u64,
    /// Where this node takes peer links from other nodes (`host:port`; port 0: any free
    /// one): frames to every node that takes links go straight to it
    /// (`room_actor::cluster::link`). `auto` (the default): the HTTP bind address, any
    /// free port ([`Cluster::peer_listen_at`]). `off` (or empty): frames between nodes go
    /// through Redis pub/sub.
    #[serde(default)]
    pub peer_listen: String,
    /// The address other nodes dial for this node's links: `host:port`, or a host alone
    /// (the bound port is added). Unset: the bound address, which must then not be a
    /// wildcard (0.0.0.0 or ::).
    #[serde(default)]
    pub peer_advertise: Option<String>,
}

/// The longest batch window an operator may set: a frame to another node that waited
/// longer would eat into the requests' and leases' timeouts for nothing.
pub const MAX_BATCH_WINDOW_MS: u64 = 50;

impl Cluster {
    /// Where this cluster node binds its peer link socket (`http_bind`: the HTTP bind
    /// address), or `None` when links are off (`off` or empty: every frame through
    /// Redis). `auto`, the default, takes links on the HTTP bind address on any free
    /// port: other nodes learn the port from the membership.
    pub fn peer_listen_at(&self, http_bind: &str) -> Option<String> {
        let listen = self.peer_listen.trim();
        if listen.is_empty() || listen.eq_ignore_ascii_case("off") {
            return None;
        }
        if !listen.eq_ignore_ascii_case("auto") {
            return Some(listen.to_owned());
        }
        let host = http_bind.trim().trim_start_matches('[').trim_end_matches(']');
        Some(match host.parse::<std::net::IpAddr>() {
            Ok(ip) => std::net::SocketAddr::new(ip, 0).to_string(),
            Err(_) => format!("{host}:0"),
        })
    }

    /// Whether links are on by default (`auto`) rather than set by the operator.
    pub fn peer_links_auto(&self) -> bool {
        self.peer_listen.trim().eq_ignore_ascii_case("auto")
    }

    /// The address other nodes dial for this node's links, given the address its link
    /// socket is bound to; or why there is none.
    pub fn peer_advertise(&self, bound: std::net::SocketAddr) -> Result<String, String> {
        let Some(raw) = self.peer_advertise.as_deref().map(str::trim).filter(|a| !a.is_empty()) else {
            if bound.ip().is_unspecified() && self.peer_links_auto() {
                return Err(format!(
                    "peer links are on by default in cluster mode, on the HTTP bind address ({}), which is every \
                     address: set ROOMD__CLUSTER__PEER_ADVERTISE to the host other nodes dial (in Kubernetes, the \
                     pod's IP), or ROOMD__CLUSTER__PEER_LISTEN to off to send every frame between nodes through Redis",
                    bound.ip()
                ));
            }
            if bound.ip().is_unspecified() {
                return Err(format!(
                    "ROOMD__CLUSTER__PEER_LISTEN {:?} takes links on every address: set ROOMD__CLUSTER__PEER_ADVERTISE \
                     to the host (or host:port) other nodes dial (in Kubernetes, the pod's IP)",
                    self.peer_listen
                ));
            }
            return Ok(bound.to_string());
        };
        let bad = |why: &str| format!("ROOMD__CLUSTER__PEER_ADVERTISE {raw:?}: {why}");
        if raw.contains('/') {
            return Err(bad("expected host, host:port or ip:port (no scheme, no path)"));
        }
        if let Ok(ip) = raw.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>() {
            if ip.is_unspecified() {
                return Err(bad("a wildcard address is nothing another node can dial"));
            }
            return Ok(std::net::SocketAddr::new(ip, bound.port()).to_string());
        }
        if let Ok(addr) = raw.parse::<std::net::SocketAddr>() {
            if addr.ip().is_unspecified() || addr.port() == 0 {
                return Err(bad("needs a dialable address and a port other than 0"));
            }
            return Ok(addr.to_string());
        }
        match raw.rsplit_once(':') {
            None => Ok(format!("{raw}:{}", bound.port())),
            Some((host, port)) if !host.is_empty() => match port.parse::<u16>() {
                Ok(port) if port > 0 => Ok(raw.to_owned()),
                _ => Err(bad("the port must be a number from 1 to 65535")),
            },
            _ => Err(bad("expected host, host:port or ip:port")),
        }
    }

    /// The batch window, or why it cannot be one.
    pub fn batch_window(&self) -> Result<std::time::Duration, String> {
        if self.batch_window_ms > MAX_BATCH_WINDOW_MS {
            return Err(format!(
                "ROOMD__CLUSTER__BATCH_WINDOW_MS {}: at most {MAX_BATCH_WINDOW_MS} ms (it adds that much latency to \
                 every busy hop; 1-10 ms is the useful range, 0 turns it off)",
                self.batch_window_ms
            ));
        }
        Ok(std::time::Duration::from_millis(self.batch_window_ms))
    }
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
    /// Seconds a room may wait for its start before it closes (squatting).
    pub waiting_ttl_s: u64,
    /// Waiting rooms one user may sit in at once (hosting included).
    pub max_waiting_seats_per_user: usize,
}

/// Which store the embedded node keeps its rooms in (cluster mode always uses Redis).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// SQLite in `store.path`: rooms, logs and records survive restarts.
    File,
    /// In memory: nothing survives a restart (tests).
    Memory,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Store {
    /// `file` (default) or `memory`.
    pub kind: StoreKind,
    /// The data directory (relative paths are relative to the working directory).
    pub path: String,
    /// Finished games are deleted this many days after they ended.
    pub retention_days: u32,
}

impl Settings {
    /// Loads the layers; `file` is the `--config` argument if any.
    pub fn load(file: Option<&str>) -> Result<Settings, config::ConfigError> {
        let mut builder = Config::builder()
            .set_default("http.bind", "127.0.0.1")?
            .set_default("http.port", 8080)?
            .set_default("http.workers", 0)?
            .set_default("http.addr_rate_per_min", 30)?
            .set_default("http.addr_burst", 20)?
            .set_default("http.addr_max_sockets", 200)?
            .set_default("http.max_connections", 10_000)?
            .set_default("auth.token_ttl_s", 7 * 24 * 3600)?
            .set_default("auth.max_token_lifetime_s", 30 * 24 * 3600)?
            .set_default("dev.allow_fixed_seed", false)?
            .set_default("log.format", "pretty")?
            .set_default("log.level", "info")?
            .set_default("cluster.lease_ms", 30_000)?
            .set_default("cluster.drain_grace_s", 20)?
            .set_default("cluster.heartbeat_ms", 500)?
            .set_default("cluster.batch_window_ms", 5)?
            .set_default("cluster.peer_listen", "auto")?
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
            .set_default("rooms.ended_linger_s", 60)?
            .set_default("rooms.waiting_ttl_s", 30 * 60)?
            .set_default("rooms.max_waiting_seats_per_user", 5)?
            .set_default("store.kind", "file")?
            .set_default("store.path", "roomd-data")?
            .set_default("store.retention_days", 90)?;
        let file = file.map(str::to_owned).or_else(|| std::env::var("ROOMD_CONFIG").ok());
        if let Some(path) = file {
            builder = builder.add_source(File::with_name(&path).required(true));
        }
        builder = builder
            .add_source(Environment::with_prefix("ROOMD").prefix_separator("__").separator("__").try_parsing(true));
        builder.build()?.try_deserialize()
    }
}

#[cfg(test)]
mod tests {
    use super::{Admin, Cluster, Metrics, Node, Settings};

    fn cluster_settings() -> Cluster {
        Cluster {
            lease_ms: 3000,
            drain_grace_s: 20,
            heartbeat_ms: 500,
            batch_window_ms: 5,
            peer_listen: String::new(),
            peer_advertise: None,
        }
    }

    #[test]
    fn the_peer_link_address_is_one_other_nodes_can_dial() {
        let bound: std::net::SocketAddr = "10.0.3.7:7946".parse().unwrap();
        let wildcard: std::net::SocketAddr = "0.0.0.0:7946".parse().unwrap();
        let advertise = |a: Option<&str>, at| {
            Cluster { peer_listen: "0.0.0.0:7946".into(), peer_advertise: a.map(str::to_owned), ..cluster_settings() }
                .peer_advertise(at)
        };
        assert_eq!(advertise(None, bound), Ok("10.0.3.7:7946".to_owned()));
        assert_eq!(advertise(Some("10.0.3.8"), wildcard), Ok("10.0.3.8:7946".to_owned()), "an IP gets the port");
        assert_eq!(advertise(Some("fd00::7"), wildcard), Ok("[fd00::7]:7946".to_owned()));
        assert_eq!(advertise(Some("roomd-1.roomd"), wildcard), Ok("roomd-1.roomd:7946".to_owned()));
        assert_eq!(advertise(Some("roomd-1.roomd:9000"), wildcard), Ok("roomd-1.roomd:9000".to_owned()));
        assert_eq!(advertise(Some(" "), bound), Ok("10.0.3.7:7946".to_owned()));
        for (setting, why) in [
            (None, "ROOMD__CLUSTER__PEER_ADVERTISE to the host"),
            (Some("0.0.0.0"), "wildcard"),
            (Some("10.0.3.8:0"), "port other than 0"),
            (Some("roomd-1:http"), "port must be a number"),
            (Some("http://roomd-1"), "expected host"),
        ] {
            let refused = advertise(setting, wildcard).expect_err(&format!("{setting:?}"));
            assert!(refused.contains(why), "{setting:?}: {refused}");
        }
    }

    #[test]
    fn peer_links_are_on_by_default_on_the_http_bind_address_and_off_when_said() {
        let listen = |setting: &str, http_bind: &str| {
            Cluster { peer_listen: setting.into(), ..cluster_settings() }.peer_listen_at(http_bind)
        };
        assert_eq!(listen("auto", "127.0.0.1"), Some("127.0.0.1:0".to_owned()));
        assert_eq!(listen(" AUTO ", "::1"), Some("[::1]:0".to_owned()));
        assert_eq!(listen("auto", "[::1]"), Some("[::1]:0".to_owned()));
        assert_eq!(listen("auto", "roomd-1.local"), Some("roomd-1.local:0".to_owned()));
        assert_eq!(listen("auto", "0.0.0.0"), Some("0.0.0.0:0".to_owned()));
        assert_eq!(listen("10.0.3.7:7946", "0.0.0.0"), Some("10.0.3.7:7946".to_owned()));
        assert_eq!(listen("off", "127.0.0.1"), None);
        assert_eq!(listen("", "127.0.0.1"), None);
        // On every address by default, with nothing to advertise: refused, saying what
        // to set (an explicit wildcard says the same in its own words).
        let wildcard: std::net::SocketAddr = "0.0.0.0:41234".parse().unwrap();
        let auto = Cluster { peer_listen: "auto".into(), ..cluster_settings() };
        let refused = auto.peer_advertise(wildcard).unwrap_err();
        assert!(refused.contains("on by default") && refused.contains("PEER_ADVERTISE"), "{refused}");
        assert!(refused.contains("PEER_LISTEN to off"), "{refused}");
        let advertised = Cluster { peer_advertise: Some("10.0.3.8".into()), ..auto };
        assert_eq!(advertised.peer_advertise(wildcard), Ok("10.0.3.8:41234".to_owned()));
        // The shipped default.
        let defaults = Settings::load(None).unwrap();
        assert!(defaults.cluster.peer_links_auto(), "{:?}", defaults.cluster.peer_listen);
    }

    #[test]
    fn a_batch_window_is_at_most_fifty_milliseconds() {
        let cluster = |batch_window_ms| Cluster { batch_window_ms, ..cluster_settings() };
        assert_eq!(cluster(0).batch_window(), Ok(std::time::Duration::ZERO));
        assert_eq!(cluster(2).batch_window(), Ok(std::time::Duration::from_millis(2)));
        assert_eq!(cluster(50).batch_window(), Ok(std::time::Duration::from_millis(50)));
        let refused = cluster(51).batch_window().unwrap_err();
        assert!(refused.contains("ROOMD__CLUSTER__BATCH_WINDOW_MS") && refused.contains("at most 50"), "{refused}");
    }

    fn public(url: &str) -> Result<Option<String>, String> {
        Node { id: None, public_url: Some(url.to_owned()) }.public_url()
    }

    #[test]
    fn a_public_url_is_an_http_base_url_kept_without_its_trailing_slash() {
        assert_eq!(public("http://10.0.3.7:8080/"), Ok(Some("http://10.0.3.7:8080".to_owned())));
        assert_eq!(public("https://rooms.example/n/roomd-1"), Ok(Some("https://rooms.example/n/roomd-1".to_owned())));
        assert_eq!(public("  "), Ok(None));
        assert_eq!(Node::default().public_url(), Ok(None));
    }

    #[test]
    fn a_public_url_that_clients_could_not_use_is_refused_with_its_reason() {
        for (url, why) in [
            ("ws://10.0.3.7:8080", "http:// or https://"),
            ("10.0.3.7:8080", "ROOMD__NODE__PUBLIC_URL"),
            ("http://rooms.example/?node=1", "query"),
            ("http://user:pw@rooms.example", "credentials"),
        ] {
            let refused = public(url).expect_err(url);
            assert!(refused.contains(why), "{url}: {refused}");
        }
    }

    #[test]
    fn an_admin_token_shorter_than_32_characters_is_refused_without_being_echoed() {
        let admin = |token: &str| Admin { token: Some(token.to_owned()), operator: None };
        assert_eq!(Admin::default().token(), Ok(None));
        assert_eq!(admin("").token(), Ok(None), "empty is the same as unset: the admin API is off");
        let refused = admin("0123456789").token().unwrap_err();
        assert!(
            refused.contains("ROOMD__ADMIN__TOKEN is 10 characters") && refused.contains("at least 32"),
            "{refused}"
        );
        assert!(!refused.contains("0123456789"), "the token was echoed: {refused}");
        // Characters, not bytes: 31 Hangul syllables are 93 bytes and still too short.
        assert!(admin(&"가".repeat(31)).token().is_err());
        let long = "0123456789abcdef0123456789abcdef";
        assert_eq!(admin(long).token(), Ok(Some(long)));
    }

    #[test]
    fn the_metrics_listener_is_on_with_a_port_and_binds_like_the_player_port_by_default() {
        let http = Settings::load(None).unwrap().http;
        let metrics = |bind: Option<&str>, port| Metrics { bind: bind.map(str::to_owned), port }.listen(&http);
        assert_eq!(metrics(None, None), Ok(None));
        assert_eq!(metrics(None, Some(9464)), Ok(Some("127.0.0.1:9464".to_owned())));
        assert_eq!(metrics(Some("10.0.0.5"), Some(0)), Ok(Some("10.0.0.5:0".to_owned())));
        let refused = metrics(Some("0.0.0.0"), None).unwrap_err();
        assert!(refused.contains("ROOMD__METRICS__PORT is unset"), "{refused}");
        let refused = metrics(None, Some(http.port)).unwrap_err();
        assert!(refused.contains("is the player port"), "{refused}");
    }
}
