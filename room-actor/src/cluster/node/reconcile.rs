//! The reconciler: level-triggered recovery. Whatever happened before (a fault nobody
//! listed, an event lost, a retry that gave up), each node compares, every
//! [`ClusterNode::reconcile_every`] (jittered), what should be with what is, and repairs
//! the difference:
//!
//! - **Every open room has a live holder.** A room of the index placed here whose lease
//!   is free or whose holder is no longer a live node is claimed (taken over), and so is
//!   a room whose lease carries this node's id but that this process does not run (its
//!   previous incarnation's, or a claim whose restore failed half way). One that cannot be
//!   is tried again next pass, and said once per room per [`COMPLAIN_EVERY`].
//! - **Every room this node holds is still its own**: the lease check (`lease_check.rs`), every
//!   second, stops a room whose lease is not, and gives back the lease of a room this
//!   node holds but no longer runs.
//! - **Every session's route reaches the room's current holder**: the route board reads
//!   the lease *tokens* of watched rooms every second (`routes.rs`), so a room restored
//!   anew, even on the same node, is a move its remote watchers follow.
//! - **The bus subscription delivers**, checked end to end by the probes of `receive.rs`
//!   (made again when silent); a pass with it unverified does not count as a success.
//! - **Redis still holds its data**: a marker key written once per dataset; a Redis that
//!   came back empty is said loudly ([`ClusterNode::check_dataset`]).
//!
//! A detector's verdict (a node found dead or gone) wakes a pass at once that reads the
//! whole index: the event is the fast path (failover in a few hundred ms), the period the
//! net under it. `/readyz` answers 200 only while the last pass succeeded recently
//! ([`Reconciled::unready`]).

use super::{Claim, ClusterNode, ACTIVATION_CONCURRENCY};
use crate::cluster::lease::Leases;
use crate::cluster::placement;
use crate::error::StoreError;
use futures_util::StreamExt;
use prometheus::{IntCounter, IntGauge, Registry};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// Rooms of the open-room index one periodic pass reads (`SSCAN`, then their leases in
/// pipelined `MGET`s): a few round trips per pass however many rooms the cluster has; a
/// cluster with more rooms is covered over several passes. A pass woken by a node's death
/// reads the whole index, as failover must.
pub const PAGE: usize = 2048;
/// The longest a room's restore may take (claim, fence, read the log, confirm it with
/// the replicas): one that hangs on a connection to a master that died must not hold the
/// room's activation lock, or the pass, for ever. A restore measured in the failover
/// bench takes a few ms; five seconds is a Redis Cluster failover and then some.
pub const ACTIVATE_WITHIN: Duration = Duration::from_secs(5);
/// `/readyz` wants a successful pass at most this old: about three periods, so one slow
/// pass is no flap.
pub const FRESH_FOR: Duration = Duration::from_secs(4);
/// The longest between two reconciler passes (a quarter of the lease TTL when that is
/// shorter): a pass also runs at once when a node dies or leaves, so this bounds what no
/// departure announces, such as a lease released or lapsed, a pass that failed, or a
/// fault nobody listed. It was a quarter of the lease when the lease was 3 s.
pub const RECONCILE_EVERY: Duration = Duration::from_millis(750);
/// A room that cannot be served is said once per this, not per pass.
pub const COMPLAIN_EVERY: Duration = Duration::from_secs(60);

/// What the reconciler last found, for `/readyz` and operators.
pub struct Reconciled {
    since: Instant,
    /// Milliseconds from `since` to the end of the last successful pass, plus one.
    last_ok: AtomicU64,
    /// Rooms this node should hold that the last pass could not restore for want of
    /// Redis (a room whose log cannot be read is said, not counted).
    pending: IntGauge,
    /// Why the last pass failed, if it did.
    last_error: Mutex<Option<String>>,
    /// The `SSCAN` cursor of the periodic passes over the open-room index.
    cursor: Mutex<u64>,
    /// When each room that cannot be served was last said so.
    complained: Mutex<HashMap<String, Instant>>,
    /// The dataset marker this node saw last (`check_dataset`).
    dataset: Mutex<Option<String>>,
    passes: IntCounter,
    failed: IntCounter,
    repaired: IntCounter,
    wipes: IntCounter,
}

