//! The node's Redis: one Redis (`ROOMD__REDIS__URL`) or a Redis Cluster
//! (`ROOMD__REDIS__CLUSTER_URLS`), behind one connection type, [`RedisConn`].
//!
//! Everything roomd sends is either a command or script on one room's keys (one hash
//! tag, so one slot: `redis/keys.rs`), a command on one non-room key, or a batch of
//! independent commands, which [`RedisConn::each`] sends as one pipeline to a single Redis
//! and, on a cluster, all at once to each slot's master (the cluster connection pipelines
//! them per node). Nothing roomd runs needs two slots at once. The bus uses sharded
//! pub/sub on a cluster (`SPUBLISH`/`SSUBSCRIBE`, `cluster/bus.rs`), so a frame goes to
//! one shard only.
//!
//! Both connections reconnect by themselves once their socket is dropped ([`tcp_settings`]:
//! also one that died without closing); the cluster one also follows `MOVED`/`ASK`
//! and refreshes its slot map after a failover or a resharding, and replaces itself when
//! a master hangs ([`ClusterConn`], `redis/cluster.rs`). Every wait is bounded by the
//! timeouts below: a call fails with an error rather than hangs.

use crate::error::StoreError;
pub use crate::redis::cluster::ClusterConn;
use futures_util::future::try_join_all;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long connecting to a Redis, and waiting for one answer, may take.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// How long what a node sent to Redis may go unacknowledged by Redis's host before the
/// kernel drops the connection (`TCP_USER_TIMEOUT`, Linux). A response timeout alone
/// never drops a connection (the client keeps it, and every later command times out on
/// it too), so a connection that died without closing (Redis's pod gone behind a stable
/// Service address, a partition, a NAT that forgot it) would hold a node off Redis until
/// TCP gave up, about 15 minutes later. A Redis that is only slow or paused still
/// acknowledges at the TCP level, so this fires for a dead path only.
pub const USER_TIMEOUT: Duration = Duration::from_secs(5);

/// The TCP settings of every connection to Redis: `TCP_NODELAY` (a small command is
/// sent at once, never held back behind an unanswered one), keepalive (an idle
/// connection whose peer is gone is found within about 5 + 3 × 2 s) and
/// [`USER_TIMEOUT`].
pub fn tcp_settings() -> redis::io::tcp::TcpSettings {
    let keepalive = redis::io::tcp::socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(5))
        .with_interval(Duration::from_secs(2))
        .with_retries(3);
    let settings = redis::io::tcp::TcpSettings::default().set_nodelay(true).set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(USER_TIMEOUT);
    settings
}

