//! The rooms service: every room operation the gateway needs, whatever the node's mode.
//! [`RoomsService`] is built once at start-up, for an embedded node
//! ([`RoomsService::embedded`]: its directory and its store, perhaps a file store) or
//! for a cluster node ([`RoomsService::cluster`]: its `ClusterNode`, whose Redis holds
//! the rooms, their owners, the per-user caps and the membership). Its operations are
//! domain operations: create a room with its caps checked, the lobby's pages, a user's
//! waiting seats and open sockets, a player's game records, the operators' room and node
//! listings and a node's drain, the facts readiness reads, and what start-up and
//! shutdown do. The gateway holds no store, file store or cluster handle, and no Redis
//! key: it calls these and turns their answers into HTTP.
//!
//! Rooms themselves are reached through `room_ref.rs`'s [`Rooms`] ([`RoomsService::ask`],
//! `info` and `inspect`, which wait out a move; a WebSocket session's
//! [`RoomsService::session_rooms`]), so a room verb is a `RoomRef`'s whatever the mode.
//!
//! - `embedded.rs`: what only an embedded node does (its caps counted in its directory
//!   and in memory, its file store's probe and data file);
//! - `cluster.rs`: what only a cluster node does (caps in Redis, the lobby index, the
//!   operators' cluster-wide reads, the bus, hand-over and leave).

mod cluster;
mod embedded;

use crate::cluster::node::ClusterNode;
pub use crate::cluster::node::Unready;
pub use crate::cluster::ops::{NodeRow, RoomFilter, RoomRow};
use crate::error::StoreError;
use crate::info::RoomInfo;
pub use crate::lobby::LobbyFilter;
use crate::log::{GameRecord, StoredGame};
use crate::messages::{Ask, RoomOpError};
use crate::resume::Resumed;
use crate::room::RoomDeps;
use crate::room_ref::{Caller, Inspection, Rooms};
use crate::session_rooms::SessionRooms;
use crate::sessions::Sessions;
use crate::spawn::{CreateError, NewRoom};
use crate::store::file::FileStore;
use crate::store::RoomStore;
use crate::supervise::Supervisor;
use crate::threads::RoomThreads;
use cluster::Cluster;
use embedded::Embedded;
use engine::PlayerId;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The per-user caps the service enforces (`rooms.max_open_per_user`,
/// `rooms.max_waiting_seats_per_user`, `ws.max_sockets_per_user`).
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub open_rooms_per_user: usize,
    pub waiting_seats_per_user: usize,
    pub sockets_per_user: usize,
}

/// Why a room was not created, or a seat not allowed.
#[derive(Debug)]
pub enum Refused {
    /// The user already has `Caps::open_rooms_per_user` open rooms.
    TooManyRooms,
    /// The user already sits in `Caps::waiting_seats_per_user` waiting rooms.
    TooManyWaitingSeats,
    /// The game or its options.
    Invalid(CreateError),
    /// A fixed seed, which a cluster node does not take.
    SeedNotAllowed,
    /// The store (or Redis) did not answer.
    Unavailable,
}

/// Why a user's socket was not counted ([`RoomsService::open_socket`]).
#[derive(Debug)]
pub enum SocketRefused {
    /// The user already has `Caps::sockets_per_user` sockets open.
    Full,
    /// The count could not be kept (an embedded node's table is unusable).
    Broken,
    /// Redis answered an error.
    Unreachable(StoreError),
    /// Redis did not answer in time.
    TimedOut,
}

/// Why a node's drain was not asked for ([`RoomsService::drain_node`]).
#[derive(Debug, PartialEq, Eq)]
pub enum DrainRefused {
    UnknownNode,
    Unavailable,
}