/// Why the node is not ready as far as the reconciler knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unready {
    /// No pass has succeeded within [`FRESH_FOR`] (or none yet): the error of the last.
    Stale { error: Option<String> },
    /// The last pass found rooms this node should hold and could not restore.
    Pending { rooms: u64 },
}

impl Reconciled {
    pub(super) fn new() -> Result<Reconciled, prometheus::Error> {
        Ok(Reconciled {
            since: Instant::now(),
            last_ok: AtomicU64::new(0),
            pending: IntGauge::new(
                "roomd_reconcile_pending_rooms",
                "rooms this node should hold that the reconciler's last pass could not restore",
            )?,
            last_error: Mutex::new(None),
            cursor: Mutex::new(0),
            complained: Mutex::new(HashMap::new()),
            dataset: Mutex::new(None),
            passes: IntCounter::new("roomd_reconcile_passes_total", "reconciler passes")?,
            failed: IntCounter::new("roomd_reconcile_failures_total", "reconciler passes that did not succeed")?,
            repaired: IntCounter::new(
                "roomd_reconcile_repairs_total",
                "rooms the reconciler restored here (claimed, taken over or taken back)",
            )?,
            wipes: IntCounter::new(
                "roomd_store_wipes_total",
                "times this node found Redis back without its data (the dataset marker gone)",
            )?,
        })
    }

    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.pending.clone()))?;
        registry.register(Box::new(self.passes.clone()))?;
        registry.register(Box::new(self.failed.clone()))?;
        registry.register(Box::new(self.repaired.clone()))?;
        registry.register(Box::new(self.wipes.clone()))
    }

    /// `None` when the last pass succeeded within [`FRESH_FOR`].
    pub fn unready(&self) -> Option<Unready> {
        let pending = u64::try_from(self.pending.get()).unwrap_or(0);
        if pending > 0 {
            return Some(Unready::Pending { rooms: pending });
        }
        let fresh = self
            .last_ok
            .load(Ordering::Relaxed)
            .checked_sub(1)
            .is_some_and(|ms| self.since.elapsed().saturating_sub(Duration::from_millis(ms)) < FRESH_FOR);
        if fresh {
            return None;
        }
        let error = self.last_error.lock().ok().and_then(|e| e.clone());
        Some(Unready::Stale { error })
    }

    fn succeeded(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_ok.store(ms + 1, Ordering::Relaxed);
        if let Ok(mut e) = self.last_error.lock() {
            *e = None;
        }
    }

    fn failed(&self, why: String) {
        self.failed.inc();
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(why);
        }
    }

    /// Whether to say now that `room` cannot be served (once per [`COMPLAIN_EVERY`]).
    fn complain(&self, room: &str, now: Instant) -> bool {
        let Ok(mut complained) = self.complained.lock() else { return true };
        complained.retain(|_, at| now.duration_since(*at) < COMPLAIN_EVERY);
        if complained.contains_key(room) {
            return false;
        }
        complained.insert(room.to_owned(), now);
        true
    }
}

/// `every` ± a quarter, so the nodes' passes do not fall in step.
fn jittered(every: Duration, pass: u64) -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(pass);
    let quarter = every / 4;
    let spread = u64::try_from(quarter.as_micros()).unwrap_or(0).saturating_mul(2).max(1);
    every - quarter + Duration::from_micros(h.finish() % spread)
}

impl ClusterNode {
    /// The reconciler's state (`/readyz`, metrics).
    pub fn reconciled(&self) -> &Reconciled {
        &self.reconciled
    }

    /// The period of the reconciler: a quarter of the lease TTL, at most
    /// [`RECONCILE_EVERY`] (about a second): a room whose lease lapsed or was
    /// released (a drain) has a holder again within a lease-quarter, and a room a fault
    /// left without one plays again within about a second of its Redis being whole.
    pub(super) fn reconcile_every(&self) -> Duration {
        Duration::from_millis((self.config.lease_ms / 4).max(100)).min(RECONCILE_EVERY)
    }

