//! Room ownership leases: `roomd:{room:ID}:lease = node/epoch`, with a short TTL renewed
//! by the owner in batches. The epoch grows with every claim, and every log append checks
//! the token (`lua/append.lua`), so a node that lost a lease — paused, partitioned,
//! slow — is fenced: it can never append to that room again.

use crate::error::StoreError;
use crate::keys::Keys;
use crate::redis_conn::RedisConn;
use redis::{RedisError, Script};

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

#[derive(Clone)]
pub struct Leases {
    conn: RedisConn,
    keys: Keys,
    node: String,
    ttl_ms: u64,
    claim: Script,
    take_over: Script,
    renew: Script,
    release: Script,
}

/// Lease keys one `MGET` reads (one Redis).
const HOLDERS_PER_MGET: usize = 1000;

impl Leases {
    pub fn new(conn: RedisConn, keys: Keys, node: &str, ttl_ms: u64) -> Leases {
        Leases {
            conn,
            keys,
            node: node.to_owned(),
            ttl_ms,
            claim: Script::new(include_str!("../lua/claim.lua")),
            take_over: Script::new(include_str!("../lua/take_over.lua")),
            renew: Script::new(include_str!("../lua/renew.lua")),
            release: Script::new(include_str!("../lua/release.lua")),
        }
    }

    /// Claims `room` for this node: the owner token, or `None` if someone holds it.
    pub async fn claim(&self, room: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn.clone();
        self.claim
            .key(self.keys.lease(room))
            .key(self.keys.epoch(room))
            .arg(&self.node)
            .arg(self.ttl_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)
    }

    /// Takes `room`'s lease for this node from `from_holder` (the token the caller saw),
    /// with a higher epoch, so the old holder is fenced: for a node restarted with the
    /// same id (its previous incarnation's leases) or one known to be dead. `None` if the
    /// lease is no longer held with that token. Idempotent in effect: if the answer is
    /// lost, the lease carries this node's id and the next lookup takes it again.
    pub async fn take_over(&self, room: &str, from_holder: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn.clone();
        self.take_over
            .key(self.keys.lease(room))
            .key(self.keys.epoch(room))
            .arg(from_holder)
            .arg(&self.node)
            .arg(self.ttl_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)
    }

    /// The current holders of many rooms' leases, in one round trip (per shard on a
    /// cluster).
    pub async fn holders(&self, rooms: &[String]) -> Result<Vec<Option<String>>, StoreError> {
        if self.conn.is_cluster() {
            // Every room's lease in a slot of its own: a `GET` each, pipelined per shard.
            let gets: Vec<redis::Cmd> = rooms.iter().map(|room| redis::Cmd::get(self.keys.lease(room))).collect();
            return self.conn.each(&gets).await.map_err(unavailable);
        }
        // One Redis: an `MGET` per thousand rooms, all in one pipeline.
        let mgets: Vec<redis::Cmd> = rooms
            .chunks(HOLDERS_PER_MGET)
            .map(|chunk| {
                let mut mget = redis::cmd("MGET");
                for room in chunk {
                    mget.arg(self.keys.lease(room));
                }
                mget
            })
            .collect();
        let chunks: Vec<Vec<Option<String>>> = self.conn.each(&mgets).await.map_err(unavailable)?;
        Ok(chunks.into_iter().flatten().collect())
    }

    /// Renews leases this node holds; returns the rooms whose lease was lost.
    pub async fn renew(&self, held: &[(String, String)]) -> Result<Vec<String>, StoreError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let kept: Vec<u8> = if self.conn.is_cluster() {
            // Each room's lease is in a slot of its own: one script per room, all at once
            // (the cluster connection pipelines them per shard).
            let renewals = held.iter().map(|(room, token)| {
                let mut conn = self.conn.clone();
                let mut invocation = self.renew.prepare_invoke();
                invocation.arg(self.ttl_ms).key(self.keys.lease(room)).arg(token);
                async move { invocation.invoke_async::<Vec<u8>>(&mut conn).await }
            });
            futures_util::future::try_join_all(renewals).await.map_err(unavailable)?.into_iter().flatten().collect()
        } else {
            let mut invocation = self.renew.prepare_invoke();
            invocation.arg(self.ttl_ms);
            for (room, token) in held {
                invocation.key(self.keys.lease(room)).arg(token);
            }
            let mut conn = self.conn.clone();
            invocation.invoke_async(&mut conn).await.map_err(unavailable)?
        };
        Ok(held.iter().zip(kept).filter(|(_, k)| *k == 0).map(|((room, _), _)| room.clone()).collect())
    }

    /// Gives a room up (after its last append) so another node can claim it at once.
    pub async fn release(&self, room: &str, token: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let released: u8 =
            self.release.key(self.keys.lease(room)).arg(token).invoke_async(&mut conn).await.map_err(unavailable)?;
        Ok(released == 1)
    }

    /// The node id in an owner token (`node/epoch`).
    pub fn node_of(token: &str) -> &str {
        token.rsplit_once('/').map_or(token, |(node, _)| node)
    }

    /// The current holder's token, if any.
    pub async fn holder(&self, room: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn.clone();
        redis::cmd("GET").arg(self.keys.lease(room)).query_async(&mut conn).await.map_err(unavailable)
    }
}
