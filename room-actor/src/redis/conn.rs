//! The node's Redis: one Redis (`ROOMD__REDIS__URL`) or a Redis Cluster
//! (`ROOMD__REDIS__CLUSTER_URLS`), behind one connection type, [`RedisConn`].
//!
//! Everything roomd sends is either a command or script on one room's keys (one hash
//! tag, so one slot: `redis/keys.rs`), a command on one non-room key, or a batch of
//! independent commands, which [`RedisConn::each`] sends as one pipeline to a single Redis
//! and, on a cluster, all at once to each slot's master (the cluster connection pipelines
//! them per node). Nothing roomd runs needs two slots at once, except the group commit
//! of log appends (`redis/append/`), which sends one pipeline per master
//! ([`RedisConn::pipeline_on`]). The bus uses sharded
//! pub/sub on a cluster (`SPUBLISH`/`SSUBSCRIBE`, `cluster/bus.rs`), so a frame goes to
//! one shard only.
//!
//! Both connections reconnect by themselves once their socket is dropped ([`tcp_settings`]:
//! also one that died without closing); the cluster one also follows `MOVED`/`ASK`
//! and refreshes its slot map after a failover or a resharding, and replaces itself when
//! a master hangs ([`ClusterConn`], `redis/cluster.rs`). Every wait is bounded by the
//! timeouts of `redis/target.rs` ([`TIMEOUT`]): a call fails with an error rather than
//! hangs.

use crate::error::StoreError;
pub use crate::redis::cluster::ClusterConn;
use crate::redis::slots::Masters;
use crate::redis::target::{install_tls_provider, tcp_settings, RedisTarget, TIMEOUT};
use futures_util::future::try_join_all;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use tokio::sync::mpsc;

impl RedisTarget {
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

/// Keys one `MGET` reads ([`RedisConn::get_all`] on one Redis).
const KEYS_PER_MGET: usize = 1000;

/// A connection to the node's Redis, shared (cheap to clone; clones multiplex).
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConn),
}

impl RedisConn {
    /// Private: what differs on a cluster beyond the connection is the store's
    /// [`Topology`](crate::redis::topology::Topology), decided once.
    fn is_cluster(&self) -> bool {
        matches!(self, RedisConn::Cluster(_))
    }

    /// The connection's answers suggest it reaches the wrong server: a cluster one is
    /// replaced ([`ClusterConn::suspect`]); one Redis has only the one server to reach.
    pub(crate) fn suspect(&self, why: &str) {
        if let RedisConn::Cluster(conn) = self {
            conn.suspect(why);
        }
    }

    /// The slots' masters as the node last read them: `None` on one Redis (one server
    /// holds every key) and on a cluster before its first read of the map.
    pub(crate) fn masters(&self) -> Option<Arc<Masters>> {
        match self {
            RedisConn::Single(_) => None,
            RedisConn::Cluster(conn) => conn.masters(),
        }
    }

    /// `pipeline` in order on one server: one Redis; on a cluster the master of `slot`,
    /// where every key in it must be ([`ClusterConn::route_pipeline`]). The replies, one
    /// per command (on one Redis a command refused is an error reply in its place; on a
    /// cluster it fails the whole pipeline).
    pub(crate) async fn pipeline_on(&self, slot: u16, pipeline: &Pipeline) -> RedisResult<Vec<Value>> {
        match self {
            RedisConn::Single(conn) => conn.clone().req_packed_commands(pipeline, 0, pipeline.len()).await,
            RedisConn::Cluster(conn) => conn.route_pipeline(slot, pipeline).await,
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

    /// The values of many string keys, in order (`None` where a key is missing), in one
    /// round trip: on one Redis an `MGET` per thousand keys, all in one
    /// pipeline; on a cluster a `GET` each (every key may be in a slot of its own), all at
    /// once (see [`RedisConn::each`]).
    pub async fn get_all(&self, keys: &[String]) -> RedisResult<Vec<Option<String>>> {
        match self {
            RedisConn::Single(_) => {
                let mgets: Vec<Cmd> = keys
                    .chunks(KEYS_PER_MGET)
                    .map(|chunk| {
                        let mut mget = redis::cmd("MGET");
                        for key in chunk {
                            mget.arg(key);
                        }
                        mget
                    })
                    .collect();
                let chunks: Vec<Vec<Option<String>>> = self.each(&mgets).await?;
                Ok(chunks.into_iter().flatten().collect())
            }
            RedisConn::Cluster(_) => {
                let gets: Vec<Cmd> = keys.iter().map(Cmd::get).collect();
                self.each(&gets).await
            }
        }
    }

    /// How many times the connection replaced itself ([`ClusterConn::replacements`]);
    /// one Redis's never does.
    pub fn replacements(&self) -> u64 {
        match self {
            RedisConn::Single(_) => 0,
            RedisConn::Cluster(conn) => conn.replacements(),
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