    /// The reconciler's loop: a pass every period (jittered), and at once, over the whole
    /// index, when the failure detector finds a node dead or gone.
    pub(super) async fn reconcile_on(self: Arc<Self>) {
        let every = self.reconcile_every();
        let mut pass = 0u64;
        // The first pass reads every open room (it also takes back this node id's old
        // leases, wherever they are placed).
        let mut full = true;
        loop {
            if self.draining.load(Ordering::Relaxed) {
                tokio::time::sleep(every).await;
                continue;
            }
            self.reconciled.passes.inc();
            match self.reconcile(full).await {
                Ok(()) => {}
                Err(e) => {
                    warn!(error = %e, "reconciler pass failed; the next one retries");
                    self.reconciled.failed(e.to_string());
                }
            }
            pass += 1;
            full = tokio::time::timeout(jittered(every, pass), self.rescan.notified()).await.is_ok();
        }
    }

    /// One pass. `full`: the whole open-room index, else the next [`PAGE`] of it.
    pub async fn reconcile(self: &Arc<Self>, full: bool) -> Result<(), StoreError> {
        self.check_dataset().await?;
        let rooms = if full { self.all_open_rooms().await? } else { self.next_page().await? };
        tracing::debug!(node = self.id(), full, rooms = rooms.len(), "reconciler pass");
        let pending = self.claim_missing(rooms).await?;
        self.reconciled.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
        if !self.bus_check.verified() {
            self.reconciled.failed("the bus subscription is not verified".into());
            return Ok(());
        }
        if pending == 0 {
            self.reconciled.succeeded();
        } else {
            self.reconciled.failed(format!("{pending} rooms to hold here not restored yet"));
        }
        Ok(())
    }

