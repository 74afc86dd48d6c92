//! The bus side of a cluster node: requests and commands to rooms on other nodes
//! ([`ClusterNode::request`], [`ClusterNode::tell`]), and serving what arrives on this
//! node's channel: frames for this node's sessions, replies to its requests, and other
//! nodes' room commands, each turned back into the room's own message whatever the verb
//! ([`ClusterNode::on_room_cmd`], the remote half of `Rooms::ask` and `RoomRef::tell`). A command that
//! must wait (for the room's answer, or for the room to be found) waits in its room's
//! backlog (`backlog.rs`), never in front of other rooms' commands.

use super::backlog::Joined;
use super::{ClusterNode, Owner};
use crate::cluster::bus::{Envelope, NodeCmd, Reply, RoomCmd};
use crate::cluster::frame::decode_bounded;
use crate::cluster::outbox::RemoteOut;
use crate::directory::RoomHandle;
use crate::error::StoreError;
use crate::messages::{Out, Request, RoomOpError, Sender, SessionId, SessionVerb, ToClient};
use crate::sessions::Sessions;
use crate::summary::{Summarised, SUMMARY_EVERY};
use engine::PlayerId;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::{error, info, warn};

/// How long a node waits for another node's answer to a room request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A room command from another node waiting in its room's backlog: who sent it, the
/// command, and how long its frame took to arrive.
pub(super) type Waiting = (String, RoomCmd, Duration);

/// An answer as JSON text for a bus reply (room info and views always serialize).
fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

impl ClusterNode {
    /// Where a room's frames for `session` on `node` go: that node's outbox.
    pub fn remote_out(&self, node: &str, session: u64) -> Out {
        Out::Remote(Arc::new(RemoteOut { session, node: node.to_owned(), outboxes: self.outboxes.clone() }))
    }

    /// This node's sessions: rooms elsewhere reach them through this registry.
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Sends `cmd` for `room` to `node` and waits for its reply: `NotHere` when that node
    /// does not hold the room or the command could not be sent (either way nothing ran),
    /// `None` when no reply came in time (it may have run).
    pub async fn request(&self, node: &str, room: &str, make: impl FnOnce(u64) -> RoomCmd) -> Option<Reply> {
        let from = self.id().to_owned();
        self.ask(node, |req| Envelope::Room { room: room.to_owned(), from, cmd: make(req) }).await
    }

    /// Sends a node command to `node` and waits for its reply (`NotHere` when it cannot
    /// be reached or does not answer in time).
    pub async fn request_node(&self, node: &str, make: impl FnOnce(u64) -> NodeCmd) -> Reply {
        let from = self.id().to_owned();
        self.ask(node, |req| Envelope::Node { from, cmd: make(req) }).await.unwrap_or(Reply::NotHere)
    }

