//! The heartbeat, one of the node's loops ([`ClusterNode::run`] starts and supervises
//! it): this node's membership entry (with its draining flag and peer link address), and
//! now and then the sweep of long-gone nodes' entries.

use super::ClusterNode;
use crate::error::StoreError;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often a node drops the membership's side entries (draining flags, peer addresses,
/// reported stats) of node ids gone from the node set (`Membership::sweep`).
pub const MEMBERSHIP_SWEEP_EVERY: Duration = Duration::from_secs(60);

impl ClusterNode {
    /// The membership heartbeat (with the draining flag), and now and then the sweep of
    /// long-gone nodes' entries.
    pub(super) async fn beat_on(self: Arc<Self>) {
        let every = Duration::from_millis(self.config.heartbeat_ms.max(50));
        let mut swept = Instant::now();
        loop {
            let draining = self.draining.load(Ordering::Relaxed);
            if let Err(e) = self.beat(draining).await {
                warn!(error = %e, "heartbeat failed");
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
}
