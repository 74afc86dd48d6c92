//! `RoomActor<G>`: one actor per room, its mailbox the room's fairness queue.
//!
//! Inputs are handled one at a time in arrival order; `now` (serverTs) is stamped when
//! the actor takes the message. The input path is `game-engine.md` §4: dedupe on
//! (player, cs) → shape check → validate → apply (errors and panics contained) → append
//! to the store, holding the mailbox (`ctx.wait`) until the store confirms → swap in the
//! state, `seq + 1`, per-viewer updates, ack, re-arm the one timer, finish on a result.
//! Timers and bot moves come back as messages and take the same path.
//!
//! # Layout
//!
//! - this file: the actor's state, grouped by concern, what every room shares, and what
//!   its parts share (where an input came from, the RTT table a log last recorded, a
//!   save of the room's info in flight).
//! - [`clock`]: where rooms read the time; `now` never runs backwards in a room.
//! - `lifecycle`: creating, restoring and spawning a room, its public info, closing.
//! - `lobby`: seats, the host and the start (`TakeSeat`, `LeaveSeat`, `RemoveSeat`,
//!   `Start`).
//! - `input`: the input pipeline, process → commit → finish (`Act`).
//! - `stall`: an append with no known outcome, resolved by reading the log back.
//! - `audience`: subscribers, fan-out of frames and presence (`Subscribe`, `RttSample`).
//! - `chat`: quick chat, fanned out and never logged (`Chat`).
//! - `timers`: the room's one timer and its bots (`Wake`, `BotWake`).
//! - `admin`: what operators do to a room (`Close`, `Kick`, `Inspect`).

mod admin;
mod audience;
mod chat;
pub mod clock;
mod input;
mod lifecycle;
mod lobby;
mod stall;
mod timers;

pub use clock::Clock;
pub use lobby::MAX_REMOVED;

use crate::directory::Directory;
use crate::log::{StartEntry, StoredGame};
use crate::messages::{Out, RoomOpError};
use crate::metrics::RoomMetrics;
use crate::store::RoomStore;
use actix::ResponseFuture;
use audience::Audience;
use clock::RoomTime;
use engine::{Game, GameResult, PlayerId, Rng, Seed};
use input::Pipeline;
use lobby::Lobby;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use timers::Timers;

/// What every room of a node shares.
#[derive(Clone)]
pub struct RoomDeps {
    pub store: Arc<dyn RoomStore>,
    pub directory: Arc<Directory>,
    pub metrics: RoomMetrics,
    pub node_id: String,
    /// This node's public base URL (`ROOMD__NODE__PUBLIC_URL`), shown as `nodeUrl` in
    /// the info of the rooms it owns.
    pub public_url: Option<Arc<str>>,
    /// A snapshot every this many entries.
    pub snapshot_every: u64,
    pub clock: Clock,
    /// How long an ended room nobody watches stays open ([`ENDED_LINGER`] by default).
    pub ended_linger: Duration,
    /// How long a room may wait for its start before it closes ([`WAITING_TTL`] by
    /// default), so nobody can hold seats in rooms that never start.
    pub waiting_ttl: Duration,
    /// How long a room with a lease (cluster mode) stays stalled before it gives itself
    /// up ([`STALL_GIVE_UP`] by default).
    pub stall_give_up: Duration,
}

/// A new room as `POST /api/rooms` asks for it (options already validated).
pub struct RoomSpec<O> {
    pub room_id: String,
    pub options: O,
    pub options_json: Arc<serde_json::Value>,
    pub host: engine::PlayerId,
    pub host_name: String,
    pub grace_sec: u32,
    /// Only when the server allows fixed seeds (dev/test).
    pub seed: Option<Seed>,
    /// In the players' lobby.
    pub listed: bool,
}

/// After a room is restored on a node, no deadline is enforced for this long, so players
/// have time to reconnect (`game-engine.md` §4).
pub const RECOVERY_HOLD_MS: i64 = 30_000;
/// An ended game that nobody watches closes after this long (embedded mode), so finished
/// rooms do not stay in memory and in the directory for the life of the process. The
/// game itself stays in the store (`GET /api/me/games`, replays).
pub const ENDED_LINGER: Duration = Duration::from_secs(60);
/// A room not started within this long after its creation closes.
pub const WAITING_TTL: Duration = Duration::from_secs(30 * 60);
/// A room with a lease (cluster mode) still stalled this long after its store stopped
/// answering gives itself up: it stops, and the node's reconciler restores it from its
/// log with a new lease, connections and actor. A stall normally ends within seconds of
/// the store coming back; one that does not is stuck on something this actor holds, and
/// a restore from the log is what a node's death would have done anyway. Longer than
/// a Redis Cluster's failover and full restart, so those end as plain stalls.
pub const STALL_GIVE_UP: Duration = Duration::from_secs(30);

