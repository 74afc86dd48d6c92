//! One way to reach a room wherever it lives. [`Rooms`] finds a room's owner (this
//! node's actor, or another node of the cluster) and hands out a [`RoomRef`], whose verbs
//! are the same either way: callers never ask where a room is.
//!
//! - Requests ([`Rooms::ask`] with any request of `messages.rs`, [`Rooms::info`],
//!   [`Rooms::inspect`]) answer the room's reply or one error type, [`RoomOpError`]: the
//!   room's own refusal, or `room_unavailable` when the room cannot answer this moment
//!   (its node is silent, or it is still between owners after [`MOVE_WAIT`]).
//! - Session verbs ([`RoomRef::tell`]) are a WebSocket session's: the room answers on the
//!   session's `out`. One that cannot reach another node is reported to the session as
//!   [`RouteLost`]. A session does not hold `RoomRef`s itself: its
//!   [`SessionRooms`](crate::session_rooms::SessionRooms) keeps one per room and heals
//!   it (looks the room up again, follows it when it moves) with [`Rooms`]' session
//!   lookups.
//!
//! This is the one place that decides local or remote (`protocol.rs`): a verb on this
//! node is sent to the room's actor as it is; on another node it travels as bytes in a
//! `RoomCmd`, which that node's `ClusterNode` turns back into the same message
//! (`cluster/node/serve.rs`), and its `Reply` is decoded here.

use crate::cluster::bus::{Reply, RoomCmd};
use crate::cluster::node::{ClusterNode, Owner};
use crate::directory::{Directory, RoomHandle};
use crate::info::RoomInfo;
use crate::messages::{AdminView, Answer, Ask, GetInfo, Inspect, Out, RoomOpError, Sender, SessionId, Tell};
use crate::protocol::encode;
use crate::store::RoomStore;
use actix::prelude::*;
use engine::PlayerId;
use futures_util::future::LocalBoxFuture;
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
pub(crate) enum Missing {
    /// No such room: `unknown_room`.
    Unknown,
    /// The room exists but is moving, or the store did not answer: `room_unavailable`.
    Moving,
}

