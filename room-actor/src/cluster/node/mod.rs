//! A node in cluster mode: membership heartbeats, lease renewal, failover scans, lazy
//! activation of rooms it should own, and the bus loop that connects gateways on other
//! nodes to the rooms here (and rooms here to sessions there). The bus side (requests to
//! other nodes, and serving theirs) is in [`serve`]. Here: the node, activation and drain.
//!
//! The loops [`ClusterNode::run`] starts and supervises each have a module of their own:
//! the bus receiver and its end-to-end check in [`receive`], the route board's refresh in
//! [`route_board`], the heartbeat in [`heartbeat`], the lease check in [`lease_check`], the
//! reconciler in [`reconcile`], failure detection in [`failure_detection`]. Each keeps
//! its state in the node or in a timer, so a fresh start (a loop that ends is started
//! again, `supervise.rs`) picks up where the last one stopped; what a fresh start must do
//! at once is said where it matters.

mod backlog;
mod failure_detection;
mod heartbeat;
mod lease_check;
mod receive;
mod reconcile;
mod route_board;
mod serve;

pub use heartbeat::MEMBERSHIP_SWEEP_EVERY;
pub use lease_check::LEASE_CHECK_EVERY;
pub use receive::{BusCheck, PROBE_EVERY, PROBE_EVERY_UNVERIFIED, UNVERIFIED_AFTER};
pub use reconcile::{Reconciled, Unready};

use crate::cluster::bus::{Publisher, Reply};
use crate::cluster::failover::{Detector, FailoverMetrics};
use crate::cluster::lease::Leases;
use crate::cluster::link::{LinkKey, Links, PeerBook};
use crate::cluster::membership::Membership;
use crate::cluster::outbox::Outboxes;
use crate::cluster::placement;
use crate::cluster::quota::{RoomQuota, UserSockets, WaitingSeats};
use crate::cluster::routes::RouteBoard;
use crate::directory::{RoomHandle, RoomInfo};
use crate::error::{RebuildError, StoreError};
use crate::log::StoredGame;
use crate::room::{RoomActor, RoomDeps};
use crate::sessions::Sessions;
use crate::store::redis::RedisStore;
use crate::store::{Fence, RoomStore};
use crate::supervise::{Policy, Supervisor};
use crate::threads::RoomThreads;
use engine::registry::{self, GameVisitor};
use engine::Game;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::{info, warn};

/// Rooms handed over at once during a drain (each is one mailbox turn and one Redis call).
const HANDOVER_CONCURRENCY: usize = 64;
/// Rooms activated at once (each is a few Redis round trips and a rebuild from the
/// latest snapshot); more wait for a slot, so a node taking over a thousand rooms keeps
/// serving the ones it already has.
pub const ACTIVATION_CONCURRENCY: usize = 128;

/// How a node gets a room's lease before restoring it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Only if nobody holds it (a new room, or one whose lease expired or was released).
    Free,
    /// From the holder with this exact token, even before its lease expires: a node
    /// known dead, or this node id's previous process (restarted with the same id).
    From(String),
}

#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub node_id: String,
    pub redis: crate::redis::target::RedisTarget,
    /// Key prefix (and bus channel prefix) shared by the nodes of one cluster.
    pub prefix: String,
    pub lease_ms: u64,
    pub heartbeat_ms: u64,
    /// How long a frame to another node waits after its first message for more
    /// (`ROOMD__CLUSTER__BATCH_WINDOW_MS`; zero: not at all). See `outbox.rs`.
    pub batch_window: Duration,
    /// Peer links (`link.rs`): where this node takes them and the key; `None`: frames to
    /// and from this node go through Redis.
    pub peer: Option<PeerConfig>,
}

/// This node's side of peer links.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// The address other nodes dial (`ROOMD__CLUSTER__PEER_ADVERTISE`).
    pub advertise: String,
    pub key: Arc<LinkKey>,
}

