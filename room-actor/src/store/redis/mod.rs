//! `RoomStore` on Redis: a Redis Stream per game for the log (bincode entries), strings
//! for the start entry, snapshot and record, a sorted set per user for `/api/me/games`.
//! A log's ids are `<lease epoch>-<seq>`, so the stream itself refuses an older owner's
//! entry once a new owner fenced it (`redis/lua/fence.lua`); appends are group-committed
//! per thread (per master on a Redis Cluster), checked by a script or sent as bare `XADD`s
//! (`redis/append/`). Finished games expire after 90 days.
//!
//! The connection (`redis/conn.rs`: one Redis or a Redis Cluster) reconnects with
//! backoff after Redis restarts; while Redis is away every call fails with `StoreError::Unavailable` and the
//! room refuses inputs (nothing is acknowledged that is not stored). An append that timed
//! out or lost its connection after it was sent fails with `StoreError::Unknown`: Redis
//! may have stored it, and the room resolves it by retrying the same entry and reading
//! the log back (`room/stall.rs`), never by assuming it failed.
//!
//! Here: the store, its connections and the `RoomStore` verbs. Appends and the fence of
//! a log are in `appends.rs`, replicated acknowledgements in `acks.rs`, the lobby index
//! in `lobby_index.rs`.

mod acks;
mod appends;
mod lobby_index;

pub use lobby_index::LOBBY_ROUNDS;

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::lobby;
use crate::log::{decode, encode, GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use crate::redis::append::Appender;
use crate::redis::conn::{RedisConn, ThreadConns};
use crate::redis::keys::{room_of, Keys};
use crate::redis::target::RedisTarget;
use crate::redis::topology::Topology;
use crate::store::{Fence, RoomStore, StoreFuture};
use acks::Acks;
use engine::PlayerId;
use redis::streams::StreamRangeReply;
use redis::{AsyncCommands, Cmd, RedisError, Script};
use std::sync::Arc;
use std::time::Duration;

/// How long a finished game's log and record are kept.
pub const RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);

#[derive(Clone)]
pub struct RedisStore {
    conn: RedisConn,
    keys: Keys,
    /// `redis/lua/fence.lua`: a node that takes a room over fences its game's log first.
    fence: Arc<Script>,
    /// Replicated acknowledgements (`ROOMD__REDIS__ACK_REPLICAS` > 0).
    acks: Option<Arc<Acks>>,
    /// One Redis or a Redis Cluster, as the target said when the store connected.
    topology: Topology,
    /// How appends reach Redis: group commit (`redis/append/`).
    appends: Arc<Appender>,
    /// A connection per thread for the hot path (appends, the bus publisher): each is
    /// driven by the thread whose rooms use it.
    thread_conns: Arc<ThreadConns>,
}

const FENCE_LUA: &str = include_str!("../../redis/lua/fence.lua");