    /// Publishes the envelope `make` builds for a fresh request id and waits for the
    /// reply to that id: `NotHere` if it could not be published, `None` if no reply came
    /// within [`REQUEST_TIMEOUT`].
    async fn ask(&self, node: &str, make: impl FnOnce(u64) -> Envelope) -> Option<Reply> {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(req, tx);
        }
        let reply = match self.outboxes.send(node, make(req)).await {
            Ok(()) => tokio::time::timeout(REQUEST_TIMEOUT, rx).await.ok().and_then(Result::ok),
            // A publish Redis failed after it was sent may have been heard.
            Err(StoreError::Unknown(_)) => None,
            Err(_) => Some(Reply::NotHere),
        };
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&req);
        }
        reply
    }

    /// Sends a command that needs no reply without waiting; `failed` hears if it was not
    /// published (the node is gone, or Redis is).
    pub fn tell_or(&self, node: &str, room: &str, cmd: RoomCmd, failed: impl FnOnce(StoreError) + Send + 'static) {
        let envelope = Envelope::Room { room: room.to_owned(), from: self.id().to_owned(), cmd };
        self.outboxes.post_or(node, envelope, failed);
    }

    fn reply(&self, node: &str, req: u64, reply: Reply) {
        // Not awaited: a reply that cannot be delivered is logged by the outbox, and the
        // asking node times out.
        self.outboxes.post(node, Envelope::Reply { req, reply });
    }

    /// Handles what arrives on this node's channel (`lag`: since its sender published it),
    /// without waiting for anything.
    pub(super) fn on_envelope(self: &Arc<Self>, envelope: Envelope, lag: Duration) {
        match envelope {
            Envelope::Sessions { texts, items } => {
                // One shared text per update, however many of this node's sessions see it.
                let dropped = items.iter().filter(|i| i.text as usize >= texts.len()).count();
                if dropped > 0 {
                    warn!(dropped, "session messages naming a text the frame does not carry dropped");
                }
                self.sessions.deliver(items.into_iter().filter_map(|i| {
                    let text = texts.get(i.text as usize)?.clone();
                    Some((i.session, ToClient { text, close: i.close, stale_route: i.stale_route.map(Into::into) }))
                }));
            }
            Envelope::Reply { req, reply } => {
                let waiting = self.pending.lock().ok().and_then(|mut p| p.remove(&req));
                if let Some(tx) = waiting {
                    let _ = tx.send(reply);
                }
            }
            Envelope::Room { room, from, cmd } => self.on_room_envelope(room, from, cmd, lag),
            Envelope::Node { from, cmd: NodeCmd::Drain { req, by } } => {
                info!(node = self.id(), from = %from, by = %by, "drain requested by an operator");
                self.drain_request.notify_one();
                self.reply(&from, req, Reply::Accepted);
            }
            // A peer link's marks are the receive loop's (`link::Gate`); one that reaches
            // here (a link's own frames never carry one) has nothing to open or cut.
            Envelope::Link { .. } | Envelope::Unlink { .. } => {}
        }
    }

    /// A command for a room: into its mailbox at once when the room is held here and the
    /// command needs no answer (and none of the room's earlier commands still waits);
    /// otherwise into the room's backlog, served by a task of its own.
    fn on_room_envelope(self: &Arc<Self>, room: String, from: String, cmd: RoomCmd, lag: Duration) {
        let (from, cmd, lag) = match self.backlogs.join(&room, (from, cmd, lag)) {
            Joined::Queued => return,
            Joined::Free(waiting) => waiting,
        };
        let cmd = match self.here(&room) {
            Some(handle) => match self.tell_room(&handle, &from, cmd, lag) {
                Ok(()) => return,
                Err(cmd) => cmd,
            },
            None => cmd,
        };
        if self.backlogs.start(&room, (from, cmd, lag)) {
            let node = self.clone();
            node.deps.metrics.bus_backlog_rooms.inc();
            actix::spawn(async move {
                while let Some((from, cmd, lag)) = node.backlogs.next(&room) {
                    // A command whose serving panics (restoring the room, say) is lost,
                    // as a frame is; the task goes on with the room's next ones. Ended
                    // by the panic, it would leave the backlog behind it, and every later
                    // command for the room would wait in it for good.
                    let served = AssertUnwindSafe(node.on_room_cmd(&room, &from, cmd, lag)).catch_unwind().await;
                    if let Err(panic) = served {
                        let panic = crate::supervise::panic_message(panic.as_ref());
                        error!(room = %room, from = %from, panic = %panic, "serving a command from another node panicked");
                        if let Some(supervisor) = node.supervisor.get() {
                            supervisor.count_contained("bus_backlog");
                        }
                    }
                }
                node.deps.metrics.bus_backlog_rooms.dec();
            });
        }
    }

    /// The room's handle if this node holds it and its actor runs (no lookup needed).
    fn here(&self, room: &str) -> Option<RoomHandle> {
        self.holds(room).then(|| self.deps.directory.handle(room)).flatten()
    }

    /// Hands a session verb to the room; a request comes back (`Err`).
    fn tell_room(&self, handle: &RoomHandle, from: &str, cmd: RoomCmd, lag: Duration) -> Result<(), RoomCmd> {
        let RoomCmd::Tell { session, user, verb } = cmd else { return Err(cmd) };
        let Some(verb) = session_verb(from, &verb) else { return Ok(()) };
        let sender = Sender {
            session: SessionId(session),
            user: PlayerId::from(user),
            out: self.remote_out(from, session),
            received: Instant::now(),
            hop: lag,
        };
        // A full mailbox drops the verb as it would a local session's; the room's
        // answers (or their absence) tell the client what to resend.
        let _ = handle.tell(sender, verb);
        Ok(())
    }

    async fn on_room_cmd(self: &Arc<Self>, room: &str, from: &str, cmd: RoomCmd, lag: Duration) {
        let handle = match self.locate(room).await {
            Ok(Owner::Here(handle)) => Some(handle),
            _ => None,
        };
        let Some(handle) = handle else {
            // Not ours (any more): the asking node looks the room up again; a session is
            // told to subscribe again or resend.
            match cmd {
                RoomCmd::Ask { req, .. } => self.reply(from, req, Reply::NotHere),
                RoomCmd::Tell { session, verb, .. } => {
                    if let Some(text) = session_verb(from, &verb).and_then(|verb| verb.not_here(room)) {
                        let _ = self.remote_out(from, session).try_send(text);
                    }
                }
            }
            return;
        };
        let Err(RoomCmd::Ask { req, verb }) = self.tell_room(&handle, from, cmd, lag) else { return };
        let answer = match decode_bounded::<Request>(&verb) {
            Ok(request) => handle.ask(request).await.map(|answer| json(&answer)),
            Err(e) => {
                // A verb this roomd does not know (a newer node's, in a rolling upgrade):
                // the caller may try again once every node runs the new version.
                UNKNOWN_VERBS.warn(|| format!("a request from {from}: {e} (a newer roomd in the cluster?)"));
                Err(RoomOpError::unavailable())
            }
        };
        self.reply(from, req, Reply::Answer(answer));
    }
}

/// Verbs from other nodes that this roomd cannot read: summarised, since a newer node
/// in a rolling upgrade may send many.
static UNKNOWN_VERBS: Summarised = Summarised::new(|count, last| {
    if count == 1 {
        warn!(verb = last, "room verb from another node not understood");
    } else {
        warn!(count, last, "room verbs from other nodes not understood in the last {SUMMARY_EVERY:?}");
    }
});

/// A session verb from another node's bytes; `None` (logged) for one this roomd cannot
/// read.
fn session_verb(from: &str, bytes: &[u8]) -> Option<SessionVerb> {
    decode_bounded::<SessionVerb>(bytes)
        .map_err(|e| UNKNOWN_VERBS.warn(|| format!("a session's, from {from}: {e} (a newer roomd in the cluster?)")))
        .ok()
}
