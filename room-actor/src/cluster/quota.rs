//! The per-user caps across the cluster: open rooms hosted
//! (`ROOMD__ROOMS__MAX_OPEN_PER_USER`, [`RoomQuota`]) and seats in rooms that have not
//! started (`ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER`, [`WaitingSeats`]).
//!
//! Each user has a set of the open rooms they host, `<prefix>:user:{ID}:rooms` (the
//! user's hash tag, next to their games index). Creating a room takes a slot with one
//! script (`lua/quota.lua`: check the size and add, atomically), so two nodes creating at
//! the same moment cannot both pass a full cap. Slots are given back lazily: before the
//! check, every room in the set that is closed (ended, gone, or no longer hosted by the
//! user) is removed — whichever node or path closed it — so no close path has to
//! remember to release.

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::keys::Keys;
use crate::redis_conn::RedisConn;
use engine::PlayerId;
use redis::{AsyncCommands, Script};
use std::time::Duration;

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

#[derive(Clone)]
pub struct RoomQuota {
    conn: RedisConn,
    prefix: String,
    keys: Keys,
    take: Script,
}

impl RoomQuota {
    pub fn new(conn: RedisConn, keys: Keys, prefix: &str) -> RoomQuota {
        RoomQuota { conn, prefix: prefix.to_owned(), keys, take: Script::new(include_str!("../lua/quota.lua")) }
    }

    fn key(&self, user: &PlayerId) -> String {
        format!("{}:user:{{{}}}:rooms", self.prefix, user.as_str())
    }

    /// Removes the user's rooms that are no longer open and hosted by them.
    async fn prune(&self, user: &PlayerId) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let key = self.key(user);
        let rooms: Vec<String> = conn.smembers(&key).await.map_err(unavailable)?;
        if rooms.is_empty() {
            return Ok(());
        }
        let gets: Vec<redis::Cmd> = rooms.iter().map(|room| redis::Cmd::get(self.keys.meta(room))).collect();
        let metas: Vec<Option<String>> = self.conn.each(&gets).await.map_err(unavailable)?;
        let closed: Vec<&String> = rooms
            .iter()
            .zip(metas)
            .filter(|(_, meta)| {
                let info = meta.as_deref().and_then(|m| serde_json::from_str::<RoomInfo>(m).ok());
                !info.is_some_and(|i| i.status != RoomStatus::Ended && &i.host == user)
            })
            .map(|(room, _)| room)
            .collect();
        if !closed.is_empty() {
            conn.srem::<_, _, ()>(&key, closed).await.map_err(unavailable)?;
        }
        Ok(())
    }

    /// Counts `room` against `user`'s cap; `false` when they already host `cap` open
    /// rooms anywhere in the cluster.
    pub async fn take(&self, user: &PlayerId, room: &str, cap: usize) -> Result<bool, StoreError> {
        self.prune(user).await?;
        let mut conn = self.conn.clone();
        let taken: u8 =
            self.take.key(self.key(user)).arg(cap).arg(room).invoke_async(&mut conn).await.map_err(unavailable)?;
        Ok(taken == 1)
    }

    /// Gives the slot back (the room was not created after all).
    pub async fn give_back(&self, user: &PlayerId, room: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        conn.srem::<_, _, ()>(self.key(user), room).await.map_err(unavailable)
    }
}

/// The per-user cap on seats in rooms that have not started, across the cluster.
///
/// Each user has a set of the rooms they took a seat in (a room's host sits in it from its
/// creation), `<prefix>:user:{ID}:seated`. A room enters the set before the seat is
/// taken; the check counts the rooms of the set that are still waiting with the user
/// seated and removes the others (left, started, ended, expired, or a seat that was
/// refused after all), so no path that ends a seat has to remember the index, and a
/// check reads the user's few rooms, never the cluster's. The set expires once none of
/// its rooms can still be waiting.
#[derive(Clone)]
pub struct WaitingSeats {
    conn: RedisConn,
    keys: Keys,
    /// How long the set lives after its last change: longer than a room may wait.
    ttl: Duration,
}

impl WaitingSeats {
    /// `waiting_ttl`: how long a room may wait for its start (`ROOMD__ROOMS__WAITING_TTL_S`).
    pub fn new(conn: RedisConn, keys: Keys, waiting_ttl: Duration) -> WaitingSeats {
        WaitingSeats { conn, keys, ttl: waiting_ttl + Duration::from_secs(60) }
    }

    /// Whether `user` may sit in `room` (one they create, or one they join): `false` when
    /// they already sit in `cap` waiting rooms other than it. On `true` the room is in
    /// their set.
    pub async fn take(&self, user: &PlayerId, room: &str, cap: usize) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let key = self.keys.user_seated(user.as_str());
        let rooms: Vec<String> = conn.smembers(&key).await.map_err(unavailable)?;
        let others: Vec<&String> = rooms.iter().filter(|r| r.as_str() != room).collect();
        let gets: Vec<redis::Cmd> = others.iter().map(|r| redis::Cmd::get(self.keys.meta(r))).collect();
        let metas: Vec<Option<String>> = self.conn.each(&gets).await.map_err(unavailable)?;
        let (waiting, done): (Vec<_>, Vec<_>) = others.into_iter().zip(metas).partition(|(_, meta)| {
            let info = meta.as_deref().and_then(|m| serde_json::from_str::<RoomInfo>(m).ok());
            info.is_some_and(|i| i.status == RoomStatus::Waiting && i.seats.iter().any(|s| &s.user_id == user))
        });
        if !done.is_empty() {
            let done: Vec<&String> = done.into_iter().map(|(r, _)| r).collect();
            conn.srem::<_, _, ()>(&key, done).await.map_err(unavailable)?;
        }
        if waiting.len() >= cap {
            return Ok(false);
        }
        let mut pipe = redis::pipe();
        pipe.sadd(&key, room).ignore().expire(&key, self.ttl.as_secs() as i64).ignore();
        pipe.query_async::<()>(&mut conn).await.map_err(unavailable)?;
        Ok(true)
    }
}
