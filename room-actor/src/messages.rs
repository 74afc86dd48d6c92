//! Messages rooms take: the room verbs, each a message type whose handler is in
//! `room/`, listed once by kind at the end of its section (`protocol.rs` says how a
//! listed verb reaches a room here or on another node). Every reply a client sees goes
//! back through the `out` recipient of its session as ready-made JSON text
//! ([`ToClient`], from `wire.rs`).

use crate::cluster::frame::RoomCmd;
use crate::info::RoomInfo;
use crate::protocol::encode;
use crate::wire;
pub use crate::wire::ToClient;
use actix::prelude::*;
pub use bytestring::ByteString;
use engine::PlayerId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One WebSocket session (a connection), unique per node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// What a node tells every one of its sessions ([`Sessions`](crate::sessions::Sessions)).
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub enum Notice {
    /// The node drains: a session closes with 1012 so its client reconnects (to another
    /// node).
    Drain,
    /// These rooms' lease holders changed (a failover, a handover): a session watching
    /// one of them follows it to its new owner now (`cluster/routes.rs`).
    Moved(std::sync::Arc<[String]>),
}

/// Where a room's frames for one session go: the session's actor on this node, or
/// straight into the outbox toward the session's node (a session on another node: no
/// actor in between, so a remote frame costs one queue push, not a mailbox and a wake).
#[derive(Clone)]
pub enum Out {
    Local(Recipient<ToClient>),
    Remote(Arc<crate::cluster::outbox::RemoteOut>),
}

impl Out {
    /// Sends without waiting: `Full` when a local session's mailbox is (a slow reader),
    /// `Closed` when it stopped. A remote session's frames always join its node's outbox.
    pub fn try_send(&self, msg: ToClient) -> Result<(), SendError<ToClient>> {
        match self {
            Out::Local(out) => out.try_send(msg),
            Out::Remote(remote) => {
                remote.send(msg);
                Ok(())
            }
        }
    }

    /// Sends even to a full mailbox (closing frames, operators' notices).
    pub fn do_send(&self, msg: ToClient) {
        match self {
            Out::Local(out) => out.do_send(msg),
            Out::Remote(remote) => remote.send(msg),
        }
    }
}

impl From<Recipient<ToClient>> for Out {
    fn from(out: Recipient<ToClient>) -> Out {
        Out::Local(out)
    }
}

// ---- The two kinds of verb (`protocol.rs`) --------------------------------------------

/// A request verb: a message the room answers with `Self::Answer` or a refusal.
/// Implemented by `room_requests!` for every verb it lists.
/// (Its `actix::Message` result is `Result<Self::Answer, RoomOpError>`: the generated
/// dispatch does not compile otherwise. `Clone`: a call that waits out a room's move
/// sends it again where the room went, `room_ref.rs`.)
pub trait Ask: Clone + Serialize + DeserializeOwned + Send + 'static {
    /// What the room answers.
    type Answer: Serialize + DeserializeOwned + Send + 'static;

    /// The verb as the one request type.
    fn into_request(self) -> Request;

    /// This verb's answer out of the one answer type (`None`: another verb's).
    fn from_answer(answer: Answer) -> Option<Self::Answer>;
}

/// A session verb: a message the room answers on the session's `out`, if at all.
/// Implemented by `session_verbs!` for every verb it lists.
pub trait Tell: Serialize + DeserializeOwned + Send + 'static {
    /// The verb as the one session-verb type.
    fn into_verb(self) -> SessionVerb;
}

/// A session verb as the room actor receives it: the verb, and the session that sent it.
#[derive(actix::Message)]
#[rtype(result = "()")]
pub struct FromSession<V> {
    pub session: SessionId,
    pub user: PlayerId,
    /// Where the room answers (the session's actor here, or its node's outbox).
    pub out: Out,
    /// When the gateway took the frame off the socket (latency metric).
    pub received: Instant,
    /// How long the verb spent on the bus from a gateway on another node (its publish to
    /// this node's delivery); zero from a session on this node. The room credits a ring
    /// with it as it credits half the player's RTT (see `RoomActor::credited_rtt`).
    pub hop: Duration,
    pub verb: V,
}