/// Where the node's Redis is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis (`redis://` or `rediss://`).
    Single(String),
    /// Seed URLs of a Redis Cluster (any of its nodes; the rest are discovered).
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// The target the operator settings name: `url` (`ROOMD__REDIS__URL`) or
    /// `cluster_urls` (`ROOMD__REDIS__CLUSTER_URLS`, comma-separated), neither (the
    /// embedded node), never both.
    pub fn from_settings(url: Option<&str>, cluster_urls: Option<&str>) -> Result<Option<RedisTarget>, String> {
        let url = url.map(str::trim).filter(|u| !u.is_empty());
        let seeds: Vec<String> = cluster_urls
            .map(|list| list.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        match (url, seeds.is_empty()) {
            (Some(_), false) => Err("ROOMD__REDIS__URL and ROOMD__REDIS__CLUSTER_URLS are both set: set \
                                     ROOMD__REDIS__URL for one Redis or ROOMD__REDIS__CLUSTER_URLS for a Redis \
                                     Cluster, not both"
                .to_owned()),
            (Some(url), true) => Ok(Some(RedisTarget::Single(url.to_owned()))),
            (None, false) => {
                if let Some(bad) = seeds.iter().find(|s| !(s.starts_with("redis://") || s.starts_with("rediss://"))) {
                    return Err(format!(
                        "ROOMD__REDIS__CLUSTER_URLS: {bad:?} is not a redis:// or rediss:// URL (expected a \
                         comma-separated list such as redis://10.0.0.1:6379,redis://10.0.0.2:6379)"
                    ));
                }
                Ok(Some(RedisTarget::Cluster(seeds)))
            }
            (None, true) => {
                if cluster_urls.is_some_and(|c| !c.trim().is_empty()) {
                    return Err("ROOMD__REDIS__CLUSTER_URLS names no URL".to_owned());
                }
                Ok(None)
            }
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisTarget::Cluster(_))
    }

    /// Whether any of its URLs is `rediss://`.
    pub fn uses_tls(&self) -> bool {
        match self {
            RedisTarget::Single(url) => url.starts_with("rediss://"),
            RedisTarget::Cluster(seeds) => seeds.iter().any(|s| s.starts_with("rediss://")),
        }
    }

    /// The operator setting this target came from (for error messages).
    pub fn setting(&self) -> &'static str {
        match self {
            RedisTarget::Single(_) => "ROOMD__REDIS__URL",
            RedisTarget::Cluster(_) => "ROOMD__REDIS__CLUSTER_URLS",
        }
    }

    /// A cluster client for the seeds (`push`: where sharded messages go, for the bus).
    pub fn cluster_client(
        seeds: &[String],
        push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    ) -> RedisResult<ClusterClient> {
        install_tls_provider(seeds.iter().any(|s| s.starts_with("rediss://")));
        let mut builder = ClusterClientBuilder::new(seeds.to_vec())
            .connection_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .retries(3)
            .max_retry_wait(500)
            .tcp_settings(tcp_settings());
        if let Some(push) = push {
            builder = builder.use_protocol(redis::ProtocolVersion::RESP3).push_sender(push);
        }
        builder.build()
    }

    /// Connects (the connection reconnects by itself afterwards).
    pub async fn connect(&self) -> Result<RedisConn, StoreError> {
        let unavailable = |e: redis::RedisError| StoreError::Unavailable(e.to_string());
        match self {
            RedisTarget::Single(url) => {
                install_tls_provider(url.starts_with("rediss://"));
                let client = redis::Client::open(url.as_str()).map_err(unavailable)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(TIMEOUT)
                    .set_response_timeout(TIMEOUT)
                    .set_number_of_retries(3)
                    .set_max_delay(500)
                    .set_tcp_settings(tcp_settings());
                let conn = ConnectionManager::new_with_config(client, config).await.map_err(unavailable)?;
                Ok(RedisConn::Single(conn))
            }
            RedisTarget::Cluster(seeds) => {
                Ok(RedisConn::Cluster(ClusterConn::connect(seeds).await.map_err(unavailable)?))
            }
        }
    }
}

/// rustls needs one process-wide crypto provider for `rediss://`; a second install is
/// refused harmlessly.
pub(crate) fn install_tls_provider(tls: bool) {
    if tls {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A connection to the node's Redis, shared (cheap to clone; clones multiplex).
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConn),
}