    async fn all_open_rooms(&self) -> Result<Vec<String>, StoreError> {
        let mut conn = self.store.connection();
        let rooms: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.store.keys().open_rooms())
            .query_async(&mut conn)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        if let Ok(mut cursor) = self.reconciled.cursor.lock() {
            *cursor = 0;
        }
        Ok(rooms)
    }

    /// The next [`PAGE`] rooms of the open-room index (`SSCAN` from where the last page
    /// ended; a set changed meanwhile may repeat or skip a room for one cycle, which the
    /// next cycle covers).
    async fn next_page(&self) -> Result<Vec<String>, StoreError> {
        let mut cursor = self.reconciled.cursor.lock().map(|c| *c).unwrap_or(0);
        let mut conn = self.store.connection();
        let mut rooms = Vec::new();
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(self.store.keys().open_rooms())
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut conn)
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            rooms.extend(page);
            cursor = next;
            if cursor == 0 || rooms.len() >= PAGE {
                break;
            }
        }
        if let Ok(mut c) = self.reconciled.cursor.lock() {
            *c = cursor;
        }
        Ok(rooms)
    }

    /// Restores here every one of `rooms` that should be here and is not: placed here
    /// with its lease free or its holder not a live node, or leased under this node's id
    /// but not run by this process. The leases are read in one pipeline and the rooms
    /// restored concurrently ([`ACTIVATION_CONCURRENCY`] at a time). Returns how many
    /// could not be (they are tried again next pass).
    async fn claim_missing(self: &Arc<Self>, rooms: Vec<String>) -> Result<usize, StoreError> {
        let live = self.members.live(self.now_ms()).await?;
        let placeable: Vec<&str> = live.iter().filter(|m| !m.draining).map(|m| m.id.as_str()).collect();
        let rooms: Vec<String> = rooms.into_iter().filter(|room| !self.holds(room)).collect();
        let holders = self.leases.holders(&rooms).await?;
        let wanted: Vec<(String, Claim)> = rooms
            .into_iter()
            .zip(holders)
            .filter_map(|(room, token)| {
                let here = placement::owner(&room, placeable.iter().copied()) == Some(self.id());
                match token {
                    None => here.then_some((room, Claim::Free)),
                    Some(token) => {
                        let holder = Leases::node_of(&token);
                        let ours_from_before = holder == self.id();
                        let dead_owner = here && !live.iter().any(|m| m.id == holder);
                        (ours_from_before || dead_owner).then(|| (room, Claim::From(token.clone())))
                    }
                }
            })
            .collect();
        let failed = AtomicU64::new(0);
        futures_util::stream::iter(wanted)
            .for_each_concurrent(ACTIVATION_CONCURRENCY, |(room, how)| {
                let failed = &failed;
                async move {
                    match self.activate_with(&room, how).await {
                        Ok(Some(_)) => self.reconciled.repaired.inc(),
                        // Another node took it first, or it is gone: nothing to repair.
                        Ok(None) => {}
                        Err(e) => {
                            // Redis away or slow is this node not done recovering (not
                            // ready); a log that cannot be read (corrupt, a newer format)
                            // is one room's problem, said but no reason to leave the
                            // Service.
                            if matches!(e, StoreError::Unavailable(_) | StoreError::Unknown(_)) {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                            if self.reconciled.complain(&room, Instant::now()) {
                                warn!(room = %room, error = %e,
                                    "room cannot be restored here yet; the reconciler retries every pass (said once a minute)");
                            }
                        }
                    }
                }
            })
            .await;
        Ok(usize::try_from(failed.into_inner()).unwrap_or(usize::MAX))
    }

    /// Checks that Redis still holds the cluster's data: a marker key, written by the
    /// first node of a dataset, that a Redis restarted from its AOF or a promoted replica
    /// still has, and a Redis restarted *empty* (a new volume, a flush) does not. That
    /// loss is not a fault the cluster can repair: every room's log is gone. It is said
    /// loudly (an error line, `roomd_store_wipes_total`), the marker is written anew, and
    /// the rooms this node ran stop as their leases are found lost (their players hear
    /// `unknown_room`): no room plays on from nothing.
    pub(super) async fn check_dataset(&self) -> Result<(), StoreError> {
        let key = self.store.keys().dataset();
        let mut conn = self.store.connection();
        let found: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let seen = self.reconciled.dataset.lock().ok().and_then(|d| d.clone());
        let now = match (found, seen) {
            (Some(found), Some(seen)) if found == seen => return Ok(()),
            (Some(found), None) => found,
            (found, seen) => {
                if seen.is_some() {
                    self.reconciled.wipes.inc();
                    let held = self.held.lock().map(|h| h.len()).unwrap_or(0);
                    error!(node = self.id(), rooms_held_here = held, marker = ?found,
                        "Redis came back without its data (the dataset marker this node saw is gone): every room's \
                         log is lost; the rooms run here stop and their players are told unknown_room. Restore \
                         Redis from a backup to get them back");
                }
                match found {
                    Some(found) => found,
                    None => {
                        let fresh =
                            engine::Seed::from_os().map(|s| s.to_hex()).unwrap_or_else(|_| self.id().to_owned());
                        let set: Option<String> = redis::cmd("SET")
                            .arg(&key)
                            .arg(&fresh)
                            .arg("NX")
                            .query_async(&mut conn)
                            .await
                            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                        if set.is_some() {
                            info!(node = self.id(), marker = %fresh, "dataset marker written");
                            fresh
                        } else {
                            // Another node wrote it first: read it next pass.
                            return Ok(());
                        }
                    }
                }
            }
        };
        if let Ok(mut d) = self.reconciled.dataset.lock() {
            *d = Some(now);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_is_jittered_by_a_quarter_either_way() {
        let every = Duration::from_millis(800);
        let periods: Vec<Duration> = (0..200).map(|pass| jittered(every, pass)).collect();
        assert!(periods.iter().all(|p| *p >= Duration::from_millis(600) && *p < Duration::from_millis(1000)));
        let distinct: std::collections::HashSet<_> = periods.iter().collect();
        assert!(distinct.len() > 100, "not jittered: {} distinct periods", distinct.len());
    }

    #[test]
    fn a_room_that_cannot_be_served_is_said_once_a_minute() {
        let r = Reconciled::new().unwrap_or_else(|e| panic!("{e}"));
        let t = Instant::now();
        assert!(r.complain("a", t));
        assert!(!r.complain("a", t + Duration::from_secs(59)));
        assert!(r.complain("b", t + Duration::from_secs(1)), "per room");
        assert!(r.complain("a", t + COMPLAIN_EVERY));
    }

    #[test]
    fn ready_only_after_a_recent_successful_pass_with_nothing_pending() {
        let r = Reconciled::new().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.unready(), Some(Unready::Stale { error: None }), "no pass yet");
        r.failed("redis away".into());
        assert_eq!(r.unready(), Some(Unready::Stale { error: Some("redis away".into()) }));
        r.succeeded();
        assert_eq!(r.unready(), None);
        r.pending.set(3);
        assert_eq!(r.unready(), Some(Unready::Pending { rooms: 3 }));
    }
}