/// Where a room is now.
pub enum Owner {
    Here(RoomHandle),
    /// On another node: `token` is its lease there (`None`: placement names `node` and
    /// nobody holds it yet).
    There {
        node: String,
        token: Option<String>,
    },
    /// The room exists but nobody can take it this moment (a drain, a failover, a lease
    /// in transition): callers answer `room_unavailable` and try again.
    Moving,
    /// No such room (never created, or expired).
    Unknown,
}

pub struct ClusterNode {
    pub config: ClusterConfig,
    pub store: RedisStore,
    pub leases: Leases,
    pub members: Membership,
    /// Everything this node sends to other nodes (one outbox per destination).
    pub outboxes: Outboxes,
    deps: RoomDeps,
    /// Rooms whose lease this node holds, with the token.
    held: Mutex<crate::FastMap<String, String>>,
    /// This node's own sockets, for messages arriving from rooms elsewhere (the node's
    /// one session registry: the gateway uses the same).
    sessions: Arc<Sessions>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    next_req: AtomicU64,
    /// Rooms whose commands from other nodes wait behind a slow one (`backlog.rs`).
    backlogs: backlog::Backlogs<serve::Waiting>,
    pub draining: AtomicBool,
    /// One activation at a time per room (a second waits and finds the first's result).
    activating: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// At most [`ACTIVATION_CONCURRENCY`] rooms activated at once.
    activation_slots: tokio::sync::Semaphore,
    pub failover: FailoverMetrics,
    pub quota: RoomQuota,
    /// The per-user cap on seats in waiting rooms, from each user's own index.
    pub seats: WaitingSeats,
    /// The per-user cap on open sockets, counted on every live node.
    pub sockets: UserSockets,
    /// Failure detection's state, fed by its polls; also when each node's bus subscription
    /// was last seen (`roomd_failover_resume_seconds` times a room taken over from a node
    /// from there, whichever path takes it, the failover scan or a lookup).
    detector: Mutex<Detector>,
    /// Wakes the reconciler at once, for a pass over every open room (a node died or left).
    rescan: tokio::sync::Notify,
    /// Where the rooms this node's sessions watch elsewhere are (`routes.rs`), and what
    /// wakes its refresh at once (a node died or left).
    pub routes: RouteBoard,
    reroute: tokio::sync::Notify,
    /// What the reconciler last found (`reconcile.rs`).
    reconciled: Reconciled,
    /// Notified when an operator asks (over the bus) for this node to drain; the gateway
    /// then drains exactly as on SIGTERM.
    pub drain_request: Arc<tokio::sync::Notify>,
    /// The HTTP workers (set by [`ClusterNode::run`]): rooms the node's own tasks restore
    /// start there, beside the sockets and the bus receiver.
    threads: std::sync::OnceLock<Arc<RoomThreads>>,
    /// Where the other nodes take peer links (read with the live nodes).
    peers: PeerBook,
    /// The socket peer links come in on: each start of the bus receiver listens on a
    /// copy of it, so a receiver started again takes links on the same port.
    peer_listener: Mutex<Option<std::net::TcpListener>>,
    /// Publishes the bus probes (`receive.rs`) through Redis, whatever the peer links.
    probes: Publisher,
    /// When a frame last came back through the bus subscription (readiness).
    bus_check: BusCheck,
    /// The node's core tasks' supervisor (set by [`ClusterNode::run`]): a backlog's task
    /// counts a panic it went on past there.
    supervisor: std::sync::OnceLock<Arc<Supervisor>>,
}

struct Restore {
    info: RoomInfo,
    stored: Option<StoredGame>,
    deps: RoomDeps,
    token: String,
}

/// A restored room, ready to start on whichever thread calls it.
type Starter = Box<dyn FnOnce() -> RoomHandle + Send>;

impl GameVisitor for Restore {
    type Output = Result<Starter, RebuildError>;
    fn visit<G: Game>(self) -> Self::Output {
        let room = RoomActor::<G>::restore(self.info, self.stored, self.deps, Fence::Lease(self.token))?;
        Ok(Box::new(move || room.spawn()))
    }
}

