//! `RoomStore` on Redis: a Redis Stream per game for the log (bincode entries), strings
//! for the start entry, snapshot and record, a sorted set per user for `/api/me/games`.
//! Appends go through one Lua script (`lua/append.lua`) that checks the room's lease
//! token and the sequence number before `XADD`. Finished games expire after 90 days.
//!
//! The connection is a `ConnectionManager`, which reconnects with backoff after Redis
//! restarts; while Redis is away every call fails with `StoreError::Unavailable` and the
//! room refuses inputs (nothing is acknowledged that is not stored). An append that timed
//! out or lost its connection after it was sent fails with `StoreError::Unknown`: Redis
//! may have stored it, and the room resolves it by retrying the same entry and reading
//! the log back (`room.rs`), never by assuming it failed.

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::keys::{room_of, Keys};
use crate::lobby::{self, LobbyFilter};
use crate::log::{decode, encode, GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use crate::store::{RoomStore, StoreFuture};
use engine::PlayerId;
use redis::aio::ConnectionManager;
use redis::streams::StreamRangeReply;
use redis::{AsyncCommands, RedisError, Script};
use std::time::Duration;

/// How long a finished game's log and record are kept.
pub const RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);

#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    keys: Keys,
    append: Script,
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn room(game_pk: &str) -> Result<&str, StoreError> {
    room_of(game_pk).ok_or_else(|| StoreError::Corrupt(format!("game pk {game_pk} names no room")))
}

/// A Redis client for `url`: `redis://` or `rediss://` (TLS through rustls). A TLS
/// server's certificate is checked against the system's roots, or those of the PEM file
/// named by `SSL_CERT_FILE` (a private CA: see the README); `rediss://…/#insecure`
/// skips the check (tests only).
pub fn client(url: &str) -> redis::RedisResult<redis::Client> {
    if url.starts_with("rediss://") {
        // rustls needs one process-wide crypto provider; a second install is refused
        // harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    redis::Client::open(url)
}

/// Index reads one lobby call may make before it answers a short page (a filter that
/// admits few rooms).
pub const LOBBY_ROUNDS: usize = 4;

impl RedisStore {
    /// Connects (with the manager's reconnect/backoff) and uses keys under `prefix`.
    pub async fn connect(url: &str, prefix: &str) -> Result<RedisStore, StoreError> {
        let client = client(url).map_err(unavailable)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(Duration::from_secs(2))
            .set_number_of_retries(3)
            .set_max_delay(500);
        let conn = ConnectionManager::new_with_config(client, config).await.map_err(unavailable)?;
        Ok(RedisStore { conn, keys: Keys::new(prefix), append: Script::new(include_str!("lua/append.lua")) })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The connection, shared with the cluster's membership and leases.
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
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
        let mut conn = self.conn.clone();
        let mut after = cursor.map(str::to_owned);
        let mut page = Vec::new();
        for _ in 0..LOBBY_ROUNDS {
            let from = after.as_ref().map_or_else(|| "-".to_owned(), |c| format!("({c}"));
            let mut pipe = redis::pipe();
            for b in 0..lobby::BUCKETS {
                pipe.cmd("ZRANGE")
                    .arg(self.keys.lobby(b))
                    .arg(&from)
                    .arg("+")
                    .arg("BYLEX")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit);
            }
            let buckets: Vec<Vec<String>> = pipe.query_async(&mut conn).await.map_err(unavailable)?;
            let full_bucket = buckets.iter().any(|b| b.len() >= limit);
            let mut next: Vec<String> = buckets.into_iter().flatten().collect();
            next.sort();
            let truncated = next.len() > limit;
            next.truncate(limit);
            let mut pipe = redis::pipe();
            for position in &next {
                pipe.get(self.keys.meta(lobby::room_of_position(position).unwrap_or_default()));
            }
            let metas: Vec<Option<String>> =
                if next.is_empty() { Vec::new() } else { pipe.query_async(&mut conn).await.map_err(unavailable)? };
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
        let mut pipe = redis::pipe();
        for position in positions {
            let room = lobby::room_of_position(position).unwrap_or_default();
            pipe.zrem(self.keys.lobby(lobby::bucket(room)), position.as_str()).ignore();
        }
        let mut conn = self.conn.clone();
        let _ = pipe.query_async::<()>(&mut conn).await;
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
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.get(self.keys.meta(id));
            }
            let metas: Vec<Option<String>> = pipe.query_async(&mut conn).await.map_err(unavailable)?;
            let mut pipe = redis::pipe();
            for info in metas.into_iter().flatten().filter_map(|j| serde_json::from_str::<RoomInfo>(&j).ok()) {
                if info.status != RoomStatus::Ended {
                    pipe.zadd(self.keys.lobby(lobby::bucket(&info.room_id)), lobby::position(&info), 0).ignore();
                    indexed += 1;
                }
            }
            pipe.query_async::<()>(&mut conn).await.map_err(unavailable)?;
        }
        conn.set::<_, _, ()>(self.keys.lobby_indexed(), "1").await.map_err(unavailable)?;
        Ok(indexed)
    }

    /// `PING`: is the store reachable (readiness)?
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
    }

    /// Appends as the holder of `token` (`node/epoch`); `Fenced` if the lease is someone else's.
    pub async fn append_fenced(&self, game_pk: String, entry: LogEntry, token: String) -> Result<(), StoreError> {
        let room = room(&game_pk)?;
        let bytes = encode(&entry)?;
        let mut conn = self.conn.clone();
        let result: Result<u64, RedisError> = self
            .append
            .key(self.keys.log(room, &game_pk))
            .key(self.keys.seq(room, &game_pk))
            .key(self.keys.lease(room))
            .arg(entry.seq)
            .arg(bytes)
            .arg(token)
            .invoke_async(&mut conn)
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("FENCED") => Err(StoreError::Fenced),
            Err(e) if e.code() == Some("CONFLICT") => Err(StoreError::Conflict {
                game_pk,
                expected: e.detail().and_then(|d| d.trim().parse::<u64>().ok()).map_or(0, |last| last + 1),
                got: entry.seq,
            }),
            // Refused before anything was sent: certainly not stored.
            Err(e) if e.is_connection_refusal() => Err(unavailable(e)),
            // A timeout, a dropped connection, a failover: the script may have run.
            Err(e) => Err(StoreError::Unknown(e.to_string())),
        }
    }
}

