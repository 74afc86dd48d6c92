//! One way to reach a room wherever it lives. [`Rooms`] finds a room's owner (this
//! node's actor, or another node of the cluster) and hands out a [`RoomRef`], whose verbs
//! are the same either way: callers never ask where a room is.
//!
//! - Request verbs ([`RoomRef::info`], [`RoomRef::take_seat`], …) answer the room's reply
//!   or one error type, [`RoomOpError`]: the room's own refusal, or `room_unavailable`
//!   when the room cannot answer this moment (its actor stopped, its node is gone or
//!   silent, it is between owners).
//! - Fire-and-forget verbs ([`RoomRef::subscribe`], [`RoomRef::act`], …) are a WebSocket
//!   session's: the room answers on the session's `out`. One that cannot reach another
//!   node is reported to the session as [`RouteLost`].
//!
//! A verb on this node is the room's message sent to its actor; on another node it is
//! the matching `RoomCmd` over the bus, which that node's `ClusterNode` turns back into
//! the same message (`cluster/node/serve.rs`, `on_room_cmd`), and its `Reply` is decoded
//! here.

use crate::cluster::bus::{Reply, RoomCmd};
use crate::cluster::node::{ClusterNode, Owner};
use crate::directory::{Directory, RoomHandle};
use crate::info::RoomInfo;
use crate::messages::{
    Act, AdminView, Chat, Close, GetInfo, Inspect, Kick, LeaveSeat, Out, RemoveSeat, RoomOpError, RttSample, SessionId,
    Start, Subscribe, TakeSeat, Unsubscribe,
};
use crate::store::RoomStore;
use actix::prelude::*;
use engine::PlayerId;
use futures_util::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How this node reaches rooms: its own directory, and in cluster mode the cluster.
#[derive(Clone)]
pub struct Rooms {
    node_id: String,
    directory: Arc<Directory>,
    cluster: Option<Arc<ClusterNode>>,
}

/// A room as found: call its verbs without knowing where it is.
#[derive(Clone)]
pub struct RoomRef {
    room: String,
    /// Shared: sessions clone their routes on every message.
    at: Arc<At>,
}

#[derive(Clone)]
enum At {
    /// This node's actor.
    Local { handle: RoomHandle, node: String },
    /// Another node's, over the bus. `token`: the room's lease when the route was made
    /// (`None`: nobody held it yet, the route is to the node placement gives it to). A
    /// room restored again on the same node (its lease lapsed in a Redis outage and was
    /// claimed anew) is a new actor that knows nothing of this session: the route board
    /// names it by its new token, and the session subscribes to it again.
    Remote { node: String, token: Option<String>, cluster: Arc<ClusterNode> },
    /// Known (saved) but no node runs it this moment (a failover in progress): its stored
    /// info is all there is; verbs answer `room_unavailable`.
    Stored(Box<RoomInfo>),
}

/// Why a session's lookup found no room to talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// No such room: `unknown_room`.
    Unknown,
    /// The room exists but is moving, or the store did not answer: `room_unavailable`.
    Moving,
}

/// A session's lookup: answered at once (embedded mode), or after a cluster lookup.
pub enum Lookup {
    Now(Result<RoomRef, Missing>),
    Later(LocalBoxFuture<'static, Result<RoomRef, Missing>>),
}

/// What operators see of a room ([`RoomRef::inspect`]).
pub enum Inspection {
    /// The room runs on `node`.
    Live { view: AdminView, node: String },
    /// No node runs it this moment: its stored info.
    Stored(RoomInfo),
}

/// The WebSocket session that sends fire-and-forget verbs.
#[derive(Clone)]
pub struct Caller {
    pub session: SessionId,
    pub user: PlayerId,
    /// Where the room sends its frames (a room on another node reaches the session
    /// through its node's outbox and this node's session registry instead).
    pub out: Out,
    /// Told when a verb could not reach the room's node.
    pub lost: Recipient<RouteLost>,
}

/// A fire-and-forget verb could not reach the room's node (it is gone, or Redis is): the
/// session drops its route to `room` and tells the client to resend (`cs` of the action,
/// if it was one).
#[derive(Message, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct RouteLost {
    pub room: String,
    pub cs: Option<u64>,
}

