//! The heartbeat, one of the node's loops ([`ClusterNode::run`] starts and supervises
//! it): this node's membership entry (with its draining flag and peer link address),
//! the log layout check after each beat that opens the store's fast path once the whole
//! cluster writes the epoch layout, and now and then the sweep of long-gone nodes'
//! entries.

use super::ClusterNode;
use crate::error::StoreError;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often a node drops the membership's side entries (draining flags, log layouts,
/// peer addresses, reported stats) of node ids gone from the node set (`Membership::sweep`).
pub const MEMBERSHIP_SWEEP_EVERY: Duration = Duration::from_secs(60);

impl ClusterNode {
    /// The membership heartbeat (with the draining flag), the log layout check after it,
    /// and now and then the sweep of long-gone nodes' entries.
    pub(super) async fn beat_on(self: Arc<Self>) {
        let every = Duration::from_millis(self.config.heartbeat_ms.max(50));
        let mut swept = Instant::now();
        loop {
            let draining = self.draining.load(Ordering::Relaxed);
            if let Err(e) = self.beat(draining).await {
                warn!(error = %e, "heartbeat failed");
            } else {
                self.check_log_layout().await;
            }
            if swept.elapsed() >= MEMBERSHIP_SWEEP_EVERY {
                swept = Instant::now();
                match self.members.sweep().await {
                    Ok(0) => {}
                    Ok(dropped) => info!(dropped, "membership entries of long-gone nodes dropped"),
                    Err(e) => warn!(error = %e, "membership sweep failed"),
                }
            }
            tokio::time::sleep(every).await;
        }
    }

    /// One membership heartbeat, with this node's draining flag and peer link address.
    pub(super) async fn beat(&self, draining: bool) -> Result<(), StoreError> {
        let peer = self.config.peer.as_ref().map(|p| p.advertise.as_str());
        self.members.heartbeat_with(self.id(), draining, peer, self.now_ms()).await
    }

    /// Opens the store's fast path for appends once the whole cluster writes the epoch
    /// layout of logs (`Membership::epoch_layout`): checked after every heartbeat until
    /// then. A Redis Cluster keeps its checked append per entry: no fast path to open.
    async fn check_log_layout(&self) {
        if !self.store.awaits_fast_path() {
            return;
        }
        match self.members.epoch_layout(self.now_ms()).await {
            Ok(true) => {
                self.store.open_fast_path();
                info!(node = self.id(), "every node writes the epoch layout of logs: appends take the fast path");
            }
            Ok(false) => {}
            Err(e) => warn!(error = %e, "the cluster's log layout not read; checking again after the next heartbeat"),
        }
    }
}
