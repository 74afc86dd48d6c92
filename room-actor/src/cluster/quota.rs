//! The per-user caps across the cluster: open rooms hosted
//! (`ROOMD__ROOMS__MAX_OPEN_PER_USER`, [`RoomQuota`]), seats in rooms that have not
//! started (`ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER`, [`WaitingSeats`]) and open
//! WebSockets (`ROOMD__WS__MAX_SOCKETS_PER_USER`, [`UserSockets`]).
//!
//! Each user has a set of the open rooms they host, `<prefix>:user:{ID}:rooms` (the
//! user's hash tag, next to their games index). Creating a room takes a slot with one
//! script (`redis/lua/quota.lua`: check the size and add, atomically), so two nodes creating at
//! the same moment cannot both pass a full cap. Slots are given back lazily: before the
//! check, every room in the set that is closed (ended, gone, or no longer hosted by the
//! user) is removed — whichever node or path closed it — so no close path has to
//! remember to release.

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::redis::conn::RedisConn;
use crate::redis::keys::Keys;
use engine::PlayerId;
use redis::{AsyncCommands, Script};
use std::sync::{Arc, RwLock};
use std::time::Duration;

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

#[derive(Clone)]
pub struct RoomQuota {
    conn: RedisConn,
    keys: Keys,
    take: Script,
}

impl RoomQuota {
    pub fn new(conn: RedisConn, keys: Keys) -> RoomQuota {
        RoomQuota { conn, keys, take: Script::new(include_str!("../redis/lua/quota.lua")) }
    }

    fn key(&self, user: &PlayerId) -> String {
        self.keys.user_rooms(user.as_str())
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

/// The per-user cap on open WebSockets, across the cluster.
///
/// Each user has a hash `<prefix>:user:{ID}:sockets` with one field per node: how many of
/// the user's sockets are open there. Opening one is a script (`redis/lua/sockets_open.lua`) that
/// sums the fields of the live nodes and adds one to this node's field if the sum is under
/// the cap; closing one takes it off again (`redis/lua/sockets_close.lua`): one round trip each,
/// nothing per message. Fields of nodes that are not live are not counted, so the sockets
/// of a node that died do not lock its users out; a node restarted with the same id zeroes
/// its old fields first ([`UserSockets::forget_previous`]), from the set of users it
/// counted (`<prefix>:node:<id>:socket-users`). Both expire [`SOCKETS_TTL`] after their last
/// change: a count can only outlive its sockets by that much (a close that never reached
/// Redis), and a user whose sockets stay open and unchanged that long is undercounted.
#[derive(Clone)]
pub struct UserSockets {
    conn: RedisConn,
    keys: Keys,
    node: String,
    open: Script,
    close: Script,
    /// The other live nodes, as the failure detector last read them (every 100 ms).
    live: Arc<RwLock<Arc<[String]>>>,
}

/// How long a user's socket counts (and a node's set of users) live after their last
/// change.
pub const SOCKETS_TTL: Duration = Duration::from_secs(24 * 3600);

/// Users whose field a restarted node zeroes per batch.
const FORGET_BATCH: usize = 500;

impl UserSockets {
    pub fn new(conn: RedisConn, keys: Keys, node: &str) -> UserSockets {
        UserSockets {
            conn,
            keys,
            node: node.to_owned(),
            open: Script::new(include_str!("../redis/lua/sockets_open.lua")),
            close: Script::new(include_str!("../redis/lua/sockets_close.lua")),
            live: Arc::new(RwLock::new(Arc::from(Vec::new()))),
        }
    }

    /// The live nodes (this one may be among them) whose counts are summed.
    pub fn set_live(&self, nodes: impl IntoIterator<Item = String>) {
        let nodes: Arc<[String]> = nodes.into_iter().filter(|n| n != &self.node).collect();
        if let Ok(mut live) = self.live.write() {
            *live = nodes;
        }
    }

    /// Counts one more socket of `user` on this node; `false` (nothing counted) when they
    /// already have `cap` open on the live nodes.
    pub async fn open(&self, user: &PlayerId, cap: usize) -> Result<bool, StoreError> {
        let live = self.live.read().map(|l| l.clone()).unwrap_or_else(|_| Arc::from(Vec::new()));
        let mut invocation = self.open.key(self.keys.user_sockets(user.as_str()));
        invocation.arg(&self.node).arg(cap).arg(SOCKETS_TTL.as_millis() as u64);
        for node in live.iter() {
            invocation.arg(node);
        }
        let users = self.keys.node_socket_users(&self.node);
        let mut remember = redis::pipe();
        remember.sadd(&users, user.as_str()).ignore().pexpire(&users, SOCKETS_TTL.as_millis() as i64).ignore();
        let (mut a, mut b) = (self.conn.clone(), self.conn.clone());
        // The user joins this node's set whether or not the socket is counted (a user in
        // the set without a count costs one `HDEL` at a restart), so both go at once.
        let (opened, remembered) =
            tokio::join!(invocation.invoke_async::<u8>(&mut a), remember.query_async::<()>(&mut b));
        remembered.map_err(unavailable)?;
        Ok(opened.map_err(unavailable)? == 1)
    }

    /// Counts one socket of `user` on this node less.
    pub async fn close(&self, user: &PlayerId) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let left: i64 = self
            .close
            .key(self.keys.user_sockets(user.as_str()))
            .arg(&self.node)
            .arg(SOCKETS_TTL.as_millis() as u64)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        if left == 0 {
            conn.srem::<_, _, ()>(self.keys.node_socket_users(&self.node), user.as_str()).await.map_err(unavailable)?;
        }
        Ok(())
    }

    /// Zeroes this node id's count in every user hash it wrote: call it before the node
    /// serves, when its sockets of a previous run (the same node id, restarted) are gone.
    /// How many users it had counted.
    pub async fn forget_previous(&self) -> Result<usize, StoreError> {
        let mut conn = self.conn.clone();
        let key = self.keys.node_socket_users(&self.node);
        let users: Vec<String> = conn.smembers(&key).await.map_err(unavailable)?;
        for batch in users.chunks(FORGET_BATCH) {
            let hdels: Vec<redis::Cmd> =
                batch.iter().map(|user| redis::Cmd::hdel(self.keys.user_sockets(user), &self.node)).collect();
            self.conn.each::<()>(&hdels).await.map_err(unavailable)?;
        }
        conn.del::<_, ()>(&key).await.map_err(unavailable)?;
        Ok(users.len())
    }
}