impl Rooms {
    pub fn new(node_id: String, directory: Arc<Directory>, cluster: Option<Arc<ClusterNode>>) -> Rooms {
        Rooms { node_id, directory, cluster }
    }

    fn at_here(&self, room: &str, handle: RoomHandle) -> RoomRef {
        RoomRef { room: room.to_owned(), at: Arc::new(At::Local { handle, node: self.node_id.clone() }) }
    }

    fn at_node(room: &str, node: String, token: Option<String>, cluster: &Arc<ClusterNode>) -> RoomRef {
        RoomRef { room: room.to_owned(), at: Arc::new(At::Remote { node, token, cluster: cluster.clone() }) }
    }

    /// A session's route to a room on another node: the node's route board reads the
    /// room's holder from now on, so a move is announced to the session even before its
    /// first route check.
    fn watched_at_node(room: &str, node: String, token: Option<String>, cluster: &Arc<ClusterNode>) -> RoomRef {
        cluster.routes.hint(room, std::time::Instant::now());
        Self::at_node(room, node, token, cluster)
    }

    /// For HTTP calls (players' and operators'): the room wherever it runs, or its stored
    /// info while no node runs it; `unknown_room` for a room never created,
    /// `room_unavailable` when the store does not answer.
    pub async fn find(&self, room: &str) -> Result<RoomRef, RoomOpError> {
        let Some(cluster) = &self.cluster else {
            return self.directory.handle(room).map(|h| self.at_here(room, h)).ok_or_else(RoomOpError::unknown_room);
        };
        match cluster.locate(room).await.map_err(|_| RoomOpError::unavailable())? {
            Owner::Here(handle) => Ok(self.at_here(room, handle)),
            Owner::There { node, token } => Ok(Self::at_node(room, node, token, cluster)),
            Owner::Unknown | Owner::Moving => cluster
                .store
                .room(room)
                .await
                .map_err(|_| RoomOpError::unavailable())?
                .map(|info| RoomRef { room: room.to_owned(), at: Arc::new(At::Stored(Box::new(info))) })
                .ok_or_else(RoomOpError::unknown_room),
        }
    }

    /// For WebSocket sessions: the room where it runs. A room between owners (or a
    /// store that does not answer) is [`Missing::Moving`], never `Unknown`.
    pub fn route(&self, room: &str) -> Lookup {
        let Some(cluster) = self.cluster.clone() else {
            return Lookup::Now(self.directory.handle(room).map(|h| self.at_here(room, h)).ok_or(Missing::Unknown));
        };
        let (rooms, room) = (self.clone(), room.to_owned());
        Lookup::Later(Box::pin(async move {
            match cluster.locate(&room).await {
                Ok(Owner::Here(handle)) => Ok(rooms.at_here(&room, handle)),
                Ok(Owner::There { node, token }) => Ok(Self::watched_at_node(&room, node, token, &cluster)),
                Ok(Owner::Unknown) => Err(Missing::Unknown),
                Ok(Owner::Moving) | Err(_) => Err(Missing::Moving),
            }
        }))
    }