/// A session's lookup: answered at once (embedded mode), or after a cluster lookup.
pub(crate) enum Lookup {
    Now(Result<RoomRef, Missing>),
    Later(LocalBoxFuture<'static, Result<RoomRef, Missing>>),
}

/// What operators see of a room ([`Rooms::inspect`]).
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
    async fn find(&self, room: &str) -> Result<RoomRef, RoomOpError> {
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

    /// Asks `room` `verb` wherever it runs, and waits out a move:
    /// a room between owners (a drain, a failover), or not where it was found, is looked
    /// up again after a pause, for up to [`MOVE_WAIT`]. Only a try that ran nothing is
    /// made again, so the verb runs once at most; a node that did not answer in time is
    /// `room_unavailable` at once.
    pub async fn ask<V: Ask>(&self, room: &str, verb: V) -> Result<V::Answer, RoomOpError> {
        self.healing(room, |found| {
            let verb = verb.clone();
            Box::pin(async move { found.attempt(verb).await })
        })
        .await
    }

    /// `room`'s public info wherever it runs (a room no node runs: its stored info),
    /// waiting out a move as [`Rooms::ask`] does.
    pub async fn info(&self, room: &str) -> Result<RoomInfo, RoomOpError> {
        self.healing(room, |found| Box::pin(async move { found.info_attempt().await })).await
    }

    /// Operators: what `room` is doing and on which node, waiting out a move as
    /// [`Rooms::ask`] does.
    pub async fn inspect(&self, room: &str) -> Result<Inspection, RoomOpError> {
        self.healing(room, |found| Box::pin(async move { found.inspect_attempt().await })).await
    }

    /// Finds `room` and makes `attempt` there, again wherever the room is now after each
    /// of [`move_pauses`] while an attempt finds it not there (cluster mode: an embedded
    /// node's rooms never move, and one whose actor stopped is gone).
    async fn healing<T>(
        &self,
        room: &str,
        mut attempt: impl FnMut(RoomRef) -> LocalBoxFuture<'static, Attempt<T>>,
    ) -> Result<T, RoomOpError> {
        let mut pauses = move_pauses(if self.cluster.is_some() { MOVE_WAIT } else { Duration::ZERO });
        loop {
            if let Attempt::Done(answer) = attempt(self.find(room).await?).await {
                return answer;
            }
            match pauses.next() {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Err(RoomOpError::unavailable()),
            }
        }
    }

    /// For WebSocket sessions (`session_rooms.rs`): the room where it runs. A room between owners (or a
    /// store that does not answer) is [`Missing::Moving`], never `Unknown`.
    pub(crate) fn route(&self, room: &str) -> Lookup {
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
    pub(crate) fn follow(
        &self,
        room: &str,
        current: Option<&RoomRef>,
    ) -> Option<LocalBoxFuture<'static, Option<RoomRef>>> {
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

/// One try of a request at a [`RoomRef`].
enum Attempt<A> {
    /// The room's answer or refusal, or `room_unavailable` when no answer came (the
    /// request may have run).
    Done(Result<A, RoomOpError>),
    /// Nothing ran: the room is not where the reference points (its actor here stopped,
    /// its node does not hold it or could not be sent to, no node runs it). Asked again
    /// where the room is now, the request runs once at most.
    NotThere,
}

/// A room's answer from another node (`None`: none in time): the request's own answer,
/// decoded, or the room's refusal as it came; `NotHere` is [`Attempt::NotThere`], and
/// anything else (an answer that does not decode) `room_unavailable`.
fn answer_of<V: Ask>(reply: Option<Reply>) -> Attempt<V::Answer> {
    Attempt::Done(match reply {
        Some(Reply::NotHere) => return Attempt::NotThere,
        Some(Reply::Answer(Ok(json))) => {
            serde_json::from_str::<Answer>(&json).ok().and_then(V::from_answer).ok_or_else(RoomOpError::unavailable)
        }
        Some(Reply::Answer(Err(e))) => Err(e),
        Some(Reply::Accepted) | None => Err(RoomOpError::unavailable()),
    })
}

/// How long an HTTP call waits out a room between owners (a drain, a failover: the
/// cluster's failover takes well under a second) before it answers `room_unavailable`.
pub const MOVE_WAIT: Duration = Duration::from_secs(3);
/// The first pause before a room between owners is looked up again; each later pause
/// doubles, up to [`MOVE_PAUSE_MAX`].
const MOVE_PAUSE: Duration = Duration::from_millis(50);
const MOVE_PAUSE_MAX: Duration = Duration::from_millis(400);

/// The pauses of a call that waits out a move: 50, 100, 200, 400, 400… ms while they
/// end within `wait`.
fn move_pauses(wait: Duration) -> impl Iterator<Item = Duration> {
    let mut waited = Duration::ZERO;
    std::iter::successors(Some(MOVE_PAUSE), |p| Some((*p * 2).min(MOVE_PAUSE_MAX))).take_while(move |p| {
        waited += *p;
        waited <= wait
    })
}

impl RoomRef {
    /// The room's id.
    pub fn id(&self) -> &str {
        &self.room
    }

    /// One try of `verb` (any request of `messages.rs`) where this reference points:
    /// [`Rooms::ask`] makes it, again where the room went while a try finds it not there.
    async fn attempt<V: Ask>(&self, verb: V) -> Attempt<V::Answer> {
        match &*self.at {
            // An actor that stopped never saw the request.
            At::Local { handle, .. } if !handle.connected() => Attempt::NotThere,
            At::Local { handle, .. } => Attempt::Done(handle.ask(verb).await),
            At::Remote { node, cluster, .. } => {
                let verb = encode(&verb.into_request());
                answer_of::<V>(cluster.request(node, &self.room, |req| RoomCmd::Ask { req, verb }).await)
            }
            At::Stored(_) => Attempt::NotThere,
        }
    }

    /// One try of the room's public info (a room no node runs: its stored info).
    async fn info_attempt(&self) -> Attempt<RoomInfo> {
        match &*self.at {
            At::Stored(info) => Attempt::Done(Ok(RoomInfo::clone(info))),
            _ => self.attempt(GetInfo).await,
        }
    }

    /// One try of what the room is doing, and on which node (operators).
    async fn inspect_attempt(&self) -> Attempt<Inspection> {
        match &*self.at {
            At::Local { node, .. } | At::Remote { node, .. } => match self.attempt(Inspect).await {
                Attempt::Done(view) => Attempt::Done(view.map(|view| Inspection::Live { view, node: node.clone() })),
                Attempt::NotThere => Attempt::NotThere,
            },
            At::Stored(info) => Attempt::Done(Ok(Inspection::Stored(RoomInfo::clone(info)))),
        }
    }

    /// Tells the room a session verb (any of `messages.rs`), answered on the caller's
    /// `out`. `Err` when this node's actor did not take it (its mailbox is full, or it
    /// stopped): the client should resend. A room on another node that cannot be reached
    /// is reported later as [`RouteLost`], in order with the caller's other verbs.
    /// `received`: when the gateway took the verb off the socket.
    pub fn tell<V: Tell>(&self, caller: &Caller, verb: V, received: Instant) -> Result<(), RoomOpError> {
        match &*self.at {
            At::Local { handle, .. } => {
                let (session, user, out) = (caller.session, caller.user.clone(), caller.out.clone());
                handle.tell(Sender { session, user, out, received, hop: Duration::ZERO }, verb)
            }
            At::Remote { node, cluster, .. } => {
                let verb = verb.into_verb();
                let (room, lost, cs) = (self.room.clone(), caller.lost.clone(), verb.cs());
                let cmd = RoomCmd::tell(caller.session.0, caller.user.as_str(), verb);
                cluster.tell_or(node, &self.room, cmd, move |_| lost.do_send(RouteLost { room, cs }));
                Ok(())
            }
            At::Stored(_) => Err(RoomOpError::unavailable()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::RoomStatus;
    use crate::messages::{Act, Close, Kick, Request, SessionVerb, Start, TakeSeat};

    fn refusal() -> RoomOpError {
        RoomOpError::new(409, "room_full", "자리가 없어요")
    }

    #[test]
    fn a_call_waits_out_a_move_with_doubling_pauses_for_at_most_move_wait() {
        let pauses: Vec<u64> = move_pauses(MOVE_WAIT).map(|p| p.as_millis() as u64).collect();
        assert_eq!(pauses, [50, 100, 200, 400, 400, 400, 400, 400, 400]);
        assert!(pauses.iter().sum::<u64>() <= MOVE_WAIT.as_millis() as u64);
        // Rooms that never move (embedded) are not waited for.
        assert_eq!(move_pauses(Duration::ZERO).count(), 0);
    }

    #[test]
    fn only_a_try_that_ran_nothing_is_made_again() {
        let again = |reply: Option<Reply>| matches!(answer_of::<GetInfo>(reply), Attempt::NotThere);
        // The node does not hold the room, or the request was never sent: nothing ran.
        assert!(again(Some(Reply::NotHere)));
        // No answer in time: it may have run; answered `room_unavailable`, never again.
        assert!(!again(None));
        let Attempt::Done(Err(e)) = answer_of::<GetInfo>(None) else { panic!("no answer is an answer") };
        assert_eq!(e.code, "room_unavailable");
        // The room's own refusal is its answer.
        let Attempt::Done(Err(e)) = answer_of::<GetInfo>(Some(Reply::Answer(Err(refusal())))) else {
            panic!("a refusal is an answer")
        };
        assert_eq!(e.code, "room_full");
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

    /// A reply's decoded answer (`NotHere` is not one: `only_a_try_that_ran_nothing…`).
    fn decoded<V: Ask>(reply: Reply) -> Result<V::Answer, RoomOpError> {
        match answer_of::<V>(Some(reply)) {
            Attempt::Done(answer) => answer,
            Attempt::NotThere => panic!("an answer, not NotHere"),
        }
    }

    #[test]
    fn remote_answers_decode_or_are_unavailable() {
        let info = serde_json::json!({
            "roomId": "r", "game": "tally", "options": {}, "host": "h", "seats": [], "status": "waiting",
            "graceSec": 30, "minPlayers": 1, "maxPlayers": 4, "createdAt": 5
        });
        let answer = serde_json::json!({ "TakeSeat": info }).to_string();
        let ok = decoded::<TakeSeat>(Reply::Answer(Ok(answer.clone()))).unwrap();
        assert_eq!((ok.room_id.as_str(), ok.status), ("r", RoomStatus::Waiting));
        // The room's own refusal travels as it is.
        assert_eq!(decoded::<Kick>(Reply::Answer(Err(refusal()))), Err(refusal()));
        // Another verb's answer, or one that does not decode: `room_unavailable`.
        for reply in [Reply::Accepted, Reply::Answer(Ok("{}".into())), Reply::Answer(Ok("nope".into()))] {
            assert_eq!(decoded::<TakeSeat>(reply), Err(RoomOpError::unavailable()));
        }
        assert_eq!(decoded::<Close>(Reply::Answer(Ok(answer))), Err(RoomOpError::unavailable()));
        assert_eq!(RoomOpError::unavailable().status, 503);
        assert_eq!(RoomOpError::unknown_room().code, "unknown_room");
    }

    /// What crosses between nodes: a request and its answer survive their encodings (a
    /// request as bincode, an answer as JSON), and bytes no verb decodes from are an
    /// error, not a panic.
    #[test]
    fn requests_and_answers_round_trip_their_encodings() {
        let request = TakeSeat { user: "u".into(), name: "손님".into(), bot: false }.into_request();
        let back: Request = crate::cluster::frame::decode_bounded(&encode(&request)).unwrap();
        assert!(
            matches!(back, Request::TakeSeat(TakeSeat { ref user, ref name, bot: false }) if user.as_str() == "u" && name == "손님")
        );
        assert_eq!(back.name(), "TakeSeat");
        let verb = Act { cs: 7, action: r#"{"type":"ring"}"#.into() }.into_verb();
        let back: SessionVerb = crate::cluster::frame::decode_bounded(&encode(&verb)).unwrap();
        assert_eq!(back.cs(), Some(7));
        assert!(crate::cluster::frame::decode_bounded::<SessionVerb>(&[200, 1, 2]).is_err());
        assert!(crate::cluster::frame::decode_bounded::<Request>(&[]).is_err());
    }

    #[actix::test]
    async fn a_local_room_answers_its_verbs_and_an_unknown_one_is_404() {
        let directory = Arc::new(Directory::new());
        let rooms = Rooms::new("n1".into(), directory.clone(), None);
        assert_eq!(rooms.find("r1").await.err(), Some(RoomOpError::unknown_room()));
        assert!(matches!(rooms.route("r1"), Lookup::Now(Err(Missing::Unknown))));
        crate::spawn::tally_r1_for_tests(directory);
        let room = rooms.find("r1").await.unwrap();
        assert_eq!(room.id(), "r1");
        assert_eq!(rooms.info("r1").await.unwrap().host, PlayerId::from("h"));
        let seated = rooms.ask("r1", TakeSeat { user: "g".into(), name: "손님".into(), bot: false }).await.unwrap();
        assert_eq!(seated.seats.len(), 2);
        // The room's refusal comes back as the one error type.
        assert_eq!(rooms.ask("r1", Start { user: "g".into() }).await.unwrap_err().code, "not_host");
        assert!(matches!(rooms.inspect("r1").await.unwrap(), Inspection::Live { node, .. } if node == "n1"));
        // Embedded rooms never move: nothing to follow.
        assert!(rooms.follow("r1", Some(&room)).is_none());
        assert!(matches!(rooms.route("r1"), Lookup::Now(Ok(_))));
    }
}