impl RoomStore for RedisStore {
    fn begin(&self, start: StartEntry) -> StoreFuture<()> {
        let this = self.clone();
        Box::pin(async move {
            let room = room(&start.game_pk)?.to_owned();
            let bytes = encode(&start)?;
            let mut conn = this.conn.clone();
            let created: bool = redis::cmd("SET")
                .arg(this.keys.start(&room, &start.game_pk))
                .arg(bytes)
                .arg("NX")
                .query_async::<Option<String>>(&mut conn)
                .await
                .map_err(unavailable)?
                .is_some();
            if !created {
                return Err(StoreError::Conflict { game_pk: start.game_pk, expected: 0, got: 0 });
            }
            Ok(())
        })
    }

    fn append(&self, game_pk: &str, entry: LogEntry) -> StoreFuture<()> {
        let this = self.clone();
        let game_pk = game_pk.to_owned();
        // No lease token yet: the store is used without ownership leases (one writer per
        // room by construction). The script enforces the token once one is passed.
        Box::pin(async move { this.append_fenced(game_pk, entry, String::new()).await })
    }

    fn append_leased(&self, game_pk: &str, entry: LogEntry, token: &str) -> StoreFuture<()> {
        let this = self.clone();
        let game_pk = game_pk.to_owned();
        let token = token.to_owned();
        Box::pin(async move { this.append_fenced(game_pk, entry, token).await })
    }

    fn entry(&self, game_pk: &str, seq: u64) -> StoreFuture<Option<LogEntry>> {
        let this = self.clone();
        let game_pk = game_pk.to_owned();
        Box::pin(async move {
            let room = room(&game_pk)?;
            let mut conn = this.conn.clone();
            let id = format!("0-{seq}");
            let range: StreamRangeReply =
                conn.xrange(this.keys.log(room, &game_pk), &id, &id).await.map_err(unavailable)?;
            let Some(found) = range.ids.first() else { return Ok(None) };
            let bytes: Vec<u8> =
                found.get("e").ok_or_else(|| StoreError::Corrupt(format!("stream entry {} has no body", found.id)))?;
            Ok(Some(decode::<LogEntry>(&bytes)?))
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
            let mut conn = this.conn.clone();
            let mut pipe = redis::pipe();
            pipe.set(this.keys.meta(&room_id), json).ignore();
            if ended {
                pipe.srem(this.keys.open_rooms(), &room_id).ignore();
                pipe.zrem(&lobby, &position).ignore();
                pipe.expire(this.keys.meta(&room_id), RETENTION.as_secs() as i64).ignore();
            } else {
                pipe.sadd(this.keys.open_rooms(), &room_id).ignore();
                pipe.zadd(&lobby, &position, 0).ignore();
            }
            pipe.query_async::<()>(&mut conn).await.map_err(unavailable)
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
                let bytes: Vec<u8> =
                    id.get("e").ok_or_else(|| StoreError::Corrupt(format!("stream entry {} has no body", id.id)))?;
                entries.push(decode::<LogEntry>(&bytes)?);
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