    /// Cluster mode: whether a session should look `room` up again because it may have
    /// moved (its route is on another node, or its actor here stopped, or there is none),
    /// and the lookup, which answers the room's new place, or `None` when it is still
    /// where it was (or nowhere yet). `None` at once for a live room on this node, for a
    /// room on another node that the node's route board (`cluster/routes.rs`) last saw
    /// still there, and in embedded mode, where rooms never move.
    pub fn follow(&self, room: &str, current: Option<&RoomRef>) -> Option<LocalBoxFuture<'static, Option<RoomRef>>> {
        let cluster = self.cluster.clone()?;
        let was = match current.map(|r| &*r.at) {
            Some(At::Local { handle, .. }) if handle.connected() => return None,
            Some(At::Remote { node, token, .. }) => {
                // The node's board read the room's holder for every session at once: a
                // lookup of our own only if it is not the holder our route was made for.
                let board = cluster.routes.hint(room, std::time::Instant::now());
                if token.is_some() && board.as_ref().is_some_and(|held| held == token) {
                    return None;
                }
                Some((node.clone(), token.clone()))
            }
            _ => None,
        };
        let (rooms, room) = (self.clone(), room.to_owned());
        Some(Box::pin(async move {
            let was = was.as_ref().map(|(node, token)| (node.as_str(), token.as_deref()));
            match moved(cluster.locate(&room).await.ok()?, was)? {
                Moved::Here(handle) => Some(rooms.at_here(&room, handle)),
                Moved::To { node, token } => Some(Self::watched_at_node(&room, node, token, &cluster)),
            }
        }))
    }
}

/// Where a followed room went.
enum Moved {
    Here(RoomHandle),
    To { node: String, token: Option<String> },
}

/// A room found at `found` whose route was to `was` (its node and the lease it was made
/// for; `None`: here, or no route): where to subscribe again, if anywhere. Another node,
/// or the same node under another lease (a new actor there, which does not know the
/// session), is a move; a lease not known on either side is not.
fn moved(found: Owner, was: Option<(&str, Option<&str>)>) -> Option<Moved> {
    match found {
        Owner::Here(handle) => Some(Moved::Here(handle)),
        Owner::There { node, token } => {
            let same = was.is_some_and(|(was_node, was_token)| {
                was_node == node && (token.is_none() || was_token == token.as_deref())
            });
            (!same).then_some(Moved::To { node, token })
        }
        Owner::Moving | Owner::Unknown => None,
    }
}

/// A bus answer carrying JSON (room info, an admin view), decoded; a refusal as it came;
/// no answer of the expected kind (`NotHere`, a timeout) is `room_unavailable`.
fn decoded<T: DeserializeOwned>(answer: Option<Result<String, RoomOpError>>) -> Result<T, RoomOpError> {
    match answer {
        Some(Ok(json)) => serde_json::from_str(&json).map_err(|_| RoomOpError::unavailable()),
        Some(Err(e)) => Err(e),
        None => Err(RoomOpError::unavailable()),
    }
}

fn seat_answer(reply: Reply) -> Option<Result<String, RoomOpError>> {
    match reply {
        Reply::Seat(answer) => Some(answer),
        _ => None,
    }
}

fn admin_answer(reply: Reply) -> Option<Result<String, RoomOpError>> {
    match reply {
        Reply::Admin(answer) => Some(answer),
        _ => None,
    }
}

impl RoomRef {
    /// The room's id.
    pub fn id(&self) -> &str {
        &self.room
    }

    /// Asks the room's node; `NotHere` for a room no node runs.
    async fn ask(&self, make: impl FnOnce(u64) -> RoomCmd) -> Reply {
        match &*self.at {
            At::Remote { node, cluster, .. } => cluster.request(node, &self.room, make).await,
            At::Local { .. } | At::Stored(_) => Reply::NotHere,
        }
    }

    /// The room's public info (a room no node runs: its stored info).
    pub async fn info(&self) -> Result<RoomInfo, RoomOpError> {
        match &*self.at {
            At::Local { handle, .. } => Ok(handle.info().send(GetInfo).await?),
            At::Remote { .. } => match self.ask(|req| RoomCmd::Info { req }).await {
                Reply::Info(json) => decoded(Some(Ok(json))),
                _ => Err(RoomOpError::unavailable()),
            },
            At::Stored(info) => Ok(RoomInfo::clone(info)),
        }
    }

