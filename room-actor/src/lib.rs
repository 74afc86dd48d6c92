//! # room-actor: where rooms live
//!
//! One actix actor per room runs a game from the engine: the mailbox is the room's
//! fairness queue, every input is validated, applied, persisted and then broadcast.
//!
//! # Layout
//!
//! - [`cluster`]: membership, rendezvous placement and fenced leases on Redis.
//! - [`room`]: `RoomActor<G>`, the runner (`game-engine.md` §4), timers and bots.
//! - [`messages`]: the room verbs, each a message type (subscribe, act, seats, start,
//!   operators' verbs) with its handler in [`room`], and what rooms send (`ToClient`).
//! - [`protocol`]: the one room protocol's mechanism: the macros that turn `messages`'
//!   lists of verbs into the enums that carry any verb to a room, here or on another node.
//! - [`wire`]: server → client JSON, built once in the room (`ToClient`, one client's frame).
//! - [`room_ref`]: one way to reach a room wherever it lives ([`Rooms`] finds it, a
//!   [`RoomRef`] calls its verbs, here or on another node).
//! - [`rooms_service`]: every room operation the gateway needs ([`RoomsService`]: create,
//!   the lobby, per-user caps, game records, the operators' listings and drain, readiness,
//!   start-up and shutdown), one implementation for an embedded node and one for a
//!   cluster node, decided once at start-up; the gateway holds no store or cluster handle.
//! - [`sessions`]: this node's WebSocket sessions by id (frames from other nodes, drain).
//! - [`info`]: a room's public info (`RoomInfo`), under both messages and directory.
//! - [`directory`]: the rooms of this node, their public info and addresses.
//! - [`spawn`]: creating a room for a game id (options validated).
//! - [`log`]: the room log (bincode).
//! - [`store`]: the `RoomStore` trait with the in-memory store; [`store::file`], the
//!   embedded node's durable store (SQLite in a data directory, group commit);
//!   [`store::redis`], the Redis store (Lua append with fencing).
//! - [`redis`]: the node's Redis: where it is and its connections (one Redis or a Redis
//!   Cluster, and what differs between them, decided once: [`redis::topology`]), key
//!   layout, Lua scripts, and the group commit of log appends (many rooms' appends per
//!   round trip): the layer under [`store::redis`] and [`cluster`].
//! - [`pace`]: when a batch (appends, bus frames) is worth waiting for.
//! - [`rebuild`]: a room's state from its log (recovery, replays, tests).
//! - [`resume`]: start-up of an embedded node on a durable store: every open room again.
//! - [`replay`]: a participant's replay of a finished game (first view + patches).
//! - [`metrics`]: Prometheus counters and histograms.
//! - [`threads`]: the node's worker threads (where a cluster node runs its bus receiver).
//! - [`summary`]: warnings anyone on the network can repeat, logged once per period.
//! - [`supervise`]: the node's core tasks, started again when they end (or the process
//!   ends, so its orchestrator starts a fresh one).

pub mod cluster;
pub mod dedupe;
pub mod directory;
pub mod error;
pub mod info;
pub mod lobby;
pub mod log;
pub mod messages;
pub mod metrics;
pub mod pace;
pub mod protocol;
pub mod rebuild;
pub mod redis;
pub mod replay;
pub mod resume;
pub mod room;
pub mod room_ref;
pub mod rooms_service;
pub mod session_rooms;
pub mod sessions;
pub mod spawn;
pub mod store;
pub mod summary;
pub mod supervise;
pub mod threads;
pub mod wire;

pub use directory::{Directory, RoomHandle};
pub use error::{RebuildError, StoreError};
pub use info::{RoomInfo, RoomStatus};
pub use room::{RoomActor, RoomDeps};
pub use room_ref::{RoomRef, Rooms};
pub use rooms_service::RoomsService;
pub use store::file::FileStore;
pub use store::redis::RedisStore;
pub use store::{MemoryStore, RoomStore};

/// The maps on the hot path (sessions, outboxes, append queues, a room's audience, the
/// directory): std's `HashMap` with foldhash instead of SipHash, which took ~2 % of a
/// cluster node's instructions (callgrind). Seeded per process like std's.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
