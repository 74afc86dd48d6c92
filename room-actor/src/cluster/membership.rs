//! Membership by heartbeat: each node refreshes its entry in a sorted set scored by the
//! time its heartbeat expires; live nodes are the entries whose score is in the future.
//! A draining node stays live (it still owns rooms until they move) but takes no new ones.

use crate::error::StoreError;
use crate::redis::conn::RedisConn;
use crate::redis::keys::Keys;
use redis::{AsyncCommands, RedisError, Script};
use std::collections::HashMap;

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A node as others see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub draining: bool,
    /// Where it takes peer links (`link/`), if it does.
    pub peer: Option<String>,
}

#[derive(Clone)]
pub struct Membership {
    conn: RedisConn,
    keys: Keys,
    ttl_ms: i64,
}

impl Membership {
    pub fn new(conn: RedisConn, keys: Keys, ttl_ms: i64) -> Membership {
        Membership { conn, keys, ttl_ms }
    }

    /// Announces `node` alive until `now_ms + ttl`, with its draining flag.
    pub async fn heartbeat(&self, node: &str, draining: bool, now_ms: i64) -> Result<(), StoreError> {
        self.heartbeat_with(node, draining, None, now_ms).await
    }

    /// [`Self::heartbeat`], advertising where `node` takes peer links (`None`: it does not).
    pub async fn heartbeat_with(
        &self,
        node: &str,
        draining: bool,
        peer: Option<&str>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .zadd(self.keys.nodes(), node, now_ms + self.ttl_ms)
            .ignore()
            .hset(self.keys.draining(), node, u8::from(draining))
            .ignore();
        match peer {
            Some(addr) => pipe.hset(self.keys.node_peers(), node, addr).ignore(),
            None => pipe.hdel(self.keys.node_peers(), node).ignore(),
        };
        pipe
            // Entries that expired long ago are dropped so the set stays small.
            .zrembyscore(self.keys.nodes(), "-inf", now_ms - 60 * self.ttl_ms)
            .ignore();
        pipe.query_async::<()>(&mut conn).await.map_err(unavailable)
    }

    /// Leaves at once (a clean shutdown), instead of waiting for the heartbeat to expire.
    pub async fn leave(&self, node: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.zrem(self.keys.nodes(), node)
            .ignore()
            .hdel(self.keys.draining(), node)
            .ignore()
            .hdel(self.keys.node_peers(), node)
            .ignore();
        pipe.query_async::<()>(&mut conn).await.map_err(unavailable)
    }

    /// Like [`Membership::live`], with each node's heartbeat expiry (ms) and peer link
    /// address, in one round trip.
    pub async fn live_scored(&self, now_ms: i64) -> Result<Vec<(Member, i64)>, StoreError> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("ZRANGE")
            .arg(self.keys.nodes())
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .arg("BYSCORE")
            .arg("WITHSCORES")
            .hgetall(self.keys.draining())
            .hgetall(self.keys.node_peers());
        type Read = (Vec<(String, f64)>, HashMap<String, u8>, HashMap<String, String>);
        let (scored, flags, mut peers): Read = pipe.query_async(&mut conn).await.map_err(unavailable)?;
        let mut out: Vec<(Member, i64)> = scored
            .into_iter()
            .map(|(id, score)| {
                let draining = flags.get(&id) == Some(&1);
                let peer = peers.remove(&id);
                (Member { id, draining, peer }, score as i64)
            })
            .collect();
        out.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        Ok(out)
    }

    /// Removes `node`, found dead while its heartbeat expiry was `seen_score`, unless it
    /// has sent a heartbeat since (then it is alive and stays). `true` if removed.
    pub async fn forget(&self, node: &str, seen_score: i64) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let removed: u8 = Script::new(include_str!("../redis/lua/forget.lua"))
            .key(self.keys.nodes())
            .key(self.keys.draining())
            .key(self.keys.node_peers())
            .arg(node)
            .arg(seen_score)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(removed == 1)
    }

    /// Drops the draining flags, peer addresses and reported stats of node ids
    /// no longer in the node set (which the heartbeat trims of ids silent for 60 heartbeat
    /// TTLs): how many. Atomic, so a node joining meanwhile keeps its entries.
    pub async fn sweep(&self) -> Result<u64, StoreError> {
        let mut conn = self.conn.clone();
        Script::new(include_str!("../redis/lua/sweep.lua"))
            .key(self.keys.nodes())
            .key(self.keys.draining())
            .key(self.keys.node_peers())
            .key(self.keys.node_stats())
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)
    }

    /// Whether `node`'s heartbeat has not expired at `now_ms` (one `ZSCORE`): false for a
    /// node found dead (removed), gone (left) or silent past its heartbeat.
    pub async fn is_live(&self, node: &str, now_ms: i64) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let score: Option<f64> = conn.zscore(self.keys.nodes(), node).await.map_err(unavailable)?;
        Ok(score.is_some_and(|s| s > now_ms as f64))
    }

    /// Nodes whose heartbeat has not expired at `now_ms`, sorted by id, in one round trip
    /// (it was one more per node, for its draining flag: the failover scan reads this
    /// every 750 ms on every node).
    pub async fn live(&self, now_ms: i64) -> Result<Vec<Member>, StoreError> {
        Ok(self.live_scored(now_ms).await?.into_iter().map(|(member, _)| member).collect())
    }
}