/// Who sent a session verb, without the verb: what [`FromSession`] wraps around it.
#[derive(Clone)]
pub struct Sender {
    pub session: SessionId,
    pub user: PlayerId,
    pub out: Out,
    pub received: Instant,
    pub hop: Duration,
}

impl Sender {
    pub fn with<V>(self, verb: V) -> FromSession<V> {
        let Sender { session, user, out, received, hop } = self;
        FromSession { session, user, out, received, hop, verb }
    }
}

// ---- Session verbs: a WebSocket session's, answered on its `out` ----------------------
//
// Each arrives as `FromSession<Verb>` (who sent it, where answers go); its handler is in
// `room/`. Between nodes they travel as `SessionVerb` (`protocol.rs`).

/// Start watching the room: as its player if the sender is seated, else as a spectator.
/// Answered with `sync`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscribe;

/// Stop watching (also sent when the socket closes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unsubscribe;

/// A client action. Answered with `ack`, `reject` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Act {
    /// The client's sequence number for this room.
    pub cs: u64,
    /// The game action as sent (`a`), JSON text; the room decodes it into its game's
    /// action (a frame of another shape is refused there).
    pub action: String,
}

/// A fresh RTT estimate (EMA) of the sender, from the session's ping/pong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rtt {
    pub rtt_ms: u32,
}

/// A quick-chat phrase from a seated player (`{"t":"chat"}`): broadcast to every
/// subscriber, refused with an `error` frame (`chat_off`, `rate_limited`, `not_seated`,
/// `bad_message`). Never logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chat {
    /// A key of the game's `chatPhrases`.
    pub phrase: String,
}

crate::protocol::session_verbs! {
    Subscribe,
    Unsubscribe,
    Act,
    Rtt,
    Chat,
}

impl SessionVerb {
    /// What the sender is told when the room is not on the node its verb reached (it
    /// moved): subscribe again (`room_moved`), resend an action; nothing otherwise (a
    /// phrase was of the moment).
    pub fn not_here(&self, room: &str) -> Option<ToClient> {
        match self {
            SessionVerb::Act(act) => Some(ToClient::stale(room, wire::resend(room, Some(act.cs)))),
            SessionVerb::Subscribe(_) => Some(ToClient::stale(room, wire::room_moved(room))),
            _ => None,
        }
    }

    /// The action's `cs`, for a verb that is one (the client resends it when its route
    /// was lost).
    pub fn cs(&self) -> Option<u64> {
        match self {
            SessionVerb::Act(act) => Some(act.cs),
            _ => None,
        }
    }
}

/// A room operation failed (defined with the bus frames that carry it between nodes).
pub use crate::cluster::frame::RoomOpError;

impl RoomOpError {
    pub const fn new(status: u16, code: &'static str, reason: &'static str) -> RoomOpError {
        RoomOpError { status, code: Cow::Borrowed(code), reason: Cow::Borrowed(reason) }
    }

    /// The room exists but cannot answer this moment (moving, failing over, its node or
    /// the store unreachable): `503 room_unavailable`, try again.
    pub const fn unavailable() -> RoomOpError {
        RoomOpError::new(503, wire::codes::ROOM_UNAVAILABLE, wire::codes::TRY_AGAIN_TEXT)
    }

    /// No such room: `404 unknown_room`.
    pub const fn unknown_room() -> RoomOpError {
        RoomOpError::new(404, wire::codes::UNKNOWN_ROOM, wire::codes::UNKNOWN_ROOM_TEXT)
    }
}

/// The room's actor is gone or its mailbox is full.
impl From<MailboxError> for RoomOpError {
    fn from(_: MailboxError) -> RoomOpError {
        RoomOpError::unavailable()
    }
}

// ---- Requests: answered with a value or a `RoomOpError` --------------------------------

/// The room's public info.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<RoomInfo, RoomOpError>")]
pub struct GetInfo;

/// Sit down (`bot: false`) or, for the host, add a bot.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<RoomInfo, RoomOpError>")]
pub struct TakeSeat {
    pub user: PlayerId,
    pub name: String,
    pub bot: bool,
}

