//! One Redis or a Redis Cluster: what roomd does differently on each beyond the
//! connection itself, decided once ([`Topology::of`] the operator's target, when the Redis
//! store connects) and asked of that value by the store and the cluster node, which never
//! check which it is. What only a connection needs to know (where a command goes,
//! `PUBLISH` or `SPUBLISH`, an `MGET` or a `GET` per key) is [`RedisConn`]'s own
//! business (`redis/conn.rs`).
//!
//! [`RedisConn`]: crate::redis::conn::RedisConn

use crate::redis::append::Appender;
use crate::redis::conn::ThreadConns;
use crate::redis::keys::Keys;
use crate::redis::target::RedisTarget;
use std::sync::Arc;
use std::time::Duration;

/// Which kind of Redis the node's is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One Redis (`ROOMD__REDIS__URL`): every key on one server.
    Single,
    /// A Redis Cluster (`ROOMD__REDIS__CLUSTER_URLS`): keys spread over slots, the master
    /// of each slot failing over on its own.
    Cluster,
}

impl Topology {
    pub fn of(target: &RedisTarget) -> Topology {
        match target {
            RedisTarget::Single(_) => Topology::Single,
            RedisTarget::Cluster(_) => Topology::Cluster,
        }
    }

    /// How the store's log appends reach Redis: group commit per thread, each entry
    /// checked or on the fast path, many rooms' entries in one round trip per server
    /// (one Redis, or each master of a Redis Cluster; `redis/append/`).
    pub(crate) fn appender(self, thread_conns: &Arc<ThreadConns>, keys: &Keys) -> Appender {
        Appender::shared(thread_conns.clone(), keys, self == Topology::Cluster)
    }

    /// How long a node's bus subscription must stay missing (with no heartbeat) before
    /// the failure detector finds it dead, on top of its missed polls
    /// ([`Detector::with_min_silence`](crate::cluster::failover::Detector::with_min_silence)):
    /// nothing more on one Redis, where a subscription lost means that Redis is lost too;
    /// a heartbeat (every `heartbeat_ms`) and a half on a cluster, where the bus channel's
    /// shard can fail over while the membership's is fine, and a live node must have had
    /// the time to beat.
    pub fn bus_silence(self, heartbeat_ms: u64) -> Duration {
        match self {
            Topology::Single => Duration::ZERO,
            Topology::Cluster => Duration::from_millis(heartbeat_ms * 3 / 2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topology_is_the_targets_kind() {
        assert_eq!(Topology::of(&RedisTarget::Single("redis://a/".into())), Topology::Single);
        assert_eq!(Topology::of(&RedisTarget::Cluster(vec!["redis://a:7000".into()])), Topology::Cluster);
    }

    #[test]
    fn a_cluster_waits_a_heartbeat_and_a_half_before_a_subscription_lost_is_a_death() {
        assert_eq!(Topology::Single.bus_silence(500), Duration::ZERO);
        assert_eq!(Topology::Cluster.bus_silence(500), Duration::from_millis(750));
    }
}