impl ClusterNode {
    /// `deps.store` must be `store` (the rooms of a cluster node persist to Redis).
    pub fn new(
        config: ClusterConfig,
        store: RedisStore,
        deps: RoomDeps,
        failover: FailoverMetrics,
    ) -> Result<Arc<ClusterNode>, prometheus::Error> {
        let keys = store.keys().clone();
        let conn = store.connection();
        let publisher = Publisher::new(store.thread_conns(), &config.prefix);
        let probes = publisher.clone();
        let detector = Detector::with_min_silence(store.topology().bus_silence(config.heartbeat_ms));
        let peers = PeerBook::default();
        let mut outboxes = Outboxes::new(publisher, config.batch_window);
        if let Some(peer) = &config.peer {
            outboxes = outboxes.with_links(Arc::new(Links {
                key: peer.key.clone(),
                me: config.node_id.clone(),
                book: peers.clone(),
                metrics: deps.metrics.clone(),
            }));
        }
        Ok(Arc::new(ClusterNode {
            leases: Leases::new(conn.clone(), keys.clone(), &config.node_id, config.lease_ms),
            quota: RoomQuota::new(conn.clone(), keys.clone()),
            seats: WaitingSeats::new(conn.clone(), keys.clone(), deps.waiting_ttl),
            sockets: UserSockets::new(conn.clone(), keys.clone(), &config.node_id),
            members: Membership::new(conn.clone(), keys, (config.heartbeat_ms * 3) as i64),
            outboxes,
            config,
            store,
            deps,
            held: Mutex::default(),
            sessions: Arc::new(Sessions::new()),
            pending: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(1),
            backlogs: backlog::Backlogs::default(),
            draining: AtomicBool::new(false),
            activating: Mutex::new(HashMap::new()),
            activation_slots: tokio::sync::Semaphore::new(ACTIVATION_CONCURRENCY),
            failover,
            detector: Mutex::new(detector),
            rescan: tokio::sync::Notify::new(),
            routes: RouteBoard::new(),
            reroute: tokio::sync::Notify::new(),
            reconciled: Reconciled::new()?,
            drain_request: Arc::new(tokio::sync::Notify::new()),
            threads: std::sync::OnceLock::new(),
            peers,
            peer_listener: Mutex::new(None),
            probes,
            bus_check: BusCheck::new(),
            supervisor: std::sync::OnceLock::new(),
        }))
    }

    /// Takes peer links on `listener` (bound to the address `config.peer` advertises, or
    /// one that reaches it) once [`Self::run`] starts the bus receiver (and on a copy of
    /// it each time the receiver starts again).
    pub fn listen_for_peers(&self, listener: std::net::TcpListener) {
        if let Ok(mut slot) = self.peer_listener.lock() {
            *slot = Some(listener);
        }
    }

    pub fn id(&self) -> &str {
        &self.config.node_id
    }

