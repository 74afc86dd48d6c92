//! What only a cluster node does: the per-user caps in Redis (`cluster/quota.rs`), the
//! lobby index, the operators' cluster-wide reads (`cluster/ops.rs`), readiness from
//! Redis, the bus and the reconciler, and a node's drain, hand-over and leave.

use super::{Caps, DrainRefused, Readiness, Refused, SocketRefused};
use crate::cluster::bus::{NodeCmd, Reply};
use crate::cluster::node::ClusterNode;
use crate::cluster::ops::{self, NodeRow, RoomFilter, RoomRow};
use crate::error::StoreError;
use crate::info::RoomInfo;
use crate::lobby::LobbyFilter;
use crate::room::RoomDeps;
use crate::spawn::{initial_info, NewRoom};
use crate::supervise::{Policy, Supervisor};
use crate::threads::RoomThreads;
use engine::PlayerId;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// The longest an upgrade waits for Redis to count a socket before it is refused.
const SOCKET_COUNT_TIMEOUT: Duration = Duration::from_secs(3);
/// Tries at giving a closed socket's count back to Redis, and the first and longest pause
/// between them (doubling): two to three minutes in all, so a Redis restart or failover
/// does not leave the sockets closed meanwhile counted against their users for a day.
const SOCKET_CLOSE_TRIES: u32 = 9;
const SOCKET_CLOSE_RETRY: Duration = Duration::from_secs(1);
const SOCKET_CLOSE_RETRY_MAX: Duration = Duration::from_secs(30);

pub(super) struct Cluster {
    node: Arc<ClusterNode>,
}

impl Cluster {
    pub(super) fn new(node: Arc<ClusterNode>) -> Cluster {
        Cluster { node }
    }

    /// The cap counts the host's rooms on every node, atomically in Redis; the room is
    /// saved, then placed: the node rendezvous hashing picks activates it. A room not
    /// created gives its cap slot back.
    pub(super) async fn create(&self, deps: &RoomDeps, caps: Caps, new: NewRoom) -> Result<(), Refused> {
        let cluster = &self.node;
        if new.seed.is_some() {
            return Err(Refused::SeedNotAllowed);
        }
        let (host, room_id) = (new.host.clone(), new.room_id.clone());
        let taken = cluster.quota.take(&host, &room_id, caps.open_rooms_per_user).await;
        if !taken.map_err(|_| Refused::Unavailable)? {
            return Err(Refused::TooManyRooms);
        }
        let saved = match initial_info(&new, &deps.node_id, deps.clock.now_ms()) {
            Ok(info) => deps.store.put_room(&info).await.map_err(|_| Refused::Unavailable),
            Err(e) => Err(Refused::Invalid(e)),
        };
        if let Err(e) = saved {
            let _ = cluster.quota.give_back(&host, &room_id).await;
            return Err(e);
        }
        cluster.locate(&room_id).await.map_err(|_| Refused::Unavailable)?;
        Ok(())
    }

    pub(super) async fn take_waiting_seat(&self, user: &PlayerId, room: &str, cap: usize) -> Result<bool, StoreError> {
        self.node.seats.take(user, room, cap).await
    }

