//! The lease check, one of the node's loops ([`ClusterNode::run`] starts and supervises
//! it): every [`LEASE_CHECK_EVERY`] (or a third of the lease, if shorter) the rooms held
//! here are checked to be still this node's and their leases renewed now and then; a
//! room whose lease was lost stops, and the lease of one that closed is given back.

use super::ClusterNode;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::warn;

/// How often a node checks that its leases are still its own (one `MGET` per thousand
/// rooms): a node taken over while it was paused or cut off stops those rooms within
/// this, so their watchers follow them instead of watching a frozen copy.
pub const LEASE_CHECK_EVERY: Duration = Duration::from_secs(1);

impl ClusterNode {
    /// Checks that the leases of the rooms held here are still this node's, renews them,
    /// and stops a room whose lease was lost or gives back the lease of one that closed.
    pub(super) async fn check_leases(self: Arc<Self>) {
        // Leases are checked every tick and their TTL renewed every third of it
        // (`lease.rs` says why the two differ).
        let renew_every = Duration::from_millis((self.config.lease_ms / 3).max(50));
        let every = renew_every.min(LEASE_CHECK_EVERY);
        // The first check of a (re)started loop renews: the loop it replaces may have died
        // just before its renewal was due.
        let mut renewed: Option<Instant> = None;
        loop {
            tokio::time::sleep(every).await;
            let held: Vec<(String, String)> =
                self.held.lock().map(|h| h.iter().map(|(r, t)| (r.clone(), t.clone())).collect()).unwrap_or_default();
            // A held room whose actor stopped (an ended room closed for want of
            // watchers) gives its lease back instead of holding it forever. Rooms
            // enter `held` only after their actor is in the directory.
            let (held, closed): (Vec<_>, Vec<_>) =
                held.into_iter().partition(|(room, _)| self.deps.directory.handle(room).is_some());
            for (room, token) in closed {
                if let Err(e) = self.leases.release(&room, &token).await {
                    warn!(room = %room, error = %e, "closed room's lease not released; it will expire");
                }
                if let Ok(mut h) = self.held.lock() {
                    if h.get(&room) == Some(&token) {
                        h.remove(&room);
                    }
                }
            }
            let renew = renewed.is_none_or(|at| at.elapsed() + every / 2 >= renew_every);
            let checked = if renew { self.leases.renew(&held).await } else { self.leases.verify(&held).await };
            if renew && checked.is_ok() {
                renewed = Some(Instant::now());
            }
            match checked {
                Ok(lost) if lost.is_empty() => {}
                Ok(lost) => {
                    let checked: HashMap<&str, &str> =
                        held.iter().map(|(room, token)| (room.as_str(), token.as_str())).collect();
                    for room in lost {
                        // Another node has the room (this one was found dead, or
                        // paused past its heartbeat): its appends are fenced anyway; stop
                        // the actor now so its watchers get `room_moved` and follow
                        // the room instead of watching a frozen copy. Only if this node
                        // still holds it under the token found lost: a room taken back
                        // since (a newer token, a new actor) stays.
                        let still = self.held.lock().is_ok_and(|mut h| {
                            let same = h.get(&room).map(String::as_str) == checked.get(room.as_str()).copied();
                            if same {
                                h.remove(&room);
                            }
                            same
                        });
                        if !still {
                            continue;
                        }
                        warn!(room = %room, "lease lost; the room stops here");
                        self.failover.leases_lost.inc();
                        if let Some(handle) = self.deps.directory.handle(&room) {
                            let _ = handle.handover().try_send(crate::messages::Handover);
                        }
                    }
                }
                Err(e) => warn!(error = %e, renew, "lease check failed"),
            }
        }
    }
}