    fn now_ms(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    /// Live nodes that take rooms.
    async fn placeable(&self) -> Result<Vec<String>, StoreError> {
        let live = self.members.live(self.now_ms()).await?;
        Ok(live.into_iter().filter(|m| !m.draining).map(|m| m.id).collect())
    }

    /// Finds (and, when it should be here, activates) the room's owner.
    pub async fn locate(self: &Arc<Self>, room: &str) -> Result<Owner, StoreError> {
        if self.holds(room) {
            if let Some(handle) = self.deps.directory.handle(room) {
                return Ok(Owner::Here(handle));
            }
        }
        let claim = match self.leases.holder(room).await? {
            Some(token) => {
                let node = Leases::node_of(&token).to_owned();
                if node == self.id() {
                    // A lease with this node's id that this process does not hold: its
                    // previous incarnation's (restarted with the same id) or a claim whose
                    // answer was lost. Taken back at once with a higher epoch instead of
                    // waiting for it to lapse. A room held here whose actor stopped is
                    // being handed over or closed: its lease is released shortly.
                    if self.holds(room) || self.draining.load(Ordering::Relaxed) {
                        return Ok(Owner::Moving);
                    }
                    return Ok(match self.take_back(room, &token).await? {
                        Some(handle) => Owner::Here(handle),
                        None => Owner::Moving,
                    });
                }
                if self.members.is_live(&node, self.now_ms()).await? {
                    return Ok(Owner::There { node, token: Some(token) });
                }
                // Its holder is no longer a live node (found dead, gone, or silent past
                // its heartbeat): the room goes where placement says now, not when the
                // lease's TTL runs out. The failover scan does the same for open rooms;
                // this covers a lookup that comes first, and an ended room kept for its
                // watchers, which the scan does not look at. Placement's node takes it
                // over when asked.
                Claim::From(token)
            }
            None if self.store.room(room).await?.is_none() => return Ok(Owner::Unknown),
            None => Claim::Free,
        };
        let nodes = self.placeable().await?;
        match placement::owner(room, nodes.iter().map(String::as_str)) {
            Some(owner) if owner == self.id() => match self.activate_with(room, claim).await? {
                Some(handle) => Ok(Owner::Here(handle)),
                None => Ok(Owner::Moving),
            },
            Some(owner) => Ok(Owner::There { node: owner.to_owned(), token: None }),
            None => Ok(Owner::Moving),
        }
    }

    fn holds(&self, room: &str) -> bool {
        self.held.lock().map(|h| h.contains_key(room)).unwrap_or(false)
    }

    /// Claims the room's lease and restores it here; `None` if another node holds it or
    /// the room is unknown.
    pub async fn activate(self: &Arc<Self>, room: &str) -> Result<Option<RoomHandle>, StoreError> {
        self.activate_with(room, Claim::Free).await
    }

    /// Takes the room's lease from `holder` (a token with this node's id that this
    /// process does not hold: see [`Leases::take_over`]) and restores the room here.
    pub async fn take_back(self: &Arc<Self>, room: &str, holder: &str) -> Result<Option<RoomHandle>, StoreError> {
        self.activate_with(room, Claim::From(holder.to_owned())).await
    }

    /// [`ClusterNode::activate`] with the given way of taking the lease. Activations of
    /// different rooms run concurrently (at most [`ACTIVATION_CONCURRENCY`]); two of the
    /// same room run one after the other, and the second finds the first's actor.
    pub async fn activate_with(self: &Arc<Self>, room: &str, how: Claim) -> Result<Option<RoomHandle>, StoreError> {
        // A task of its own: it holds the room's activation lock, and a caller that stops
        // being polled (a session's lookup whose actor waits on something else) must not
        // hold every later activation of the room, the reconciler's too, with it. A
        // caller that goes away leaves the activation to finish.
        let (node, room) = (self.clone(), room.to_owned());
        match actix::spawn(async move { node.activate_one_at_a_time(&room, how).await }).await {
            Ok(activated) => activated,
            Err(e) => Err(StoreError::Unavailable(format!("the activation task ended: {e}"))),
        }
    }

    async fn activate_one_at_a_time(
        self: &Arc<Self>,
        room: &str,
        how: Claim,
    ) -> Result<Option<RoomHandle>, StoreError> {
        let room_lock = match self.activating.lock() {
            Ok(mut map) => map.entry(room.to_owned()).or_default().clone(),
            Err(_) => return Err(StoreError::Unavailable("activation table poisoned".into())),
        };
        let result = {
            let _this_room = room_lock.lock().await;
            match self.activation_slots.acquire().await {
                Ok(_slot) => self.activate_locked(room, how).await,
                Err(_) => Err(StoreError::Unavailable("activation slots closed".into())),
            }
        };
        if let Ok(mut map) = self.activating.lock() {
            // Forget the room's lock when nobody else waits on it.
            if Arc::strong_count(&room_lock) == 2 {
                map.remove(room);
            }
        }
        result
    }

    /// Claims (or takes over) the room's lease, fences its log and reads it: what a
    /// restore needs, or `None` when another node holds it or the room is gone.
    async fn prepare_restore(
        &self,
        room: &str,
        how: &Claim,
    ) -> Result<Option<(String, RoomInfo, Option<StoredGame>)>, StoreError> {
        let token = match how {
            Claim::Free => self.leases.claim(room).await?,
            Claim::From(holder) => {
                let taken = self.leases.take_over(room, holder).await?;
                if taken.is_some() && Leases::node_of(holder) == self.id() {
                    info!(room, from = %holder, "lease taken back from this node's previous holder");
                }
                taken
            }
        };
        let Some(token) = token else { return Ok(None) };
        let Some(info) = self.store.room(room).await? else {
            self.leases.release(room, &token).await?;
            return Ok(None);
        };
        let stored = match &info.game_pk {
            Some(pk) => {
                // No entry of an older owner goes in once this node read the log.
                match self.store.fence(pk, &token).await {
                    Err(StoreError::Fenced) => return Ok(None),
                    fenced => fenced?,
                }
                self.store.load(pk).await?
            }
            None => None,
        };
        Ok(Some((token, info, stored)))
    }

    async fn activate_locked(self: &Arc<Self>, room: &str, how: Claim) -> Result<Option<RoomHandle>, StoreError> {
        if self.holds(room) {
            if let Some(handle) = self.deps.directory.handle(room) {
                return Ok(Some(handle));
            }
        }
        // The Redis half of a restore, bounded: one that hangs must not hold this room's
        // activation (and the reconciler's pass) for ever. Given up half way, a lease it
        // claimed carries this node's id and the next pass takes it back.
        let prepared = tokio::time::timeout(reconcile::ACTIVATE_WITHIN, self.prepare_restore(room, &how)).await;
        let Some((token, info, stored)) = prepared.map_err(|_| {
            StoreError::Unavailable(format!("restore not done within {:?}", reconcile::ACTIVATE_WITHIN))
        })??
        else {
            return Ok(None);
        };
        let game = info.game.clone();
        let resumes_a_game = stored.is_some();
        let restore = Restore { info, stored, deps: self.deps.clone(), token: token.clone() };
        match registry::visit(&game, restore).map(|r| r.map(|start| self.start_room(start))) {
            Some(Ok(start)) => {
                let Some(handle) = start.await else {
                    self.leases.release(room, &token).await?;
                    return Ok(None);
                };
                if resumes_a_game {
                    self.deps.metrics.rooms_restored.inc();
                }
                if let Ok(mut held) = self.held.lock() {
                    held.insert(room.to_owned(), token);
                }
                if let Claim::From(from) = &how {
                    let holder = Leases::node_of(from);
                    if holder != self.id() {
                        self.failover.failovers.inc();
                        let since = self.detector.lock().ok().and_then(|d| d.last_seen(holder));
                        if let Some(since) = since {
                            self.failover.resume.observe(since.elapsed().as_secs_f64());
                        }
                        info!(room, node = self.id(), from = %holder, "room taken over");
                    }
                }
                info!(room, node = self.id(), "room activated");
                Ok(Some(handle))
            }
            Some(Err(e)) => {
                warn!(room, error = %e, "room cannot be restored");
                self.leases.release(room, &token).await?;
                Ok(None)
            }
            None => {
                self.leases.release(room, &token).await?;
                Ok(None)
            }
        }
    }

    /// Starts a restored room: on a worker when this runs on the node's own thread (a
    /// failover scan), so the room runs beside the sockets and the bus receiver; where
    /// this runs otherwise (a request or a bus frame activated it, on a worker). `None`
    /// when the worker went away first.
    async fn start_room(&self, start: Starter) -> Option<RoomHandle> {
        match self.threads.get().and_then(|t| t.elsewhere()) {
            Some(worker) => {
                let (tx, rx) = oneshot::channel();
                worker.spawn_fn(move || {
                    let _ = tx.send(start());
                });
                rx.await.ok()
            }
            None => Some(start()),
        }
    }

    /// Starts the node's core tasks, each supervised by `supervisor` (`supervise.rs`): the
    /// bus receiver, the route board, heartbeats, lease checks, failover scans and failure
    /// detection. The bus receiver (the subscription, the peer-link listener, and the
    /// loop that hands each frame to its rooms and sockets) runs on the first of
    /// `threads` that runs, the worker the rooms and sockets it serves run on; without
    /// `threads` (a node without an HTTP server, in tests) it runs here, like the rest,
    /// on the current actix system.
    ///
    /// Every one of them is started again when it ends (a panic, a return, its thread
    /// gone), because none holds what a fresh start cannot rebuild: their state is the
    /// node's (leases held, routes, the failure detector, the membership in Redis) or a
    /// timer. The receiver loses what a dropped subscription loses (frames in flight,
    /// which senders resend or time out on); a heartbeat, lease check, scan or poll
    /// missed for a back-off is one late tick. A task that keeps ending spends its
    /// restart budget and the process exits (`supervise::decide`).
    pub fn run(self: &Arc<Self>, threads: Option<Arc<RoomThreads>>, supervisor: &Arc<Supervisor>) {
        if let Some(threads) = &threads {
            let _ = self.threads.set(threads.clone());
        }
        let _ = self.supervisor.set(supervisor.clone());
        supervisor.declare("bus_backlog");
        let node = self.clone();
        match threads {
            Some(threads) => {
                supervisor.spawn_on_worker("bus_receiver", Policy::Restart, threads, move || node.clone().receive())
            }
            None => supervisor.spawn("bus_receiver", Policy::Restart, move || node.clone().receive()),
        }
        let node = self.clone();
        supervisor.spawn("route_board", Policy::Restart, move || node.clone().refresh_routes());
        let node = self.clone();
        supervisor.spawn("heartbeat", Policy::Restart, move || node.clone().beat_on());
        let node = self.clone();
        supervisor.spawn("lease_check", Policy::Restart, move || node.clone().check_leases());
        let node = self.clone();
        supervisor.spawn("reconciler", Policy::Restart, move || node.clone().reconcile_on());
        let node = self.clone();
        supervisor.spawn("failure_detection", Policy::Restart, move || node.clone().detect_failures());
    }

    /// Drain: stop taking rooms, then hand each room over after its last append and
    /// release its lease, so the nodes placement picks next restore them at once.
    /// Rooms are handed over `HANDOVER_CONCURRENCY` at a time; whatever is not done
    /// `within` is left to its lease, which expires and lets failover restore it.
    pub async fn hand_over_all(self: &Arc<Self>, within: Duration) {
        self.draining.store(true, Ordering::Relaxed);
        self.deps.metrics.drains.inc();
        let started = Instant::now();
        // Other nodes stop placing rooms here; bounded, as everything in a drain is: with
        // Redis away it fails after its timeout and the handover below fails fast too.
        match tokio::time::timeout(within / 2, self.beat(true)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "draining heartbeat failed"),
            Err(_) => warn!("draining heartbeat timed out"),
        }
        let within = within.saturating_sub(started.elapsed());
        let held: Vec<(String, String)> =
            self.held.lock().map(|h| h.iter().map(|(r, t)| (r.clone(), t.clone())).collect()).unwrap_or_default();
        let total = held.len();
        let done = AtomicU64::new(0);
        let hand_over = futures_util::stream::iter(held).for_each_concurrent(HANDOVER_CONCURRENCY, |(room, token)| {
            let done = &done;
            async move {
                if let Some(handle) = self.deps.directory.handle(&room) {
                    let _ = handle.handover().send(crate::messages::Handover).await;
                }
                if let Err(e) = self.leases.release(&room, &token).await {
                    warn!(room = %room, error = %e, "lease not released; it will expire");
                }
                if let Ok(mut h) = self.held.lock() {
                    h.remove(&room);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        if tokio::time::timeout(within, hand_over).await.is_err() {
            warn!(node = self.id(), "drain deadline reached; the rooms left fail over when their leases expire");
        }
        let done = done.load(Ordering::Relaxed) as usize;
        info!(node = self.id(), handed_over = done, left = total - done, "drain handover finished");
    }

    /// Leaves the membership at once (after a drain).
    pub async fn leave(&self) {
        if let Err(e) = self.members.leave(self.id()).await {
            warn!(error = %e, "leave failed; the heartbeat will expire");
        }
    }
}