/// Leave the seat: before the start it frees the seat; during a game it is `on_leave`.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<RoomInfo, RoomOpError>")]
pub struct LeaveSeat {
    pub user: PlayerId,
}

/// The host removes a seated player (or bot) before the start; the removed player's
/// sockets are told why (`removed_from_seat`) and stay subscribed as spectators. The
/// player may not sit in this room again (`TakeSeat` answers 403 `removed_from_seat`).
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<RoomInfo, RoomOpError>")]
pub struct RemoveSeat {
    /// Who asks (must be the host).
    pub by: PlayerId,
    /// Whose seat.
    pub user: PlayerId,
}

/// Start the game (host only). Answers the new game's `gamePk`.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<String, RoomOpError>")]
pub struct Start {
    pub user: PlayerId,
}

/// The node is draining: finish the current input, then stop so another node can take
/// the room from its log (the caller releases the lease after this answers).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Handover;

/// Internal: the room's single timer fired.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Wake;

/// Internal: a bot's thinking time is over.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct BotWake {
    pub bot: PlayerId,
}

/// Operators: end the room now (`POST /admin/api/rooms/{id}/close`). A running game ends
/// with a result whose summary carries `reason` (recorded like any finished game); every
/// watcher gets `{"t":"error","code":"room_closed"}` with the reason and the room stops.
/// Answers the room's info as it was closed.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<RoomInfo, RoomOpError>")]
pub struct Close {
    pub reason: String,
}

/// Operators: remove `user` from the room (`POST /admin/api/rooms/{id}/kick`). Their
/// sockets watching the room get `{"t":"error","code":"kicked"}` with the reason and stop
/// watching; a seat is given up as by `LeaveSeat`. A kicked user may not come back to this
/// room (neither a seat nor watching) for the room's life; other rooms are unaffected.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<RoomInfo, RoomOpError>")]
pub struct Kick {
    pub user: PlayerId,
    pub reason: String,
}

/// Operators: lift a kick (`POST /admin/api/rooms/{id}/unkick`): `user` may sit and
/// watch in this room again. A user who was not kicked here is `404 not_kicked`.
/// Answers the room's info.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<RoomInfo, RoomOpError>")]
pub struct Unkick {
    pub user: PlayerId,
}

/// Operators: what a room is doing, without any hidden game state.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[rtype(result = "Result<AdminView, RoomOpError>")]
pub struct Inspect;

/// One applied input as operators see it: when, by whom, and its kind only (the action's
/// `type`, never its fields, so no card ids or claims).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecentEntry {
    pub seq: u64,
    pub at: i64,
    /// `player:<id>` or `system`.
    pub actor: String,
    /// `client:<type>` or `system:<type>`.
    pub kind: String,
    pub auto: bool,
}

/// The answer to [`Inspect`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdminView {
    pub info: RoomInfo,
    /// Applied inputs of the current game (0 before the start).
    pub seq: u64,
    /// Open subscriptions (players and spectators).
    pub subscribers: usize,
    /// The last applied inputs, oldest first ([`RECENT_ENTRIES`] at most).
    pub recent: Vec<RecentEntry>,
}

/// How many log entries a room keeps for [`Inspect`].
pub const RECENT_ENTRIES: usize = 20;

crate::protocol::room_requests! {
    GetInfo -> RoomInfo,
    TakeSeat -> RoomInfo,
    LeaveSeat -> RoomInfo,
    RemoveSeat -> RoomInfo,
    Start -> String,
    Close -> RoomInfo,
    Kick -> RoomInfo,
    Inspect -> AdminView,
    Unkick -> RoomInfo,
}

impl RoomCmd {
    /// A session's verb for a room on another node.
    pub fn tell(session: u64, user: &str, verb: impl Tell) -> Self {
        Self::Tell { session, user: user.to_owned(), verb: encode(&verb.into_verb()) }
    }

    /// The session verb this command carries (`None`: a request, or bytes no verb of
    /// this build decodes from).
    pub fn session_verb(&self) -> Option<SessionVerb> {
        match self {
            Self::Tell { verb, .. } => crate::cluster::frame::decode_bounded(verb).ok(),
            Self::Ask { .. } => None,
        }
    }
}
