//! `RoomStore` on Redis: a Redis Stream per game for the log (bincode entries), strings
//! for the start entry, snapshot and record, a sorted set per user for `/api/me/games`.
//! A log's ids are `<lease epoch>-<seq>`, so the stream itself refuses an older owner's
//! entry once a new owner fenced it (`redis/lua/fence.lua`); appends are group-committed
//! per thread, checked by a script or sent as bare `XADD`s (`redis/append.rs`; one script
//! per append on a Redis Cluster, `redis/lua/append.lua`). Finished games expire after 90
//! days.
//!
//! The connection (`redis/conn.rs`: one Redis or a Redis Cluster) reconnects with
//! backoff after Redis restarts; while Redis is away every call fails with `StoreError::Unavailable` and the
//! room refuses inputs (nothing is acknowledged that is not stored). An append that timed
//! out or lost its connection after it was sent fails with `StoreError::Unknown`: Redis
//! may have stored it, and the room resolves it by retrying the same entry and reading
//! the log back (`room/stall.rs`), never by assuming it failed.

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::lobby::{self, LobbyFilter};
use crate::log::{decode, encode, GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use crate::redis::append::{Appended, Replicated};
use crate::redis::conn::{RedisConn, ThreadConns};
use crate::redis::keys::{room_of, Keys};
use crate::redis::target::RedisTarget;
use crate::redis::topology::{Appends, Topology};
use crate::store::{Fence, RoomStore, StoreFuture};
use engine::PlayerId;
use redis::streams::StreamRangeReply;
use redis::{AsyncCommands, Cmd, RedisError, Script};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a finished game's log and record are kept.
pub const RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);

#[derive(Clone)]
pub struct RedisStore {
    conn: RedisConn,
    keys: Keys,
    /// Shared, like the rest: an append on a Redis Cluster clones the store into its future.
    append: Arc<Script>,
    /// `redis/lua/fence.lua`: a node that takes a room over fences its game's log first.
    fence: Arc<Script>,
    /// Replicated acknowledgements (`ROOMD__REDIS__ACK_REPLICAS` > 0).
    acks: Option<Arc<Acks>>,
    /// One Redis or a Redis Cluster, as the target said when the store connected.
    topology: Topology,
    /// How appends reach Redis, as the topology chose: group commit (`redis/append.rs`),
    /// or one script per entry.
    appends: Appends,
    /// A connection per thread for the hot path (appends, the bus publisher): each is
    /// driven by the thread whose rooms use it.
    thread_conns: Arc<ThreadConns>,
}

/// How many replicas must hold a write before it counts (`WAIT`), and the connections
/// that wait. `WAIT` blocks the connection it is sent on, so the writes that wait for
/// replicas (a game's start and its log appends) go through connections of their own,
/// never the shared one that carries leases and heartbeats; a room always uses the same
/// one, so its writes stay in order.
#[derive(Clone)]
struct Acks {
    replicas: u32,
    timeout_ms: u64,
    conns: std::sync::Arc<[RedisConn]>,
    /// `WAIT`s in a row that counted too few replicas, per connection.
    shorts: std::sync::Arc<[AtomicU32]>,
    touch: Script,
}

/// Connections for writes that wait for replicas.
const ACK_CONNECTIONS: usize = 4;

/// After this many `WAIT`s in a row on one connection count too few replicas, a Redis
/// Cluster connection is replaced ([`RedisConn::suspect`]): replicas that are linked
/// are counted within a `WAIT`'s timeout, so shorts that go on may be a connection that
/// reaches the wrong server. Replaced or not, the writes keep being refused until the
/// replicas count (level-triggered: nothing here assumes why).
const SUSPECT_AFTER_SHORTS: u32 = 3;