    /// Sit down (`bot: false`) or, for the host, add a bot.
    pub async fn take_seat(&self, user: PlayerId, name: String, bot: bool) -> Result<RoomInfo, RoomOpError> {
        if let At::Local { handle, .. } = &*self.at {
            return handle.take_seat().send(TakeSeat { user, name, bot }).await?;
        }
        decoded(seat_answer(self.ask(|req| RoomCmd::TakeSeat { req, user: user.to_string(), name, bot }).await))
    }

    /// Leave the seat (before the start) or the game (`on_leave`).
    pub async fn leave_seat(&self, user: PlayerId) -> Result<RoomInfo, RoomOpError> {
        if let At::Local { handle, .. } = &*self.at {
            return handle.leave_seat().send(LeaveSeat { user }).await?;
        }
        decoded(seat_answer(self.ask(|req| RoomCmd::LeaveSeat { req, user: user.to_string() }).await))
    }

    /// The host (`by`) removes `user`'s seat before the start.
    pub async fn remove_seat(&self, by: PlayerId, user: PlayerId) -> Result<RoomInfo, RoomOpError> {
        if let At::Local { handle, .. } = &*self.at {
            return handle.remove_seat().send(RemoveSeat { by, user }).await?;
        }
        let cmd = |req| RoomCmd::RemoveSeat { req, by: by.to_string(), user: user.to_string() };
        decoded(seat_answer(self.ask(cmd).await))
    }

    /// Start the game (host only): the new game's pk.
    pub async fn start(&self, user: PlayerId) -> Result<String, RoomOpError> {
        if let At::Local { handle, .. } = &*self.at {
            return handle.start().send(Start { user }).await?;
        }
        match self.ask(|req| RoomCmd::Start { req, user: user.to_string() }).await {
            Reply::Start(answer) => answer,
            _ => Err(RoomOpError::unavailable()),
        }
    }

    /// Operators: end the room now; its info as it was closed.
    pub async fn close(&self, reason: String) -> Result<RoomInfo, RoomOpError> {
        if let At::Local { handle, .. } = &*self.at {
            return handle.close().send(Close { reason }).await?;
        }
        decoded(admin_answer(self.ask(|req| RoomCmd::Close { req, reason }).await))
    }

    /// Operators: remove `user` from the room for its life.
    pub async fn kick(&self, user: PlayerId, reason: String) -> Result<RoomInfo, RoomOpError> {
        if let At::Local { handle, .. } = &*self.at {
            return handle.kick().send(Kick { user, reason }).await?;
        }
        decoded(admin_answer(self.ask(|req| RoomCmd::Kick { req, user: user.to_string(), reason }).await))
    }

    /// Operators: what the room is doing, and on which node.
    pub async fn inspect(&self) -> Result<Inspection, RoomOpError> {
        match &*self.at {
            At::Local { handle, node } => {
                Ok(Inspection::Live { view: handle.inspect().send(Inspect).await?, node: node.clone() })
            }
            At::Remote { node, .. } => {
                let view = decoded(admin_answer(self.ask(|req| RoomCmd::Inspect { req }).await))?;
                Ok(Inspection::Live { view, node: node.clone() })
            }
            At::Stored(info) => Ok(Inspection::Stored(RoomInfo::clone(info))),
        }
    }

    /// Sends a command to the room's node without waiting, in order with the caller's
    /// others; a publish nobody hears (the node died) is reported as [`RouteLost`].
    fn tell(&self, caller: &Caller, cmd: RoomCmd, cs: Option<u64>) {
        let At::Remote { node, cluster, .. } = &*self.at else { return };
        let (room, lost) = (self.room.clone(), caller.lost.clone());
        cluster.tell_or(node, &self.room, cmd, move |_| lost.do_send(RouteLost { room, cs }));
    }

