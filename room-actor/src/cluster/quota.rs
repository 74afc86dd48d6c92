//! The per-user open-room cap (`ROOMD__ROOMS__MAX_OPEN_PER_USER`) across the cluster.
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