impl Acks {
    fn index(&self, room: &str) -> usize {
        let i = room.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b)));
        i % self.conns.len()
    }

    fn conn(&self, room: &str) -> RedisConn {
        self.conns[self.index(room)].clone()
    }

    /// A `WAIT` on `room`'s connection counted `got` replicas: whether that is enough.
    /// Too few [`SUSPECT_AFTER_SHORTS`] times in a row on a connection has it replaced.
    fn counted(&self, room: &str, got: i64) -> bool {
        let i = self.index(room);
        if got >= i64::from(self.replicas) {
            self.shorts[i].store(0, Ordering::Relaxed);
            return true;
        }
        if self.shorts[i].fetch_add(1, Ordering::Relaxed) + 1 >= SUSPECT_AFTER_SHORTS {
            self.shorts[i].store(0, Ordering::Relaxed);
            self.conns[i].suspect(&format!(
                "{SUSPECT_AFTER_SHORTS} WAITs in a row counted fewer than the {} replicas asked for",
                self.replicas
            ));
        }
        false
    }

    fn wait(&self) -> Cmd {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.replicas).arg(self.timeout_ms);
        wait
    }

    /// Why `got` replicas are not enough.
    fn short(&self, what: &str, got: i64) -> String {
        format!(
            "{what} reached {got} of the {} replicas ROOMD__REDIS__ACK_REPLICAS asks for within {} ms",
            self.replicas, self.timeout_ms
        )
    }
}

const APPEND_LUA: &str = include_str!("../redis/lua/append.lua");
const FENCE_LUA: &str = include_str!("../redis/lua/fence.lua");
const TOUCH_LUA: &str = include_str!("../redis/lua/touch.lua");

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

