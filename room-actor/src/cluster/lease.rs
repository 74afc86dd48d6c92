//! Room ownership leases: `roomd:{room:ID}:lease = node/epoch`. The epoch grows with
//! every claim, and every log append is fenced by it (`redis/lua/append_checked.lua`, and the
//! `<epoch>-<seq>` ids of the fast path), so a node that lost a lease — paused,
//! partitioned, slow — can never append to that room again.
//!
//! A lease is as alive as its node: a room whose holder is no longer a live member (its
//! bus subscription gone, or its heartbeat expired) is taken over at once, with a higher
//! epoch (`take_over`), whatever the lease's TTL. So the TTL is only a backstop that frees
//! the lease of a holder that neither takes it over nor gives it back, and the holder
//! refreshes it rarely ([`Leases::renew`], a plain `PEXPIRE` per room a third of the TTL);
//! what it checks often is that its leases are still its own ([`Leases::verify`], one
//! `MGET` per thousand rooms), so a node that was taken over stops those rooms at once.
//! Renewing by a per-room script every second (a `GET` and a `PEXPIRE` per held room)
//! cost Redis two commands per room per second whether the room was played or idle.

use crate::error::StoreError;
use crate::redis::conn::RedisConn;
use crate::redis::keys::Keys;
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
    release: Script,
}

impl Leases {
    pub fn new(conn: RedisConn, keys: Keys, node: &str, ttl_ms: u64) -> Leases {
        Leases {
            conn,
            keys,
            node: node.to_owned(),
            ttl_ms,
            claim: Script::new(include_str!("../redis/lua/claim.lua")),
            take_over: Script::new(include_str!("../redis/lua/take_over.lua")),
            release: Script::new(include_str!("../redis/lua/release.lua")),
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
    /// cluster, where every room's lease is in a slot of its own: [`RedisConn::get_all`]).
    pub async fn holders(&self, rooms: &[String]) -> Result<Vec<Option<String>>, StoreError> {
        let keys: Vec<String> = rooms.iter().map(|room| self.keys.lease(room)).collect();
        self.conn.get_all(&keys).await.map_err(unavailable)
    }

    /// The held rooms (`(room, token)`) whose lease is no longer this token: taken over
    /// by another node (this one was found dead, or paused past its heartbeat), released,
    /// or lost with a Redis that forgot it. One read per thousand rooms (per shard on a
    /// cluster); nothing is written.
    pub async fn verify(&self, held: &[(String, String)]) -> Result<Vec<String>, StoreError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let rooms: Vec<String> = held.iter().map(|(room, _)| room.clone()).collect();
        let holders = self.holders(&rooms).await?;
        Ok(held
            .iter()
            .zip(holders)
            .filter(|((_, token), holder)| holder.as_deref() != Some(token.as_str()))
            .map(|((room, _), _)| room.clone())
            .collect())
    }

    /// Renews the TTL of leases this node holds; returns the rooms whose lease was lost
    /// ([`Leases::verify`]). The still-held ones get a `PEXPIRE` each, pipelined (per shard
    /// on a cluster). One taken over between the check and its `PEXPIRE` gets its new
    /// holder's TTL again, which that holder would have set anyway: a `PEXPIRE` never
    /// gives a lease to anybody, and fencing is by the token, never by the TTL.
    pub async fn renew(&self, held: &[(String, String)]) -> Result<Vec<String>, StoreError> {
        let lost = self.verify(held).await?;
        let gone: std::collections::HashSet<&str> = lost.iter().map(String::as_str).collect();
        let expires: Vec<redis::Cmd> = held
            .iter()
            .filter(|(room, _)| !gone.contains(room.as_str()))
            .map(|(room, _)| {
                let mut pexpire = redis::cmd("PEXPIRE");
                pexpire.arg(self.keys.lease(room)).arg(self.ttl_ms);
                pexpire
            })
            .collect();
        if !expires.is_empty() {
            let _: Vec<u8> = self.conn.each(&expires).await.map_err(unavailable)?;
        }
        Ok(lost)
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