    pub(super) async fn lobby_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
        filter: &LobbyFilter,
    ) -> Result<(Vec<RoomInfo>, Option<String>), StoreError> {
        self.node.store.lobby_page(cursor, limit, filter).await
    }

    /// A cluster node that cannot reach Redis refuses the socket: it could not serve it
    /// anyway (rooms, their logs and the bus are all in Redis), and a socket it did not
    /// count would be taken off the count when it closes, letting the user past the cap
    /// later.
    pub(super) async fn open_socket(&self, user: &PlayerId, cap: usize) -> Result<(), SocketRefused> {
        match tokio::time::timeout(SOCKET_COUNT_TIMEOUT, self.node.sockets.open(user, cap)).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(SocketRefused::Full),
            Ok(Err(e)) => Err(SocketRefused::Unreachable(e)),
            Err(_) => Err(SocketRefused::TimedOut),
        }
    }

    /// A count that never comes back expires with the user's hash (`SOCKETS_TTL`).
    pub(super) fn close_socket(&self, user: &PlayerId) {
        let (sockets, user) = (self.node.sockets.clone(), user.clone());
        tokio::spawn(async move {
            let mut pause = SOCKET_CLOSE_RETRY;
            for attempt in 1..=SOCKET_CLOSE_TRIES {
                match tokio::time::timeout(SOCKET_COUNT_TIMEOUT, sockets.close(&user)).await {
                    Ok(Ok(())) => return,
                    Ok(Err(e)) => debug!(user = %user, attempt, error = %e, "closed socket not yet uncounted in Redis"),
                    Err(_) => debug!(user = %user, attempt, "closed socket not yet uncounted in Redis: timed out"),
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(SOCKET_CLOSE_RETRY_MAX);
            }
            // `info`: a long Redis outage closes many sockets, and the node warns of the
            // outage itself.
            info!(user = %user, "a closed socket stays counted against its user until the count expires: Redis unreachable");
        });
    }

    /// Redis answers; the bus heard its own probe lately; the reconciler's last pass
    /// succeeded with nothing pending.
    pub(super) async fn readiness(&self, now_ms: i64) -> Readiness {
        let cluster = &self.node;
        if !cluster.store.ping().await {
            return Readiness::StoreUnreachable;
        }
        let bus = cluster.bus_check();
        if !bus.verified() {
            let silent_ms = bus.silence().map(|s| u64::try_from(s.as_millis()).unwrap_or(u64::MAX));
            return Readiness::BusUnverified { silent_ms };
        }
        if let Some(unready) = cluster.reconciled().unready() {
            return Readiness::Reconciling(unready);
        }
        let live = cluster.members.live(now_ms).await.map(|m| m.len()).unwrap_or(0);
        Readiness::Ready { live_nodes: Some(live) }
    }

    /// The membership's live nodes with what each last reported (three heartbeats make
    /// the membership's TTL).
    pub(super) async fn nodes(&self, now_ms: i64) -> Result<Vec<NodeRow>, StoreError> {
        let ttl = (self.node.config.heartbeat_ms * 3) as i64;
        let store = &self.node.store;
        ops::nodes(&store.connection(), store.keys(), now_ms, ttl).await
    }

    pub(super) fn spawn_stats_reporter<F>(&self, supervisor: &Arc<Supervisor>, every: Duration, stats: F)
    where
        F: Fn() -> serde_json::Value + 'static,
    {
        let (cluster, stats) = (self.node.clone(), std::rc::Rc::new(stats));
        supervisor.spawn("node_stats", Policy::Restart, move || {
            let (cluster, stats) = (cluster.clone(), stats.clone());
            async move {
                loop {
                    let report = stats();
                    let conn = cluster.store.connection();
                    if let Err(e) = ops::report(&conn, cluster.store.keys(), cluster.id(), &report).await {
                        debug!(error = %e, "node stats not reported");
                    }
                    tokio::time::sleep(every).await;
                }
            }
        });
    }

    pub(super) async fn admin_rooms(
        &self,
        cursor: Option<&str>,
        limit: usize,
        filter: &RoomFilter,
    ) -> Result<(Vec<RoomRow>, Option<String>), StoreError> {
        let store = &self.node.store;
        ops::rooms_page(&store.connection(), store.keys(), cursor, limit, filter).await
    }

    /// `node` must be live; it is asked over the bus and accepts.
    pub(super) async fn drain_node(&self, node: &str, by: String, now_ms: i64) -> Result<(), DrainRefused> {
        let cluster = &self.node;
        let live = cluster.members.live(now_ms).await.map_err(|_| DrainRefused::Unavailable)?;
        if !live.iter().any(|m| m.id == node) {
            return Err(DrainRefused::UnknownNode);
        }
        match cluster.request_node(node, |req| NodeCmd::Drain { req, by }).await {
            Reply::Accepted => Ok(()),
            _ => Err(DrainRefused::Unavailable),
        }
    }

    /// Sockets a previous run of this node id counted died with it: their counts go
    /// before this node is live again (the other nodes would count them meanwhile).
    pub(super) async fn run(&self, threads: Arc<RoomThreads>, supervisor: &Arc<Supervisor>) {
        match self.node.sockets.forget_previous().await {
            Ok(0) => {}
            Ok(users) => info!(users, "socket counts of this node id's previous run zeroed"),
            Err(e) => {
                warn!(error = %e, "socket counts of this node id's previous run not zeroed; they expire in a day")
            }
        }
        self.node.run(Some(threads), supervisor);
    }

    pub(super) async fn hand_over(&self, within: Duration) {
        self.node.hand_over_all(within).await;
    }

    pub(super) async fn leave(&self) {
        self.node.leave().await;
    }
}