/// What `/readyz` reports beyond the node's own flags (draining, its core tasks).
#[derive(Debug)]
pub enum Readiness {
    /// Ready; a cluster node says how many nodes are live.
    Ready { live_nodes: Option<usize> },
    /// Redis does not answer (cluster).
    StoreUnreachable,
    /// The embedded node's disk cannot take a write.
    StoreUnavailable,
    /// No bus probe came back lately (cluster).
    BusUnverified { silent_ms: Option<u64> },
    /// Rooms this node should hold may not be restored yet (cluster).
    Reconciling(Unready),
}

/// Every room operation of the gateway; the mode is decided once, when it is built.
pub struct RoomsService {
    rooms: Rooms,
    deps: RoomDeps,
    caps: Caps,
    sessions: Arc<Sessions>,
    drain_request: Arc<tokio::sync::Notify>,
    mode: Mode,
}

enum Mode {
    Embedded(Embedded),
    Cluster(Cluster),
}

impl RoomsService {
    /// An embedded node: its rooms are in `deps.directory`, kept in `deps.store`
    /// (`file_store`: the same store when it is the durable one).
    pub fn embedded(deps: RoomDeps, file_store: Option<FileStore>, caps: Caps) -> RoomsService {
        RoomsService {
            rooms: Rooms::new(deps.node_id.clone(), deps.directory.clone(), None),
            sessions: Arc::new(Sessions::new()),
            drain_request: Arc::default(),
            mode: Mode::Embedded(Embedded::new(file_store)),
            deps,
            caps,
        }
    }

    /// A cluster node (`deps` as given to `node`).
    pub fn cluster(deps: RoomDeps, node: Arc<ClusterNode>, caps: Caps) -> RoomsService {
        RoomsService {
            rooms: Rooms::new(deps.node_id.clone(), deps.directory.clone(), Some(node.clone())),
            sessions: node.sessions().clone(),
            drain_request: node.drain_request.clone(),
            mode: Mode::Cluster(Cluster::new(node)),
            deps,
            caps,
        }
    }

    /// Asks `room` `verb` (any request of `messages.rs`) wherever it runs, waiting out
    /// a move (`Rooms::ask`): its answer, its refusal, `unknown_room`, or
    /// `room_unavailable`.
    pub async fn ask<V: Ask>(&self, room: &str, verb: V) -> Result<V::Answer, RoomOpError> {
        self.rooms.ask(room, verb).await
    }

    /// `room`'s public info wherever it runs (`Rooms::info`).
    pub async fn info(&self, room: &str) -> Result<RoomInfo, RoomOpError> {
        self.rooms.info(room).await
    }

    /// Operators: what `room` is doing and on which node (`Rooms::inspect`).
    pub async fn inspect(&self, room: &str) -> Result<Inspection, RoomOpError> {
        self.rooms.inspect(room).await
    }

    /// A WebSocket session's rooms, each reached through a route that heals itself
    /// (`session_rooms.rs`); `errors` counts the error frames it sends the client.
    pub fn session_rooms(&self, caller: Caller, errors: prometheus::IntCounter) -> SessionRooms {
        SessionRooms::new(self.rooms.clone(), caller, errors)
    }

    /// Whether rooms can move between nodes (cluster mode): sessions then re-check their
    /// routes.
    pub fn rooms_move(&self) -> bool {
        matches!(self.mode, Mode::Cluster(_))
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.deps.node_id
    }

