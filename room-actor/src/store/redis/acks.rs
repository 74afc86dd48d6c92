//! Replicated acknowledgements of the Redis store (`ROOMD__REDIS__ACK_REPLICAS` > 0): the
//! connections that send a write with its `WAIT`, how their counts are judged, and the
//! confirmation a read-back or a load makes before it answers.

use super::{evalsha, unavailable, RedisStore};
use crate::error::StoreError;
use crate::redis::append::{Replicated, SUSPECT_AFTER_SHORTS};
use crate::redis::conn::RedisConn;
use crate::redis::target::RedisTarget;
use redis::{Cmd, Script};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

const TOUCH_LUA: &str = include_str!("../../redis/lua/touch.lua");

/// How many replicas must hold a write before it counts (`WAIT`), and the connections
/// that wait. `WAIT` blocks the connection it is sent on, so the writes that wait for
/// replicas (a game's start and its log appends) go through connections of their own,
/// never the shared one that carries leases and heartbeats; a room always uses the same
/// one, so its writes stay in order.
#[derive(Clone)]
pub(super) struct Acks {
    replicas: u32,
    timeout_ms: u64,
    pub(super) conns: std::sync::Arc<[RedisConn]>,
    /// `WAIT`s in a row that counted too few replicas, per connection.
    shorts: std::sync::Arc<[AtomicU32]>,
    touch: Script,
}

/// Connections for writes that wait for replicas.
const ACK_CONNECTIONS: usize = 4;

impl Acks {
    fn index(&self, room: &str) -> usize {
        let i = room.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b)));
        i % self.conns.len()
    }

    pub(super) fn conn(&self, room: &str) -> RedisConn {
        self.conns[self.index(room)].clone()
    }

    /// A `WAIT` on `room`'s connection counted `got` replicas: whether that is enough.
    /// Too few [`SUSPECT_AFTER_SHORTS`] times in a row on a connection has it replaced.
    pub(super) fn counted(&self, room: &str, got: i64) -> bool {
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

    pub(super) fn wait(&self) -> Cmd {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.replicas).arg(self.timeout_ms);
        wait
    }

    /// Why `got` replicas are not enough.
    pub(super) fn short(&self, what: &str, got: i64) -> String {
        format!(
            "{what} reached {got} of the {} replicas ROOMD__REDIS__ACK_REPLICAS asks for within {} ms",
            self.replicas, self.timeout_ms
        )
    }
}

impl RedisStore {
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
        self.appends = Arc::new(self.appends.replicated(target.clone(), replicated));
        self.acks = Some(Arc::new(acks));
        Ok(self)
    }

    /// Confirms that `replicas` replicas hold everything the room's master held before
    /// this call (a replicated no-op write on the room's slot, then `WAIT`).
    pub(super) async fn confirm(&self, acks: &Acks, room: &str, game_pk: &str) -> Result<(), StoreError> {
        let seq = self.keys.seq(room, game_pk);
        let mut pipe = redis::pipe();
        pipe.add_command(evalsha(&acks.touch, std::slice::from_ref(&seq), &[])).ignore().add_command(acks.wait());
        let (got,): (i64,) = RedisStore::with_script(&acks.conn(room), TOUCH_LUA, &pipe).await.map_err(unavailable)?;
        if !acks.counted(room, got) {
            return Err(StoreError::Unavailable(acks.short("the log read back", got)));
        }
        Ok(())
    }
}