impl RedisConn {
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConn::Cluster(_))
    }

    /// The connection's answers suggest it reaches the wrong server: a cluster one is
    /// replaced ([`ClusterConn::suspect`]); one Redis has only the one server to reach.
    pub(crate) fn suspect(&self, why: &str) {
        if let RedisConn::Cluster(conn) = self {
            conn.suspect(why);
        }
    }

    /// Independent commands (neither atomic together nor ordered among themselves),
    /// answered in order: one pipeline to a single Redis; on a cluster each goes to its
    /// slot's master, all at once.
    pub async fn each<T: FromRedisValue>(&self, cmds: &[Cmd]) -> RedisResult<Vec<T>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            RedisConn::Single(_) => {
                let mut pipe = Pipeline::with_capacity(cmds.len());
                for cmd in cmds {
                    pipe.add_command(cmd.clone());
                }
                pipe.query_async(&mut self.clone()).await
            }
            RedisConn::Cluster(_) => {
                try_join_all(cmds.iter().map(|cmd| {
                    let mut conn = self.clone();
                    async move { cmd.query_async::<T>(&mut conn).await }
                }))
                .await
            }
        }
    }

    /// Publishes on a bus channel: `PUBLISH`, or `SPUBLISH` (to the channel's shard only)
    /// on a cluster. How many subscribers heard it.
    pub async fn publish(&self, channel: &str, bytes: Vec<u8>) -> RedisResult<i64> {
        let verb = if self.is_cluster() { "SPUBLISH" } else { "PUBLISH" };
        redis::cmd(verb).arg(channel).arg(bytes).query_async(&mut self.clone()).await
    }

    /// Subscribers of each bus channel, in order (`PUBSUB NUMSUB`, or `SHARDNUMSUB`
    /// summed over the masters on a cluster).
    pub async fn subscribers(&self, channels: &[String]) -> RedisResult<Vec<i64>> {
        if channels.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("PUBSUB");
        cmd.arg(if self.is_cluster() { "SHARDNUMSUB" } else { "NUMSUB" });
        for channel in channels {
            cmd.arg(channel);
        }
        let pairs: Vec<(String, i64)> = cmd.query_async(&mut self.clone()).await?;
        // A cluster's answer is combined from every master, in no particular order.
        let counts: std::collections::HashMap<String, i64> = pairs.into_iter().collect();
        Ok(channels.iter().map(|c| counts.get(c).copied().unwrap_or(0)).collect())
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(conn) => conn.req_packed_command(cmd),
            RedisConn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(conn) => conn.get_db(),
            RedisConn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Connections to one Redis target, one per thread that asks, each made on (and so driven
/// by) the thread that uses it. A node's hot path runs on its HTTP workers (rooms, sockets,
/// the bus); a connection driven by another thread would hand every command there and
/// every answer back, two context switches per round trip. Shared by the group commit of
/// appends and the bus publisher, so a thread's appends and frames that are queued together
/// leave in one write.
///
/// A thread's connection is forgotten with the runtime it was made on (a stopped actix
/// system, a test's runtime): the next call on that thread makes a new one.
pub struct ThreadConns {
    target: RedisTarget,
    conns: Mutex<crate::FastMap<ThreadId, (RedisConn, mpsc::UnboundedSender<()>)>>,
}

impl ThreadConns {
    pub fn new(target: RedisTarget) -> ThreadConns {
        ThreadConns { target, conns: Mutex::default() }
    }

    /// This thread's connection, made now if it has none (or its runtime is gone).
    pub async fn get(&self) -> Result<RedisConn, StoreError> {
        let thread = std::thread::current().id();
        let poisoned = || StoreError::Unavailable("the per-thread Redis connections are poisoned".into());
        if let Some((conn, alive)) = self.conns.lock().map_err(|_| poisoned())?.get(&thread) {
            if !alive.is_closed() {
                return Ok(conn.clone());
            }
        }
        let conn = self.target.connect().await?;
        // A task that only waits: it is dropped with this thread's runtime, which closes
        // `alive` and so retires the connection (whose driver went with the runtime).
        let (alive, mut gone) = mpsc::unbounded_channel::<()>();
        tokio::spawn(async move { while gone.recv().await.is_some() {} });
        let mut conns = self.conns.lock().map_err(|_| poisoned())?;
        conns.retain(|_, (_, alive)| !alive.is_closed());
        conns.insert(thread, (conn.clone(), alive));
        Ok(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_name_one_redis_a_cluster_or_neither_never_both() {
        assert_eq!(RedisTarget::from_settings(None, None), Ok(None));
        assert_eq!(RedisTarget::from_settings(Some(""), Some(" ")), Ok(None));
        assert_eq!(
            RedisTarget::from_settings(Some("redis://127.0.0.1:6380/"), None),
            Ok(Some(RedisTarget::Single("redis://127.0.0.1:6380/".into())))
        );
        assert_eq!(
            RedisTarget::from_settings(None, Some("redis://10.0.0.1:7000, rediss://10.0.0.2:7000,")),
            Ok(Some(RedisTarget::Cluster(vec!["redis://10.0.0.1:7000".into(), "rediss://10.0.0.2:7000".into()])))
        );
        let both = RedisTarget::from_settings(Some("redis://a/"), Some("redis://b:7000")).unwrap_err();
        assert!(both.contains("both set"), "{both}");
        let bad = RedisTarget::from_settings(None, Some("10.0.0.1:7000")).unwrap_err();
        assert!(bad.contains("not a redis:// or rediss:// URL"), "{bad}");
        assert_eq!(RedisTarget::from_settings(None, Some(",,")), Err("ROOMD__REDIS__CLUSTER_URLS names no URL".into()));
    }

    #[test]
    fn a_target_uses_tls_when_any_of_its_urls_is_rediss() {
        assert!(!RedisTarget::Single("redis://10.0.0.1:6379/".into()).uses_tls());
        assert!(RedisTarget::Single("rediss://10.0.0.1:6379/".into()).uses_tls());
        assert!(RedisTarget::Cluster(vec!["redis://a:7000".into(), "rediss://b:7000".into()]).uses_tls());
        assert!(!RedisTarget::Cluster(vec!["redis://a:7000".into()]).uses_tls());
    }
}
