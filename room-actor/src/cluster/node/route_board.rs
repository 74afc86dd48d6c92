//! The route board's refresh, one of the node's loops ([`ClusterNode::run`] starts and
//! supervises it): where the rooms this node's sessions watch on other nodes are now
//! (`cluster/routes.rs`), read for all of them at once; their sessions follow a room
//! that moved.

use super::ClusterNode;
use crate::cluster::routes;
use crate::messages::Notice;
use std::sync::Arc;
use std::time::Instant;
use tracing::warn;

impl ClusterNode {
    /// Keeps the route board (`routes.rs`) fresh: where the rooms this node's sessions
    /// watch elsewhere are; their sessions follow a room that moved.
    pub(super) async fn refresh_routes(self: Arc<Self>) {
        // After a node died or left, its rooms get new holders within a few detection
        // polls: the board reads more often for a while, so their watchers follow soon.
        let mut soon_until: Option<Instant> = None;
        loop {
            let every = match soon_until {
                Some(until) if Instant::now() < until => routes::REFRESH_SOON,
                _ => routes::REFRESH_EVERY,
            };
            if tokio::time::timeout(every, self.reroute.notified()).await.is_ok() {
                soon_until = Some(Instant::now() + routes::SOON_FOR);
            }
            let rooms = self.routes.due(Instant::now());
            if rooms.is_empty() {
                continue;
            }
            match self.leases.holders(&rooms).await {
                Ok(tokens) => {
                    let moved = self.routes.update(&rooms, tokens);
                    if !moved.is_empty() {
                        // The sessions watching them follow them now.
                        self.sessions.tell_all(Notice::Moved(moved.into()));
                    }
                }
                Err(e) => warn!(error = %e, "watched rooms' holders not read; retrying"),
            }
        }
    }
}
