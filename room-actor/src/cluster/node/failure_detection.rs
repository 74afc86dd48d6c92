//! Failure detection, one of the node's loops ([`ClusterNode::run`] starts and
//! supervises it): every [`failover::DETECT_EVERY`] a poll of the live nodes and their bus
//! subscriptions (`cluster/failover.rs` says why those); a node found dead is removed
//! from the membership, and the reconciler and the route board are woken to take over
//! and follow its rooms. The poll also refreshes what other parts read from the live
//! nodes: the peer links' addresses and the nodes whose sockets the per-user cap counts.

use super::ClusterNode;
use crate::cluster::failover;
use crate::error::StoreError;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tracing::warn;

impl ClusterNode {
    /// Failure detection polls ([`ClusterNode::detect`]).
    pub(super) async fn detect_failures(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(failover::DETECT_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(e) = self.detect().await {
                warn!(error = %e, "failure detection poll failed");
            }
        }
    }

    /// One detection poll: the live nodes and their bus subscribers in two round trips;
    /// dead ones are removed from the membership and their rooms are taken at once.
    async fn detect(self: &Arc<Self>) -> Result<(), StoreError> {
        let live = self.members.live_scored(self.now_ms()).await?;
        if self.config.peer.is_some() {
            let addrs: HashMap<String, String> = live
                .iter()
                .filter(|(m, _)| m.id != self.id())
                .filter_map(|(m, _)| Some((m.id.clone(), m.peer.clone()?)))
                .collect();
            self.deps.metrics.bus_peer_addresses.set(addrs.len() as i64);
            self.peers.set(addrs);
        }
        let others: Vec<String> = live.iter().filter(|(m, _)| m.id != self.id()).map(|(m, _)| m.id.clone()).collect();
        // The per-user socket cap counts the sockets on these nodes only.
        self.sockets.set_live(others.iter().cloned());
        let counts = failover::subscribers(&self.store.connection(), &self.config.prefix, &others).await?;
        let verdict = match self.detector.lock() {
            Ok(mut detector) => detector.observe(self.id(), &live, &counts, Instant::now()),
            Err(_) => return Err(StoreError::Unavailable("failure detector poisoned".into())),
        };
        let mut rescan = !verdict.departed.is_empty();
        for (dead, score) in verdict.dead {
            if self.members.forget(&dead, score).await? {
                self.failover.dead_nodes.inc();
                warn!(node = %dead, "node found dead (its bus subscription is gone); taking over its rooms");
            }
            rescan = true;
        }
        if rescan {
            self.rescan.notify_one();
            self.reroute.notify_one();
        }
        Ok(())
    }
}