    /// Start watching (answered with `sync` on the caller's `out`), with the caller's RTT
    /// when it has one. A room on another node gets the RTT with the session's next pong
    /// (the bus command carries none).
    pub fn subscribe(&self, caller: &Caller, rtt_ms: Option<u32>) {
        let At::Local { handle, .. } = &*self.at else {
            let cmd = RoomCmd::Subscribe { session: caller.session.0, user: caller.user.to_string() };
            return self.tell(caller, cmd, None);
        };
        let out = caller.out.clone();
        let _ = handle.subscribe(Subscribe { session: caller.session, user: caller.user.clone(), out });
        if let Some(rtt_ms) = rtt_ms {
            let _ = handle.rtt(RttSample { user: caller.user.clone(), rtt_ms });
        }
    }

    /// Stop watching.
    pub fn unsubscribe(&self, caller: &Caller) {
        match &*self.at {
            At::Local { handle, .. } => {
                let _ = handle.unsubscribe(Unsubscribe { session: caller.session });
            }
            _ => self.tell(caller, RoomCmd::Unsubscribe { session: caller.session.0 }, None),
        }
    }

    /// A client action (answered with `ack`, `reject` or `error` on the caller's `out`).
    /// `Err` when this node's actor did not take it (its mailbox is full, or it stopped):
    /// the client should resend. A room on another node that cannot be reached is
    /// reported later as [`RouteLost`].
    pub fn act(&self, caller: &Caller, cs: u64, action: String, received: Instant) -> Result<(), RoomOpError> {
        let At::Local { handle, .. } = &*self.at else {
            let (session, user) = (caller.session.0, caller.user.to_string());
            self.tell(caller, RoomCmd::Act { session, user, cs, action_json: action }, Some(cs));
            return Ok(());
        };
        let (session, user, out) = (caller.session, caller.user.clone(), caller.out.clone());
        let hop = Duration::ZERO;
        handle.act(Act { session, user, cs, action, out, received, hop }).map_err(|_| RoomOpError::unavailable())
    }

    /// A quick-chat phrase from the caller: fanned out by the room to every subscriber,
    /// or refused on the caller's `out`. `Err` when this node's actor did not take it
    /// (the phrase is dropped; chat is of the moment and never resent).
    pub fn chat(&self, caller: &Caller, phrase: String) -> Result<(), RoomOpError> {
        let At::Local { handle, .. } = &*self.at else {
            let cmd = RoomCmd::Chat { session: caller.session.0, user: caller.user.to_string(), phrase };
            self.tell(caller, cmd, None);
            return Ok(());
        };
        let (user, out) = (caller.user.clone(), caller.out.clone());
        handle.chat(Chat { user, phrase, out }).map_err(|_| RoomOpError::unavailable())
    }