    /// The node's clock, epoch ms.
    pub fn now_ms(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    /// Rooms running on this node.
    pub fn local_rooms(&self) -> usize {
        self.deps.directory.len()
    }

    /// This node's WebSocket sessions (in cluster mode the registry other nodes' frames
    /// for them arrive through).
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Notified to drain this node (the operators' API; in cluster mode also another
    /// node's request over the bus).
    pub fn drain_request(&self) -> &Arc<tokio::sync::Notify> {
        &self.drain_request
    }

    /// Creates `new` for its host: the host's waiting seats and open rooms checked
    /// against their caps first (the host sits in the new room from the start). An
    /// embedded node stores the room before it answers, so a restart brings it back
    /// even if nobody else ever sits in it (issue 57); a cluster node saves it and
    /// places it on the node rendezvous hashing picks.
    pub async fn create(&self, new: NewRoom) -> Result<(), Refused> {
        self.take_waiting_seat(&new.host, &new.room_id).await?;
        match &self.mode {
            Mode::Embedded(_) => embedded::create(&self.deps, self.caps, new).await,
            Mode::Cluster(c) => c.create(&self.deps, self.caps, new).await,
        }
    }

    /// Allows `user` a seat in `room` (or a new room of theirs) unless they already sit in
    /// `Caps::waiting_seats_per_user` waiting rooms other than it, so one guest cannot
    /// squat seats across the lobby. In a cluster the count comes from the user's own
    /// index of seats (`WaitingSeats`: their few rooms, never every room), which this adds
    /// `room` to.
    pub async fn take_waiting_seat(&self, user: &PlayerId, room: &str) -> Result<(), Refused> {
        let cap = self.caps.waiting_seats_per_user;
        let allowed = match &self.mode {
            Mode::Embedded(_) => self.deps.directory.waiting_seats_of(user, Some(room)) < cap,
            Mode::Cluster(c) => c.take_waiting_seat(user, room, cap).await.map_err(|_| Refused::Unavailable)?,
        };
        if allowed {
            Ok(())
        } else {
            Err(Refused::TooManyWaitingSeats)
        }
    }

    /// One page of the lobby (`lobby.rs`) after `cursor`: the rooms and the next page's
    /// cursor when more remain.
    pub async fn lobby_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
        filter: &LobbyFilter,
    ) -> Result<(Vec<RoomInfo>, Option<String>), StoreError> {
        match &self.mode {
            Mode::Embedded(_) => Ok(embedded::lobby_page(&self.deps, cursor, limit, filter)),
            Mode::Cluster(c) => c.lobby_page(cursor, limit, filter).await,
        }
    }

    /// `user`'s finished games, newest first, before `before` (epoch ms).
    pub async fn games_of(
        &self,
        user: &PlayerId,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<GameRecord>, StoreError> {
        self.deps.store.games_of(user, before, limit).await
    }

    /// A finished game's record.
    pub async fn game_record(&self, game_pk: &str) -> Result<Option<GameRecord>, StoreError> {
        self.deps.store.record(game_pk).await
    }

    /// A game's stored log (what a replay is rebuilt from).
    pub async fn game_log(&self, game_pk: &str) -> Result<Option<StoredGame>, StoreError> {
        self.deps.store.load(game_pk).await
    }

    /// Takes one of `user`'s socket slots (`Caps::sockets_per_user`). An embedded node
    /// counts in memory; a cluster node counts the user's sockets on every live node, in
    /// Redis (`UserSockets`).
    pub async fn open_socket(&self, user: &PlayerId) -> Result<(), SocketRefused> {
        let cap = self.caps.sockets_per_user;
        match &self.mode {
            Mode::Embedded(e) => e.open_socket(user, cap),
            Mode::Cluster(c) => c.open_socket(user, cap).await,
        }
    }

    /// Gives back a slot [`RoomsService::open_socket`] took. In cluster mode the count in
    /// Redis is updated in the background, tried again a few times if Redis fails.
    pub fn close_socket(&self, user: &PlayerId) {
        match &self.mode {
            Mode::Embedded(e) => e.close_socket(user),
            Mode::Cluster(c) => c.close_socket(user),
        }
    }

    /// What readiness depends on in this mode (Redis, the bus, reconciling; the embedded
    /// node's disk).
    pub async fn readiness(&self) -> Readiness {
        match &self.mode {
            Mode::Embedded(e) => e.readiness().await,
            Mode::Cluster(c) => c.readiness(self.now_ms()).await,
        }
    }

    /// The live nodes as operators see them, sorted by id. An embedded node is the only
    /// one (`draining_here`: whether it drains; it reports no stats of its own).
    pub async fn nodes(&self, draining_here: bool) -> Result<Vec<NodeRow>, StoreError> {
        match &self.mode {
            Mode::Embedded(_) => Ok(vec![NodeRow {
                id: self.deps.node_id.clone(),
                draining: draining_here,
                last_heartbeat_ms: self.now_ms(),
                stats: None,
                peer: None,
            }]),
            Mode::Cluster(c) => c.nodes(self.now_ms()).await,
        }
    }

    /// Cluster mode: publishes `stats()` (this node's report) every `every` for the other
    /// nodes' node listings, as the supervised task `node_stats` (started again if it
    /// ends: each report stands alone). Nothing on an embedded node.
    pub fn spawn_stats_reporter<F>(&self, supervisor: &Arc<Supervisor>, every: Duration, stats: F)
    where
        F: Fn() -> serde_json::Value + 'static,
    {
        if let Mode::Cluster(c) = &self.mode {
            c.spawn_stats_reporter(supervisor, every, stats);
        }
    }

    /// A page of open rooms for operators, in room-id order after `cursor`: up to `limit`
    /// rows and the next page's cursor. An embedded node lists its own rooms (the seq of
    /// started games read from each room); a cluster node reads Redis in a fixed number
    /// of round trips (`cluster::ops`).
    pub async fn admin_rooms(
        &self,
        cursor: Option<&str>,
        limit: usize,
        filter: &RoomFilter,
    ) -> Result<(Vec<RoomRow>, Option<String>), StoreError> {
        match &self.mode {
            Mode::Embedded(_) => Ok(embedded::admin_rooms(&self.deps, &self.rooms, cursor, limit, filter).await),
            Mode::Cluster(c) => c.admin_rooms(cursor, limit, filter).await,
        }
    }

    /// Asks another live node to drain (`NodeCmd::Drain`, by the operator `by`). An
    /// embedded node knows no other node.
    pub async fn drain_node(&self, node: &str, by: String) -> Result<(), DrainRefused> {
        match &self.mode {
            Mode::Embedded(_) => Err(DrainRefused::UnknownNode),
            Mode::Cluster(c) => c.drain_node(node, by, self.now_ms()).await,
        }
    }

    /// An embedded node on a durable store: every open room of the store running again
    /// (`None`: nothing to resume, in memory or in a cluster).
    pub async fn resume(&self) -> Result<Option<Resumed>, StoreError> {
        match &self.mode {
            Mode::Embedded(e) if e.durable() => crate::resume::resume_open_rooms(&self.deps).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Cluster mode: the node's socket counts of a previous run zeroed, then its core
    /// tasks started (membership, leases, bus, reconciler) under `supervisor`.
    pub async fn run(&self, threads: Arc<RoomThreads>, supervisor: &Arc<Supervisor>) {
        if let Mode::Cluster(c) = &self.mode {
            c.run(threads, supervisor).await;
        }
    }

    /// A drain's first step: every room handed over to its next owner after its last
    /// append, within `within` (cluster mode; an embedded node keeps its rooms).
    pub async fn hand_over(&self, within: Duration) {
        if let Mode::Cluster(c) = &self.mode {
            c.hand_over(within).await;
        }
    }

    /// A drain's last step: the node leaves the membership (cluster mode).
    pub async fn leave(&self) {
        if let Mode::Cluster(c) = &self.mode {
            c.leave().await;
        }
    }

    /// The embedded node's data file, on the file store.
    pub fn data_file(&self) -> Option<&Path> {
        match &self.mode {
            Mode::Embedded(e) => e.data_file(),
            Mode::Cluster(_) => None,
        }
    }

    /// The node's store, for tests and tools that read what rooms kept (handlers call
    /// the operations above).
    pub fn store(&self) -> Arc<dyn RoomStore> {
        self.deps.store.clone()
    }

    /// The embedded node's file store, for tests that break it.
    pub fn file_store(&self) -> Option<FileStore> {
        match &self.mode {
            Mode::Embedded(e) => e.file_store(),
            Mode::Cluster(_) => None,
        }
    }
}
