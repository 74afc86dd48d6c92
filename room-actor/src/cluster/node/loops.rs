//! The node's periodic work: each a loop that runs as long as the node, started and
//! supervised by [`ClusterNode::run`] (a loop that ends is started again, `supervise.rs`).
//! Each keeps its state in the node or in a timer, so a fresh start picks up where the
//! last one stopped; what a fresh start must do at once is said where it matters.

use super::{ClusterNode, LEASE_CHECK_EVERY, MEMBERSHIP_SWEEP_EVERY};
use crate::cluster::failover;
use crate::cluster::routes;
use crate::messages::Notice;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

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
}