    /// A fresh RTT estimate of the caller.
    pub fn rtt(&self, caller: &Caller, rtt_ms: u32) {
        match &*self.at {
            At::Local { handle, .. } => {
                let _ = handle.rtt(RttSample { user: caller.user.clone(), rtt_ms });
            }
            _ => self.tell(caller, RoomCmd::Rtt { user: caller.user.to_string(), rtt_ms }, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::RoomStatus;
    use crate::metrics::RoomMetrics;
    use crate::room::{Clock, RoomDeps};
    use crate::spawn::{create_room, NewRoom};
    use crate::store::MemoryStore;
    use std::time::Duration;

    fn refusal() -> RoomOpError {
        RoomOpError::new(409, "room_full", "자리가 없어요")
    }

    #[test]
    fn a_followed_room_is_subscribed_again_only_where_it_went() {
        let there = |node: &str, token: Option<&str>| Owner::There { node: node.into(), token: token.map(Into::into) };
        let to = |m: Option<Moved>| match m {
            Some(Moved::To { node, token }) => Some((node, token)),
            _ => None,
        };
        assert_eq!(
            to(moved(there("n2", Some("n2/5")), Some(("n1", Some("n1/4"))))),
            Some(("n2".into(), Some("n2/5".into())))
        );
        assert_eq!(to(moved(there("n2", None), None)), Some(("n2".into(), None)));
        // The same node under a new lease: a new actor there, which must hear of us.
        assert_eq!(
            to(moved(there("n1", Some("n1/9")), Some(("n1", Some("n1/4"))))),
            Some(("n1".into(), Some("n1/9".into())))
        );
        assert_eq!(to(moved(there("n1", Some("n1/9")), Some(("n1", None)))), Some(("n1".into(), Some("n1/9".into()))));
        // Still the holder the route was made for, between owners, or gone: nothing yet.
        assert!(moved(there("n1", Some("n1/4")), Some(("n1", Some("n1/4")))).is_none());
        assert!(moved(there("n1", None), Some(("n1", Some("n1/4")))).is_none());
        assert!(moved(Owner::Moving, Some(("n1", None))).is_none());
        assert!(moved(Owner::Unknown, None).is_none());
    }

    #[test]
    fn remote_answers_decode_or_are_unavailable() {
        let info = serde_json::json!({
            "roomId": "r", "game": "tally", "options": {}, "host": "h", "seats": [], "status": "waiting",
            "graceSec": 30, "minPlayers": 1, "maxPlayers": 4, "createdAt": 5
        })
        .to_string();
        let ok: RoomInfo = decoded(seat_answer(Reply::Seat(Ok(info)))).unwrap();
        assert_eq!((ok.room_id.as_str(), ok.status), ("r", RoomStatus::Waiting));
        // The room's own refusal travels as it is.
        assert_eq!(decoded::<RoomInfo>(seat_answer(Reply::Seat(Err(refusal())))), Err(refusal()));
        assert_eq!(decoded::<RoomInfo>(admin_answer(Reply::Admin(Err(refusal())))), Err(refusal()));
        // No answer, the wrong kind of answer, or one that does not decode: try again.
        for reply in [Reply::NotHere, Reply::Accepted, Reply::Admin(Ok("{}".into())), Reply::Seat(Ok("nope".into()))] {
            assert_eq!(decoded::<RoomInfo>(seat_answer(reply)), Err(RoomOpError::unavailable()));
        }
        assert_eq!(RoomOpError::unavailable().status, 503);
        assert_eq!(RoomOpError::unknown_room().code, "unknown_room");
    }

    #[actix::test]
    async fn a_local_room_answers_its_verbs_and_an_unknown_one_is_404() {
        let directory = Arc::new(Directory::new());
        let deps = RoomDeps {
            store: Arc::new(MemoryStore::new()),
            directory: directory.clone(),
            metrics: RoomMetrics::unregistered().unwrap(),
            node_id: "n1".into(),
            public_url: None,
            snapshot_every: 16,
            clock: Clock::System,
            ended_linger: Duration::from_secs(60),
            waiting_ttl: Duration::from_secs(60),
            stall_give_up: crate::room::STALL_GIVE_UP,
        };
        let rooms = Rooms::new("n1".into(), directory, None);
        assert_eq!(rooms.find("r1").await.err(), Some(RoomOpError::unknown_room()));
        assert!(matches!(rooms.route("r1"), Lookup::Now(Err(Missing::Unknown))));
        let new = NewRoom {
            room_id: "r1".into(),
            game: "tally".into(),
            options: None,
            host: "h".into(),
            host_name: "방장".into(),
            grace_sec: 30,
            seed: None,
            listed: None,
        };
        create_room(new, deps).unwrap();
        let room = rooms.find("r1").await.unwrap();
        assert_eq!(room.id(), "r1");
        assert_eq!(room.info().await.unwrap().host, PlayerId::from("h"));
        let seated = room.take_seat("g".into(), "손님".into(), false).await.unwrap();
        assert_eq!(seated.seats.len(), 2);
        // The room's refusal comes back as the one error type.
        assert_eq!(room.start("g".into()).await.unwrap_err().code, "not_host");
        assert!(matches!(room.inspect().await.unwrap(), Inspection::Live { node, .. } if node == "n1"));
        // Embedded rooms never move: nothing to follow.
        assert!(rooms.follow("r1", Some(&room)).is_none());
        assert!(matches!(rooms.route("r1"), Lookup::Now(Ok(_))));
    }
}