/// `EVALSHA` of `script` as one pipeline command (a pipeline cannot load a script: on
/// `NOSCRIPT` nothing ran, and the caller loads it and sends the pipeline again).
fn evalsha(script: &Script, keys: &[String], args: &[&[u8]]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn room(game_pk: &str) -> Result<&str, StoreError> {
    room_of(game_pk).ok_or_else(|| StoreError::Corrupt(format!("game pk {game_pk} names no room")))
}

/// A log stream entry's bincode body, `None` for a fence mark (`redis/lua/fence.lua`).
fn entry_body(id: &redis::streams::StreamId) -> Result<Option<Vec<u8>>, StoreError> {
    if let Some(bytes) = id.get::<Vec<u8>>("e") {
        return Ok(Some(bytes));
    }
    if id.map.contains_key("f") {
        return Ok(None);
    }
    Err(StoreError::Corrupt(format!("stream entry {} has no body", id.id)))
}

/// The seq an entry id of a log stands for (`<epoch>-<seq>`, or `0-<seq>` on a Redis
/// Cluster; a fence mark's is the seq of the entry below it).
pub(crate) fn seq_of_id(id: &str) -> Option<u64> {
    id.split_once('-').and_then(|(_, seq)| seq.parse().ok())
}

/// Entries a read-back asks for at once, from the top of the log down.
const FIND_PAGE: usize = 16;

/// The body of the entry of seq `seq` in `log`, whichever owner's epoch its id carries:
/// read from the top down (the entry a room reads back is almost always its last).
async fn find_entry(conn: &mut RedisConn, log: &str, seq: u64) -> Result<Option<Vec<u8>>, StoreError> {
    let mut from = "+".to_owned();
    loop {
        let page: StreamRangeReply = conn.xrevrange_count(log, &from, "-", FIND_PAGE).await.map_err(unavailable)?;
        for id in &page.ids {
            match seq_of_id(&id.id) {
                Some(s) if s == seq => {
                    if let Some(bytes) = entry_body(id)? {
                        return Ok(Some(bytes));
                    }
                }
                Some(s) if s < seq => return Ok(None),
                Some(_) => {}
                None => return Err(StoreError::Corrupt(format!("log entry id {} is not <epoch>-<seq>", id.id))),
            }
        }
        match page.ids.last() {
            Some(last) if page.ids.len() == FIND_PAGE => from = format!("({}", last.id),
            _ => return Ok(None),
        }
    }
}

impl RedisStore {
    /// Connects to one Redis at `url` (`redis://` or `rediss://`, TLS through rustls: a
    /// server's certificate is checked against the system's roots, or those of the PEM
    /// file named by `SSL_CERT_FILE`, a private CA: see the README; `rediss://…/#insecure`
    /// skips the check, tests only) and uses keys under `prefix`.
    pub async fn connect(url: &str, prefix: &str) -> Result<RedisStore, StoreError> {
        RedisStore::connect_to(&RedisTarget::Single(url.to_owned()), prefix).await
    }

    /// Connects to one Redis or a Redis Cluster (with reconnects and backoff) and uses
    /// keys under `prefix`.
    pub async fn connect_to(target: &RedisTarget, prefix: &str) -> Result<RedisStore, StoreError> {
        let conn = target.connect().await?;
        let topology = Topology::of(target);
        let keys = Keys::new(prefix);
        let thread_conns = Arc::new(ThreadConns::new(target.clone()));
        let appends = Arc::new(topology.appender(&thread_conns, &keys));
        Ok(RedisStore {
            conn,
            keys,
            fence: Arc::new(Script::new(FENCE_LUA)),
            acks: None,
            topology,
            appends,
            thread_conns,
        })
    }

    /// Appends wait `window` after the first entry of a batch for more to join it (see
    /// `redis/append/`); zero (the default) sends each batch at once. Call it before
    /// the first append.
    pub fn with_batch_window(mut self, window: Duration) -> RedisStore {
        self.appends = Arc::new(self.appends.windowed(window));
        self
    }

    /// Runs `pipe` (its first command a script's `EVALSHA`) on `conn`, loading the script
    /// first if the server does not know it (then nothing in the pipeline ran).
    pub(crate) async fn with_script<T: redis::FromRedisValue>(
        conn: &RedisConn,
        code: &str,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<T> {
        let mut conn = conn.clone();
        match pipe.query_async(&mut conn).await {
            Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
                // `SCRIPT LOAD` goes to every master of a cluster.
                let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(code).query_async(&mut conn).await?;
                pipe.query_async(&mut conn).await
            }
            other => other,
        }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// One Redis or a Redis Cluster: decided once, when the store connected.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// The connection, shared with the cluster's membership and leases.
    pub fn connection(&self) -> RedisConn {
        self.conn.clone()
    }

    /// How many times the connections of replicated acknowledgements were replaced (a
    /// Redis Cluster's, see [`Acks::counted`]); 0 on one Redis or without `ACK_REPLICAS`.
    pub fn ack_connection_replacements(&self) -> u64 {
        let Some(acks) = &self.acks else { return 0 };
        acks.conns.iter().map(RedisConn::replacements).sum()
    }

    /// The per-thread connections of the hot path (the bus publisher uses them too).
    pub fn thread_conns(&self) -> Arc<ThreadConns> {
        self.thread_conns.clone()
    }

    /// `PING`: is the store reachable (readiness)?
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
    }
}

impl RoomStore for RedisStore {
    fn begin(&self, start: StartEntry) -> StoreFuture<()> {
        let this = self.clone();
        Box::pin(async move {
            let room = room(&start.game_pk)?.to_owned();
            let bytes = encode(&start)?;
            let mut set = redis::cmd("SET");
            set.arg(this.keys.start(&room, &start.game_pk)).arg(bytes).arg("NX");
            let created: bool = match &this.acks {
                None => set.query_async::<Option<String>>(&mut this.conn.clone()).await.map_err(unavailable)?.is_some(),
                Some(acks) => {
                    let mut pipe = redis::pipe();
                    pipe.add_command(set).add_command(acks.wait());
                    let (created, got): (Option<String>, i64) =
                        pipe.query_async(&mut acks.conn(&room)).await.map_err(unavailable)?;
                    if !acks.counted(&room, got) {
                        // The game does not start (its pk is never used again).
                        return Err(StoreError::Unavailable(acks.short("the game's start", got)));
                    }
                    created.is_some()
                }
            };
            if !created {
                return Err(StoreError::Conflict { game_pk: start.game_pk, expected: 0, got: 0 });
            }
            Ok(())
        })
    }

    fn append(&self, game_pk: &str, entry: LogEntry) -> StoreFuture<()> {
        self.append_as(game_pk, entry, &Fence::Sole)
    }

    fn append_as(&self, game_pk: &str, entry: LogEntry, fence: &Fence) -> StoreFuture<()> {
        // A sole writer's token is empty, which the scripts check against nothing; a
        // lease's is checked against the room's lease.
        self.append_fenced(game_pk.to_owned(), entry, fence.token().to_owned())
    }

    fn entry(&self, game_pk: &str, seq: u64) -> StoreFuture<Option<LogEntry>> {
        let this = self.clone();
        let game_pk = game_pk.to_owned();
        Box::pin(async move {
            let room = room(&game_pk)?;
            let mut conn = this.acks.as_ref().map_or_else(|| this.conn.clone(), |acks| acks.conn(room));
            let found = find_entry(&mut conn, &this.keys.log(room, &game_pk), seq).await?;
            if let Some(acks) = &this.acks {
                this.confirm(acks, room, &game_pk).await?;
            }
            found.map(|bytes| decode::<LogEntry>(&bytes)).transpose()
        })
    }

    fn put_room(&self, info: &RoomInfo) -> StoreFuture<()> {
        let this = self.clone();
        let json = serde_json::to_string(info);
        let room_id = info.room_id.clone();
        let ended = info.status == RoomStatus::Ended;
        let (position, lobby) = (lobby::position(info), this.keys.lobby(lobby::bucket(&info.room_id)));
        Box::pin(async move {
            let json = json.map_err(|e| StoreError::Corrupt(e.to_string()))?;
            // The info, the open-room set and the lobby are in three slots on a cluster.
            let writes = if ended {
                vec![
                    Cmd::set_ex(this.keys.meta(&room_id), json, RETENTION.as_secs()),
                    Cmd::srem(this.keys.open_rooms(), &room_id),
                    Cmd::zrem(&lobby, &position),
                ]
            } else {
                vec![
                    Cmd::set(this.keys.meta(&room_id), json),
                    Cmd::sadd(this.keys.open_rooms(), &room_id),
                    Cmd::zadd(&lobby, &position, 0),
                ]
            };
            this.conn.each::<redis::Value>(&writes).await.map(drop).map_err(unavailable)
        })
    }

    fn room(&self, room_id: &str) -> StoreFuture<Option<RoomInfo>> {
        let this = self.clone();
        let room_id = room_id.to_owned();
        Box::pin(async move {
            let mut conn = this.conn.clone();
            let json: Option<String> = conn.get(this.keys.meta(&room_id)).await.map_err(unavailable)?;
            json.map(|j| serde_json::from_str(&j).map_err(|e| StoreError::Corrupt(e.to_string()))).transpose()
        })
    }

    fn open_rooms(&self) -> StoreFuture<Vec<RoomInfo>> {
        let this = self.clone();
        Box::pin(async move {
            let mut conn = this.conn.clone();
            let ids: Vec<String> = conn.smembers(this.keys.open_rooms()).await.map_err(unavailable)?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let json: Option<String> = conn.get(this.keys.meta(&id)).await.map_err(unavailable)?;
                if let Some(info) = json.and_then(|j| serde_json::from_str::<RoomInfo>(&j).ok()) {
                    if info.status != RoomStatus::Ended {
                        out.push(info);
                    }
                }
            }
            Ok(out)
        })
    }

    fn put_snapshot(&self, game_pk: &str, snapshot: Snapshot) -> StoreFuture<()> {
        let this = self.clone();
        let game_pk = game_pk.to_owned();
        Box::pin(async move {
            let room = room(&game_pk)?;
            let mut conn = this.conn.clone();
            conn.set::<_, _, ()>(this.keys.snapshot(room, &game_pk), encode(&snapshot)?).await.map_err(unavailable)
        })
    }

    fn load(&self, game_pk: &str) -> StoreFuture<Option<StoredGame>> {
        let this = self.clone();
        let game_pk = game_pk.to_owned();
        Box::pin(async move {
            let room = room(&game_pk)?;
            let mut conn = this.conn.clone();
            let start: Option<Vec<u8>> = conn.get(this.keys.start(room, &game_pk)).await.map_err(unavailable)?;
            let Some(start) = start else { return Ok(None) };
            let snapshot: Option<Vec<u8>> = conn.get(this.keys.snapshot(room, &game_pk)).await.map_err(unavailable)?;
            let range: StreamRangeReply = conn.xrange_all(this.keys.log(room, &game_pk)).await.map_err(unavailable)?;
            let mut entries = Vec::with_capacity(range.ids.len());
            for id in &range.ids {
                if let Some(bytes) = entry_body(id)? {
                    entries.push(decode::<LogEntry>(&bytes)?);
                }
            }
            if let Some(acks) = &this.acks {
                // A room is rebuilt only from entries the replicas hold.
                this.confirm(acks, room, &game_pk).await?;
            }
            Ok(Some(StoredGame {
                start: decode(&start)?,
                snapshot: snapshot.as_deref().map(decode).transpose()?,
                entries,
            }))
        })
    }

    fn finish(&self, record: GameRecord) -> StoreFuture<()> {
        let this = self.clone();
        Box::pin(async move {
            let room = room(&record.game_pk)?.to_owned();
            let pk = record.game_pk.clone();
            let ttl = RETENTION.as_secs() as i64;
            let mut conn = this.conn.clone();
            let mut pipe = redis::pipe();
            pipe.atomic().set(this.keys.record(&room, &pk), encode(&record)?).ignore();
            for key in [
                this.keys.record(&room, &pk),
                this.keys.start(&room, &pk),
                this.keys.log(&room, &pk),
                this.keys.seq(&room, &pk),
                this.keys.snapshot(&room, &pk),
            ] {
                pipe.expire(key, ttl).ignore();
            }
            pipe.query_async::<()>(&mut conn).await.map_err(unavailable)?;
            // The per-user index lives in the user's slot, so it is written apart from the
            // game's keys; an index entry whose record has expired is skipped on read.
            for player in &record.players {
                let key = this.keys.user_games(player.as_str());
                let mut pipe = redis::pipe();
                pipe.zadd(&key, &pk, record.ended_at).ignore().expire(&key, ttl).ignore();
                pipe.query_async::<()>(&mut conn).await.map_err(unavailable)?;
            }
            Ok(())
        })
    }

    fn record(&self, game_pk: &str) -> StoreFuture<Option<GameRecord>> {
        let this = self.clone();
        let game_pk = game_pk.to_owned();
        Box::pin(async move {
            let Some(room) = room_of(&game_pk) else { return Ok(None) };
            let mut conn = this.conn.clone();
            let bytes: Option<Vec<u8>> = conn.get(this.keys.record(room, &game_pk)).await.map_err(unavailable)?;
            bytes.as_deref().map(decode).transpose()
        })
    }

    fn games_of(&self, player: &PlayerId, before: Option<i64>, limit: usize) -> StoreFuture<Vec<GameRecord>> {
        let this = self.clone();
        let key = self.keys.user_games(player.as_str());
        Box::pin(async move {
            let mut conn = this.conn.clone();
            let max = before.map_or("+inf".to_owned(), |b| format!("({b}"));
            let pks: Vec<String> =
                conn.zrevrangebyscore_limit(&key, max, "-inf", 0, limit as isize).await.map_err(unavailable)?;
            let mut out = Vec::with_capacity(pks.len());
            for pk in pks {
                let Some(room) = room_of(&pk) else { continue };
                let bytes: Option<Vec<u8>> = conn.get(this.keys.record(room, &pk)).await.map_err(unavailable)?;
                if let Some(bytes) = bytes {
                    out.push(decode::<GameRecord>(&bytes)?);
                }
            }
            Ok(out)
        })
    }
}