/// Messages a room queues before senders get `room_unavailable` (actix's default is 16).
const ROOM_MAILBOX: usize = 4096;

pub struct RoomActor<G: Game> {
    id: String,
    deps: RoomDeps,
    /// What the room was created with; fixed for its life.
    config: Config<G>,
    /// Seats, host and a start being stored.
    lobby: Lobby,
    phase: Phase<G>,
    /// Who watches and who of the seated is away.
    audience: Audience,
    /// The room's own time (never backwards) and the recovery hold.
    time: RoomTime,
    /// The one game timer, the bots' planned moves, the linger timer.
    timers: Timers<G>,
    /// An append in flight or stalled, the lease that fences appends.
    pipeline: Pipeline<G>,
    /// What operators did to the room.
    admin: admin::AdminState,
}

/// The room as created (`RoomSpec`, or the saved info on a restore).
struct Config<G: Game> {
    options: G::Options,
    /// Shared with every copy of the room's info (the directory, the store).
    options_json: Arc<serde_json::Value>,
    grace_sec: u32,
    fixed_seed: Option<Seed>,
    created_at: i64,
    listed: bool,
}

struct Running<G: Game> {
    game_pk: String,
    start: StartEntry,
    state: G::State,
    rng: Rng,
    seq: u64,
    applied: crate::dedupe::AppliedCs,
}

/// The running game is boxed: a waiting room (most of a lobby) keeps only a pointer
/// where the game's state would be (the actor is ~2 KB smaller).
enum Phase<G: Game> {
    Waiting,
    Playing(Box<Running<G>>),
    Ended(Box<Running<G>>, GameResult),
}

/// The result as people read it: games write player ids into their Korean summary
/// (they know no names), so the room puts each seat's display name in their place. The
/// record keeps the game's own result, which is what a replay recomputes and compares.
fn named(result: &GameResult, start: &StartEntry) -> GameResult {
    let mut shown = result.clone();
    for (player, name) in start.players.iter().zip(&start.names) {
        if !name.is_empty() {
            shown.summary = shown.summary.replace(player.as_str(), name);
        }
    }
    shown
}

const INTERNAL_REASON: &str = "처리하지 못했어요. 다시 시도해 주세요";

/// Who is waiting for the outcome of an input.
enum Origin {
    /// `hop`: the time the action spent on the bus from another node's gateway.
    Client {
        cs: u64,
        out: Out,
        received: Instant,
        hop: Duration,
    },
    Timer,
    Bot,
}

impl Origin {
    fn cs(&self) -> Option<u64> {
        match self {
            Origin::Client { cs, .. } => Some(*cs),
            _ => None,
        }
    }

    /// The round trip the game credits this input with (`Ctx::rtt_ms`, logged with the
    /// entry so a replay judges it identically): the player's RTT to their gateway, plus,
    /// for an action that came from another node's gateway, twice its bus hop. A game
    /// crediting half the RTT (Halli Galli's `latencyComp=light`: `min(RTT/2, 80 ms)`)
    /// thereby also credits the hop, so a ring is judged by when it entered the cluster,
    /// whichever node owns the room. `None` when there is neither.
    fn credited_rtt(&self, rtt_ms: Option<u32>) -> Option<u32> {
        let hop = match self {
            Origin::Client { hop, .. } if !hop.is_zero() => *hop,
            _ => return rtt_ms,
        };
        let hop_ms = u32::try_from(hop.as_millis()).unwrap_or(u32::MAX);
        Some(rtt_ms.unwrap_or(0).saturating_add(hop_ms.saturating_mul(2)))
    }
}

/// The RTT table as a stored game's log last recorded it.
fn last_logged_rtt(stored: &StoredGame) -> BTreeMap<PlayerId, u32> {
    stored.entries.iter().rev().find_map(|e| e.rtt.clone()).unwrap_or(stored.start.rtt.clone())
}

/// A save of the room's info in flight ([`RoomActor::save_info`]).
struct InfoSaved(tokio::sync::oneshot::Receiver<bool>);

impl InfoSaved {
    /// `answer` once the info is stored: what is acknowledged (a room made, a seat taken
    /// or given up) is on disk, or in Redis, before the client hears it. A store that
    /// failed answers `room_unavailable`; the change stays in the room, which saves it
    /// again with its next change, and the client's retry finds it made.
    fn then_answer<T: Send + 'static>(self, answer: T) -> ResponseFuture<Result<T, RoomOpError>> {
        Box::pin(async move {
            match self.0.await {
                Ok(true) => Ok(answer),
                _ => Err(RoomOpError::unavailable()),
            }
        })
    }
}

impl<G: Game> RoomActor<G> {
    /// The disconnect grace of a running game: the game's own, else the room's.
    fn grace_ms(&self, state: &G::State) -> i64 {
        G::disconnect_grace_ms(state).unwrap_or(i64::from(self.config.grace_sec) * 1000)
    }
}
