//! Appends to a game's log in the Redis store, by the road its topology chose
//! ([`Appends`]: group commit on one Redis, one script per entry on a Redis Cluster), and
//! the fence a node writes on a log before it reads it as the room's new owner.

use super::{evalsha, room, unavailable, RedisStore, APPEND_LUA};
use crate::error::StoreError;
use crate::log::{encode, LogEntry};
use crate::redis::append::Appended;
use crate::redis::topology::Appends;
use crate::store::StoreFuture;
use redis::RedisError;

/// An append's outcome as the store reports it.
fn outcome(appended: Appended, game_pk: String, seq: u64) -> Result<(), StoreError> {
    match appended {
        Appended::Stored => Ok(()),
        Appended::Fenced => Err(StoreError::Fenced),
        Appended::Conflict { last } => Err(StoreError::Conflict { game_pk, expected: last + 1, got: seq }),
    }
}

impl RedisStore {
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

    /// Entries appended on the fast path (a bare `XADD`, `redis/append/`) since start.
    pub fn fast_appends(&self) -> Option<u64> {
        self.appends.fast()
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
            .arg(if self.appends.epoch_layout() { "1" } else { "0" })
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
