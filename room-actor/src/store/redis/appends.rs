//! Appends to a game's log in the Redis store (group commit, `redis/append/`), and the
//! fence a node writes on a log before it reads it as the room's new owner.

use super::{room, unavailable, RedisStore};
use crate::error::StoreError;
use crate::log::{encode, LogEntry};
use crate::redis::append::Appended;
use crate::store::StoreFuture;

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
        if tokio::runtime::Handle::try_current().is_err() {
            // Asked outside a runtime: queued when first polled, which is inside one.
            let this = self.clone();
            return Box::pin(async move { this.append_fenced(game_pk, entry, token).await });
        }
        let appender = &self.appends;
        let queued = room(&game_pk)
            .and_then(|room| Ok((room, encode(&entry)?)))
            .and_then(|(room, bytes)| appender.enqueue(&self.keys, room, &game_pk, seq, bytes, token));
        Box::pin(async move { outcome(queued?.outcome().await?, game_pk, seq) })
    }

    /// Batches of appends sent and the entries in them.
    pub fn append_batches(&self) -> (u64, u64) {
        self.appends.batches()
    }

    /// Entries appended on the fast path (a bare `XADD`, `redis/append/`) since start.
    pub fn fast_appends(&self) -> u64 {
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