/// An append's outcome as the store reports it.
fn outcome(appended: Appended, game_pk: String, seq: u64) -> Result<(), StoreError> {
    match appended {
        Appended::Stored => Ok(()),
        Appended::Fenced => Err(StoreError::Fenced),
        Appended::Conflict { last } => Err(StoreError::Conflict { game_pk, expected: last + 1, got: seq }),
    }
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

/// The seq an entry id of a log stands for (`<epoch>-<seq>`, `0-<seq>` in the legacy
/// layout; a fence mark's is the seq of the entry below it).
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

/// Index reads one lobby call may make before it answers a short page (a filter that
/// admits few rooms).
pub const LOBBY_ROUNDS: usize = 4;

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
        let keys = topology.keys(prefix);
        let thread_conns = Arc::new(ThreadConns::new(target.clone()));
        let appends = topology.appends(&thread_conns, &keys);
        Ok(RedisStore {
            conn,
            keys,
            append: Arc::new(Script::new(APPEND_LUA)),
            fence: Arc::new(Script::new(FENCE_LUA)),
            acks: None,
            topology,
            appends,
            thread_conns,
        })
    }

    /// From now on a game's start and every log append count only once `replicas`
    /// replicas hold them (`WAIT replicas timeout_ms`); `0` turns that off. A write the
    /// replicas did not confirm in time is reported as [`StoreError::Unknown`] (it is on
    /// the master, and may vanish in a failover), so the room answers `room_unavailable`
    /// and tries again until they do; reading a log back (`entry`, `load`) confirms what
    /// it read the same way before it answers, so nothing a room shows was unreplicated.
    pub async fn with_acks(
        mut self,
        target: &RedisTarget,
        replicas: u32,
        timeout_ms: u64,
    ) -> Result<RedisStore, StoreError> {
        if replicas == 0 {
            self.acks = None;
            return Ok(self);
        }
        let mut conns = Vec::with_capacity(ACK_CONNECTIONS);
        for _ in 0..ACK_CONNECTIONS {
            conns.push(target.connect().await?);
        }
        let shorts = (0..ACK_CONNECTIONS).map(|_| AtomicU32::new(0)).collect();
        let acks = Acks {
            replicas,
            timeout_ms: timeout_ms.max(1),
            conns: conns.into(),
            shorts,
            touch: Script::new(TOUCH_LUA),
        };
        // The batches' `WAIT` blocks the connection it is sent on: one of their own.
        let for_short = acks.clone();
        let replicated = Replicated {
            replicas,
            wait: acks.wait(),
            short: Arc::new(move |got| for_short.short("the batch of entries", got)),
        };
        self.appends = self.appends.replicated(target, replicated);
        self.acks = Some(Arc::new(acks));
        Ok(self)
    }

    /// Appends wait `window` after the first entry of a batch for more to join it (see
    /// `redis/append.rs`); zero (the default) sends each batch at once. Call it before
    /// the first append. A Redis Cluster sends each append on its own: no window there.
    pub fn with_batch_window(mut self, window: Duration) -> RedisStore {
        self.appends = self.appends.windowed(window);
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

    /// Confirms that `replicas` replicas hold everything the room's master held before
    /// this call (a replicated no-op write on the room's slot, then `WAIT`).
    async fn confirm(&self, acks: &Acks, room: &str, game_pk: &str) -> Result<(), StoreError> {
        let seq = self.keys.seq(room, game_pk);
        let mut pipe = redis::pipe();
        pipe.add_command(evalsha(&acks.touch, std::slice::from_ref(&seq), &[])).ignore().add_command(acks.wait());
        let (got,): (i64,) = RedisStore::with_script(&acks.conn(room), TOUCH_LUA, &pipe).await.map_err(unavailable)?;
        if !acks.counted(room, got) {
            return Err(StoreError::Unavailable(acks.short("the log read back", got)));
        }
        Ok(())
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

    /// One lobby page after `cursor` (see `lobby.rs`): up to `limit` open rooms `filter`
    /// admits, newest first, and the next page's cursor when more may remain. Reads
    /// `limit` index entries per bucket (one pipeline) and the rooms among the first
    /// `limit` of them (one more), at most [`LOBBY_ROUNDS`] times when the filter leaves a
    /// page short; then the page is answered short, with a cursor to go on from. Index
    /// entries whose room ended or expired are removed on the way.
    pub async fn lobby_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
        filter: &LobbyFilter,
    ) -> Result<(Vec<RoomInfo>, Option<String>), StoreError> {
        let limit = limit.clamp(1, lobby::MAX_PAGE);
        let mut after = cursor.map(str::to_owned);
        let mut page = Vec::new();
        for _ in 0..LOBBY_ROUNDS {
            let from = after.as_ref().map_or_else(|| "-".to_owned(), |c| format!("({c}"));
            let ranges: Vec<Cmd> = (0..lobby::BUCKETS)
                .map(|b| {
                    let mut range = redis::cmd("ZRANGE");
                    range.arg(self.keys.lobby(b)).arg(&from).arg("+").arg("BYLEX").arg("LIMIT").arg(0).arg(limit);
                    range
                })
                .collect();
            let buckets: Vec<Vec<String>> = self.conn.each(&ranges).await.map_err(unavailable)?;
            let full_bucket = buckets.iter().any(|b| b.len() >= limit);
            let mut next: Vec<String> = buckets.into_iter().flatten().collect();
            next.sort();
            let truncated = next.len() > limit;
            next.truncate(limit);
            let gets: Vec<Cmd> = next
                .iter()
                .map(|position| Cmd::get(self.keys.meta(lobby::room_of_position(position).unwrap_or_default())))
                .collect();
            let metas: Vec<Option<String>> = self.conn.each(&gets).await.map_err(unavailable)?;
            let (mut stale, mut filled) = (Vec::new(), None);
            for (i, (position, meta)) in next.iter().zip(metas).enumerate() {
                match meta.and_then(|j| serde_json::from_str::<RoomInfo>(&j).ok()) {
                    Some(info) if info.status != RoomStatus::Ended => {
                        if filter.admits(&info) {
                            page.push(info);
                        }
                    }
                    _ => stale.push(position),
                }
                if page.len() == limit {
                    filled = Some(i);
                    break;
                }
            }
            self.unindex(&stale).await;
            if let Some(i) = filled {
                // Full: more remain if this was not the last entry there is.
                let more = i + 1 < next.len() || truncated || full_bucket;
                return Ok((page, more.then(|| next[i].clone())));
            }
            if !(truncated || full_bucket) {
                return Ok((page, None));
            }
            after = next.last().cloned();
        }
        Ok((page, after))
    }

    /// Drops lobby index entries whose room ended or expired (best effort: a later page
    /// finds them again).
    async fn unindex(&self, positions: &[&String]) {
        if positions.is_empty() {
            return;
        }
        let removals: Vec<Cmd> = positions
            .iter()
            .map(|position| {
                let room = lobby::room_of_position(position).unwrap_or_default();
                Cmd::zrem(self.keys.lobby(lobby::bucket(room)), position.as_str())
            })
            .collect();
        let _ = self.conn.each::<i64>(&removals).await;
    }

    /// Puts every open room into the lobby index once (rooms an older roomd created are
    /// only in the set of open rooms); later changes keep it up to date (`put_room`).
    pub async fn index_lobby(&self) -> Result<usize, StoreError> {
        let mut conn = self.conn.clone();
        let done: Option<String> = conn.get(self.keys.lobby_indexed()).await.map_err(unavailable)?;
        if done.is_some() {
            return Ok(0);
        }
        let ids: Vec<String> = conn.smembers(self.keys.open_rooms()).await.map_err(unavailable)?;
        let mut indexed = 0;
        for chunk in ids.chunks(500) {
            let gets: Vec<Cmd> = chunk.iter().map(|id| Cmd::get(self.keys.meta(id))).collect();
            let metas: Vec<Option<String>> = self.conn.each(&gets).await.map_err(unavailable)?;
            let adds: Vec<Cmd> = metas
                .into_iter()
                .flatten()
                .filter_map(|j| serde_json::from_str::<RoomInfo>(&j).ok())
                .filter(|info| info.status != RoomStatus::Ended)
                .map(|info| Cmd::zadd(self.keys.lobby(lobby::bucket(&info.room_id)), lobby::position(&info), 0))
                .collect();
            indexed += adds.len();
            self.conn.each::<i64>(&adds).await.map_err(unavailable)?;
        }
        conn.set::<_, _, ()>(self.keys.lobby_indexed(), "1").await.map_err(unavailable)?;
        Ok(indexed)
    }

    /// `PING`: is the store reachable (readiness)?
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
    }

    /// Appends as the holder of `token` (`node/epoch`); `Fenced` if the lease is someone
    /// else's. With group commit the entry joins the calling thread's queue before this
    /// returns (inside a Tokio runtime), and the future only waits for its batch: it holds
    /// neither the store nor the single-append path's state.
    pub fn append_fenced(&self, game_pk: String, entry: LogEntry, token: String) -> StoreFuture<()> {
        let seq = entry.seq;
        match &self.appends {
            Appends::Grouped(appender) if tokio::runtime::Handle::try_current().is_ok() => {
                let queued = room(&game_pk)
                    .and_then(|room| Ok((room, encode(&entry)?)))
                    .and_then(|(room, bytes)| appender.enqueue(&self.keys, room, &game_pk, seq, bytes, token));
                Box::pin(async move { outcome(queued?.outcome().await?, game_pk, seq) })
            }
            // Asked outside a runtime: queued when first polled, which is inside one.
            Appends::Grouped(_) => {
                let this = self.clone();
                Box::pin(async move { this.append_fenced(game_pk, entry, token).await })
            }
            Appends::OneByOne => {
                let this = self.clone();
                Box::pin(async move {
                    let room = room(&game_pk)?;
                    let bytes = encode(&entry)?;
                    outcome(this.append_one(room, &game_pk, seq, bytes, token).await?, game_pk, seq)
                })
            }
        }
    }

    /// One append as its own `EVALSHA` (a Redis Cluster: each room's keys are in its slot).
    async fn append_one(
        &self,
        room: &str,
        game_pk: &str,
        seq: u64,
        bytes: Vec<u8>,
        token: String,
    ) -> Result<Appended, StoreError> {
        let keys = [self.keys.log(room, game_pk), self.keys.seq(room, game_pk), self.keys.lease(room)];
        let result: Result<(), RedisError> = match &self.acks {
            None => {
                let mut conn = self.thread_conns.get().await?;
                self.append.key(&keys[..]).arg(seq).arg(bytes).arg(token).invoke_async::<u64>(&mut conn).await.map(drop)
            }
            Some(acks) => {
                let seq = seq.to_string();
                let mut pipe = redis::pipe();
                pipe.add_command(evalsha(&self.append, &keys, &[seq.as_bytes(), &bytes, token.as_bytes()]))
                    .ignore()
                    .add_command(acks.wait());
                match RedisStore::with_script(&acks.conn(room), APPEND_LUA, &pipe).await {
                    // Stored on the master, not (yet) on enough replicas: not acknowledged.
                    // The room retries the same entry, which the log then already has.
                    Ok((got,)) if !acks.counted(room, got) => {
                        return Err(StoreError::Unknown(acks.short("the entry", got)));
                    }
                    replicated => replicated.map(|(_,): (i64,)| ()),
                }
            }
        };
        match result {
            Ok(()) => Ok(Appended::Stored),
            Err(e) if e.code() == Some("FENCED") => Ok(Appended::Fenced),
            Err(e) if e.code() == Some("CONFLICT") => {
                let last = e.detail().and_then(|d| d.trim().parse::<u64>().ok());
                last.map(|last| Appended::Conflict { last }).ok_or_else(|| StoreError::Unknown(e.to_string()))
            }
            // Refused before anything was sent: certainly not stored.
            Err(e) if e.is_connection_refusal() => Err(unavailable(e)),
            // A timeout, a dropped connection, a failover: the script may have run.
            Err(e) => Err(StoreError::Unknown(e.to_string())),
        }
    }

    /// Batches of appends sent and the entries in them (`None` on a Redis Cluster, which
    /// sends each append on its own).
    pub fn append_batches(&self) -> Option<(u64, u64)> {
        self.appends.batches()
    }

    /// Entries appended on the fast path (a bare `XADD`, `redis/append.rs`) since start.
    pub fn fast_appends(&self) -> Option<u64> {
        self.appends.fast()
    }

    /// Every node of the cluster writes the epoch layout of logs (`Keys::log_layout`):
    /// appends may take the fast path from now on. A Redis Cluster keeps its checked
    /// append per entry (nothing changes there).
    pub fn open_fast_path(&self) {
        self.appends.open_fast_path();
    }

    pub fn fast_path_open(&self) -> bool {
        self.appends.fast_path_open()
    }

    /// Whether the appends have a fast path still to open (one Redis, until every node
    /// writes the epoch layout of logs; never on a Redis Cluster, which has none).
    pub fn awaits_fast_path(&self) -> bool {
        self.appends.awaits_fast_path()
    }

    /// Fences `game_pk`'s log for the holder of `token`, a node that has just taken the
    /// room: no older owner's entry can go in after this (`redis/lua/fence.lua`). Call it
    /// before reading the log. `Fenced` if the lease is no longer `token`'s.
    pub async fn fence(&self, game_pk: &str, token: &str) -> Result<(), StoreError> {
        let room = room(game_pk)?;
        let mut conn = self.conn.clone();
        let fenced: String = self
            .fence
            .key(self.keys.lease(room))
            .key(self.keys.log(room, game_pk))
            .arg(token)
            .arg(crate::redis::append::epoch_of(token))
            .arg(if self.fast_path_open() { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        match fenced.as_str() {
            "OK" => Ok(()),
            "FENCED" => Err(StoreError::Fenced),
            other => Err(StoreError::Unknown(format!("the fence script answered {other:?}"))),
        }
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
