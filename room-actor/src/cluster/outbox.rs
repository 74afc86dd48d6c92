//! Everything a node sends to another node leaves through that node's outbox: one queue
//! per destination, drained by one task that publishes whatever gathered while its
//! previous publish was in flight as one frame (group commit). A busy node pays one
//! `PUBLISH` per destination per Redis round trip instead of one per command, reply or
//! session message; an idle one pays exactly the round trip it paid before. Order is kept
//! per destination: one queue, one publish in flight. Session messages in a batch share
//! their texts, so an update several of a node's sessions see crosses once.
//!
//! Before it cuts a frame the task lets the rest of its thread's tick run
//! ([`let_the_tick_finish`](crate::pace::let_the_tick_finish)): what the rooms
//! woken in the same round send goes in the same frame.
//!
//! With a batch window (`ROOMD__CLUSTER__BATCH_WINDOW_MS`, at most 5 ms by default) the
//! task waits after a frame's first message before it takes the rest, while the
//! destination is busy enough to fill it, until five more have come (an update several
//! sessions see counts once), at most as long as its rate takes to bring them
//! (`pace.rs`): fewer, larger publishes for that much more latency per hop where they
//! pay, and no wait on a quiet one. The frame is stamped with the time its first message
//! was taken, so the hop a ring is credited with (`bus.rs`) includes the window it waited.
//!
//! With peer links (`link.rs`) a frame goes on the destination's link instead of through
//! Redis, in the same order from the same task; the task falls back to Redis while its
//! destination has no link. A frame for a link waits for no window, only for the rest of
//! the tick: a link write saves no Redis round trip, and what a busy owner sends comes
//! out bunched already, behind the append batch that stored it. Measured, the wait there
//! cost every crossing its length and saved no CPU (docs/bench-history-2026-12.md, "Frames on a peer
//! link wait for no window"); through Redis it still saves `PUBLISH`es.
//!
//! A [`RemoteOut`] stands in for each remote subscriber ([`Out::Remote`](crate::messages::Out)):
//! a room's frame for it goes straight into the outbox toward its node.

use crate::cluster::bus::{self, Envelope, Publisher, SessionFrame};
use crate::cluster::link::{self, Link, Links};
use crate::error::StoreError;
use crate::pace::{gather, Pace};
use crate::wire::ToClient;
use bytestring::ByteString;
use prometheus::IntCounter;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

/// At most this many commands, replies and session messages go in one frame.
pub const MAX_BATCH: usize = 512;
/// A frame stops taking session texts once they reach this many bytes.
pub const MAX_BATCH_BYTES: usize = 1 << 20;

/// Who hears whether a message's frame was published.
enum Done {
    /// An awaited send: the outcome.
    Reply(oneshot::Sender<Result<(), StoreError>>),
    /// A message sent without waiting: called only if its frame was not published.
    OnFailure(Box<dyn FnOnce(StoreError) + Send>),
}

impl Done {
    fn tell(self, result: &Result<(), StoreError>) {
        match (self, result) {
            (Done::Reply(tx), _) => {
                let _ = tx.send(result.clone());
            }
            (Done::OnFailure(failed), Err(e)) => failed(e.clone()),
            (Done::OnFailure(_), Ok(())) => {}
        }
    }
}

/// What waits in a destination's queue.
enum Item {
    /// A command, reply or node command; `done` hears whether its frame was published.
    Envelope {
        envelope: Envelope,
        done: Option<Done>,
    },
    Session {
        session: u64,
        msg: ToClient,
    },
}

/// The outboxes of one node, one per destination node (created on first use).
#[derive(Clone)]
pub struct Outboxes {
    publisher: Publisher,
    /// How long a frame's first message waits for others (zero: not at all).
    window: Duration,
    /// Peer links, when this node dials them (`ROOMD__CLUSTER__PEER_LISTEN` not `off`).
    links: Option<Arc<Links>>,
    queues: Arc<Mutex<crate::FastMap<String, mpsc::UnboundedSender<Item>>>>,
}

impl Outboxes {
    pub fn new(publisher: Publisher, window: Duration) -> Outboxes {
        Outboxes { publisher, window, links: None, queues: Arc::default() }
    }

    /// Frames go on peer links to the nodes that advertise one.
    pub fn with_links(mut self, links: Arc<Links>) -> Outboxes {
        self.links = Some(links);
        self
    }

    fn push(&self, node: &str, mut item: Item) {
        let Ok(mut queues) = self.queues.lock() else { return };
        if let Some(tx) = queues.get(node) {
            match tx.send(item) {
                Ok(()) => return,
                // Its task stopped (the node was found gone): start a fresh queue.
                Err(mpsc::error::SendError(back)) => item = back,
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let route = Route::new(node, self.publisher.clone(), self.links.clone());
        tokio::spawn(drain(route, self.window, rx, self.queues.clone(), tx.clone()));
        let _ = tx.send(item);
        queues.insert(node.to_owned(), tx);
    }

    /// Sends `envelope` to `node` in its outbox's next frame: `Ok` once that frame is
    /// published, `Unavailable` when Redis fails or nobody listens on `node`'s channel.
    pub async fn send(&self, node: &str, envelope: Envelope) -> Result<(), StoreError> {
        let (done, rx) = oneshot::channel();
        self.push(node, Item::Envelope { envelope, done: Some(Done::Reply(done)) });
        rx.await.unwrap_or_else(|_| Err(StoreError::Unavailable(format!("the outbox to {node} stopped"))))
    }

    /// Sends `envelope` to `node` without waiting (a failure is logged).
    pub fn post(&self, node: &str, envelope: Envelope) {
        self.push(node, Item::Envelope { envelope, done: None });
    }

    /// Sends `envelope` to `node` without waiting; `failed` is called (on the outbox's
    /// thread) if its frame was not published. No task per message: a session's actions
    /// to rooms elsewhere take this path.
    pub fn post_or(&self, node: &str, envelope: Envelope, failed: impl FnOnce(StoreError) + Send + 'static) {
        self.push(node, Item::Envelope { envelope, done: Some(Done::OnFailure(Box::new(failed))) });
    }

    /// Sends `msg` to `session` on `node`.
    pub fn session(&self, node: &str, session: u64, msg: ToClient) {
        self.push(node, Item::Session { session, msg });
    }
}

/// How one destination's frames leave: on its peer link when there is one, else through
/// Redis.
struct Route {
    node: String,
    channel: String,
    publisher: Publisher,
    links: Option<Arc<Links>>,
    /// With links, `roomd_bus_frames_sent_total` for each path (`link`, `redis`), looked
    /// up once rather than per frame.
    sent: Option<(IntCounter, IntCounter)>,
    link: Option<Link>,
    /// No dial before this (after a dial failed or a link broke).
    retry_at: Instant,
    /// The dial failures in a row (only the first is logged).
    failures: u32,
    /// A dial in flight: its address and outcome.
    dialling: Option<oneshot::Receiver<(String, Result<Link, String>)>>,
}

impl Route {
    fn new(node: &str, publisher: Publisher, links: Option<Arc<Links>>) -> Route {
        Route {
            node: node.to_owned(),
            channel: publisher.channel(node),
            publisher,
            sent: links.as_ref().map(|l| {
                let path = |p: &str| l.metrics.bus_frames_sent.with_label_values(&[p]);
                (path("link"), path("redis"))
            }),
            links,
            link: None,
            retry_at: Instant::now(),
            failures: 0,
            dialling: None,
        }
    }

    /// Whether the next frame goes on a peer link (one that is up and not closed by its
    /// listener): a write on the socket, with no Redis round trip a wait could save.
    fn on_link(&self) -> bool {
        self.link.as_ref().is_some_and(|link| !link.is_closed())
    }

    /// Sends one frame: whether anyone took it (`false`: nobody listens on the
    /// destination's channel, the node is gone).
    async fn send(&mut self, envelopes: &[Envelope], at: SystemTime) -> Result<bool, StoreError> {
        if let Some(links) = self.links.clone() {
            self.ensure_link(&links).await;
            if let Some(link) = self.link.as_mut() {
                // A link given up while the receiver had not closed its side (a write
                // failed or timed out, what was written went unacknowledged, or an
                // acknowledgement failed its check): frames written on it may still sit
                // unread over there, or come later.
                let mut gave_up = false;
                if !link.is_closed() {
                    if link.is_forged() {
                        // Counted here, where the link is given up: its reader only
                        // stopped reading.
                        links.metrics.bad_frames.with_label_values(&[bus::FrameSource::Link.label()]).inc();
                        warn!(
                            node = %self.node,
                            link = link.id,
                            "peer link acknowledgement failed its check (changed on the way?); this frame goes through Redis"
                        );
                    } else if link.is_stalled() {
                        warn!(
                            node = %self.node,
                            "peer link stalled: frames written {:?} ago are not acknowledged; this frame goes through Redis",
                            link::ACK_TIMEOUT
                        );
                    } else {
                        let mut framed = link::encode_frame(envelopes, at)?;
                        match tokio::time::timeout(link::WRITE_TIMEOUT, link.send(&mut framed)).await {
                            Ok(Ok(())) => {
                                if let Some((on_link, _)) = &self.sent {
                                    on_link.inc();
                                }
                                return Ok(true);
                            }
                            Ok(Err(e)) => {
                                warn!(node = %self.node, error = %e, "peer link broke; this frame goes through Redis")
                            }
                            Err(_) => {
                                warn!(node = %self.node, "peer link write timed out; this frame goes through Redis")
                            }
                        }
                    }
                    gave_up = true;
                }
                // The link is gone (its node stopped, or the write failed): through Redis
                // until a new one is up. What was written on it and not read is lost, as
                // a pub/sub message is when a subscription drops, and never comes after
                // what is published from now on: the receiver drops what the link still
                // brings once this `Unlink` is through (`link::Gate::cut`).
                let id = link.id;
                self.link = None;
                self.retry_at = Instant::now() + link::RETRY_AFTER;
                if gave_up {
                    links.metrics.bus_links_given_up.inc();
                    let mark = [Envelope::Unlink { from: links.me.clone(), link: id }];
                    if let Err(e) = self.publisher.send_on(&self.channel, &mark, SystemTime::now()).await {
                        warn!(node = %self.node, error = %e, "a given-up peer link's mark was not published");
                    }
                }
            }
            if let Some((_, on_redis)) = &self.sent {
                on_redis.inc();
            }
        }
        self.publisher.send_on(&self.channel, envelopes, at).await
    }

    /// Brings the destination's link up when it advertises one and none is up: dials it
    /// on a task of its own (frames keep going through Redis meanwhile, so an address
    /// that never answers delays nothing), and once the dial succeeded publishes its mark
    /// through Redis before any frame goes on it. Failed dials back off (1 s, doubling
    /// to [`link::MAX_RETRY_AFTER`]).
    async fn ensure_link(&mut self, links: &Arc<Links>) {
        if self.link.is_some() {
            return;
        }
        if let Some(dialling) = self.dialling.as_mut() {
            let (addr, dialled) = match dialling.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => return,
                Err(oneshot::error::TryRecvError::Closed) => (String::new(), Err("the dial stopped".to_owned())),
                Ok(answer) => answer,
            };
            self.dialling = None;
            match dialled {
                Ok(link) => self.open(link, &addr, links).await,
                Err(why) => self.dial_failed(&addr, &why),
            }
            return;
        }
        if Instant::now() < self.retry_at {
            return;
        }
        let Some(addr) = links.book.addr(&self.node) else { return };
        let (tx, rx) = oneshot::channel();
        let (links, node) = (links.clone(), self.node.clone());
        tokio::spawn(async move {
            let dialled =
                match tokio::time::timeout(link::HANDSHAKE_TIMEOUT, link::dial(&addr, &links.key, &links.me, &node))
                    .await
                {
                    Ok(Ok(link)) => Ok(link),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no handshake within {:?}", link::HANDSHAKE_TIMEOUT)),
                };
            let _ = tx.send((addr, dialled));
        });
        self.dialling = Some(rx);
    }

    /// A dialled link: used once its mark is published.
    async fn open(&mut self, link: Link, addr: &str, links: &Links) {
        let mark = [Envelope::Link { from: links.me.clone(), link: link.id }];
        match self.publisher.send_on(&self.channel, &mark, SystemTime::now()).await {
            Ok(true) => {
                info!(node = %self.node, addr = %addr, link = link.id, "peer link up");
                self.failures = 0;
                self.link = Some(link);
            }
            // Without its mark the link is not used (its frames could overtake the last
            // ones published); this frame goes through Redis and says why.
            _ => self.retry_at = Instant::now() + link::RETRY_AFTER,
        }
    }

    fn dial_failed(&mut self, addr: &str, why: &str) {
        if self.failures == 0 {
            warn!(node = %self.node, addr = %addr, error = %why, "peer link not up; frames go through Redis");
        }
        self.failures += 1;
        let backoff = link::RETRY_AFTER.saturating_mul(1 << (self.failures - 1).min(5)).min(link::MAX_RETRY_AFTER);
        self.retry_at = Instant::now() + backoff;
    }
}

/// One destination's task: waits for the first item (and then out the window, if any),
/// takes whatever else is queued (up to the batch bounds), publishes it as one frame,
/// tells the waiters, and again.
async fn drain(
    mut route: Route,
    window: Duration,
    mut rx: mpsc::UnboundedReceiver<Item>,
    queues: Arc<Mutex<crate::FastMap<String, mpsc::UnboundedSender<Item>>>>,
    own: mpsc::UnboundedSender<Item>,
) {
    let node = route.node.clone();
    let mut pace = Pace::new(window);
    while let Some(first) = rx.recv().await {
        let first_at = SystemTime::now();
        // The window where this destination's rate fills it and the frame goes through
        // Redis (ended once the messages it waits for have come: an update several
        // sessions see counts once), otherwise the rest of this thread's tick, adds what
        // it has; a full batch already waiting goes at once.
        let mut batch = Batch::default();
        batch.add(first);
        gather(&mut pace, &mut rx, MAX_BATCH, !route.on_link(), |item| {
            batch.add(item);
            if batch.full() {
                usize::MAX
            } else {
                batch.distinct - 1
            }
        })
        .await;
        while !batch.full() {
            match rx.try_recv() {
                Ok(item) => batch.add(item),
                Err(_) => break,
            }
        }
        pace.cut(batch.distinct);
        let (envelopes, waiters, sessions) = batch.finish();
        let (result, gone) = match route.send(&envelopes, first_at).await {
            Ok(true) => (Ok(()), false),
            Ok(false) => (Err(StoreError::Unavailable(format!("no node listens on {node}'s channel"))), true),
            Err(e) => (Err(e), false),
        };
        if let Err(e) = &result {
            warn!(node = %node, error = %e, envelopes = envelopes.len(), sessions, "bus frame not delivered");
        }
        for done in waiters {
            done.tell(&result);
        }
        pace.done(Instant::now());
        if gone {
            // Nobody listens there: this queue stops (what is in it fails the same way)
            // and the next message for that node starts a new one.
            if let Ok(mut queues) = queues.lock() {
                if queues.get(&node).is_some_and(|tx| tx.same_channel(&own)) {
                    queues.remove(&node);
                }
            }
            rx.close();
            while let Ok(item) = rx.try_recv() {
                if let Item::Envelope { done: Some(done), .. } = item {
                    done.tell(&result);
                }
            }
            return;
        }
    }
}

/// A frame being assembled: envelopes in order, consecutive session messages gathered
/// into one `Sessions` envelope whose equal texts are stored once.
#[derive(Default)]
struct Batch {
    envelopes: Vec<Envelope>,
    waiters: Vec<Done>,
    items: usize,
    /// Envelopes and distinct session texts: what the rooms sent, however many sessions
    /// each reaches (the rate `pace.rs` weighs).
    distinct: usize,
    text_bytes: usize,
    sessions: usize,
    texts: Vec<ByteString>,
    frames: Vec<SessionFrame>,
    /// Each text's index by the address of its bytes: a room hands every subscriber of
    /// an update the same `ByteString`, so equal texts are found without hashing their
    /// content. `texts` holds them, so an address names one text for the batch's life.
    index: crate::FastMap<(usize, usize), u32>,
}

impl Batch {
    /// Whether the frame takes no more: [`MAX_BATCH`] messages, or session texts of
    /// [`MAX_BATCH_BYTES`].
    fn full(&self) -> bool {
        self.items >= MAX_BATCH || self.text_bytes >= MAX_BATCH_BYTES
    }

    fn add(&mut self, item: Item) {
        self.items += 1;
        match item {
            Item::Envelope { envelope, done } => {
                self.distinct += 1;
                self.close_sessions();
                self.envelopes.push(envelope);
                self.waiters.extend(done);
            }
            Item::Session { session, msg } => {
                self.sessions += 1;
                let key = (msg.text.as_ptr() as usize, msg.text.len());
                let text = match self.index.get(&key) {
                    Some(i) => *i,
                    None => {
                        self.distinct += 1;
                        let i = self.texts.len() as u32;
                        self.text_bytes += msg.text.len();
                        self.index.insert(key, i);
                        self.texts.push(msg.text.clone());
                        i
                    }
                };
                let stale_route = msg.stale_route.as_deref().map(str::to_owned);
                self.frames.push(SessionFrame { session, text, close: msg.close, stale_route });
            }
        }
    }

    fn close_sessions(&mut self) {
        if self.frames.is_empty() {
            return;
        }
        self.index.clear();
        self.envelopes.push(Envelope::Sessions {
            texts: std::mem::take(&mut self.texts),
            items: std::mem::take(&mut self.frames),
        });
    }

    fn finish(mut self) -> (Vec<Envelope>, Vec<Done>, usize) {
        self.close_sessions();
        (self.envelopes, self.waiters, self.sessions)
    }
}

/// A subscriber on another node, as a room sees it.
pub struct RemoteOut {
    pub session: u64,
    pub node: String,
    pub outboxes: Outboxes,
}

impl RemoteOut {
    /// Queues `msg` for the session in its node's outbox.
    pub fn send(&self, msg: ToClient) {
        self.outboxes.session(&self.node, self.session, msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's verb for a room elsewhere; the outbox never reads a verb's bytes, so
    /// `cs` itself stands in for them.
    fn act_envelope(cs: u64) -> Envelope {
        let cmd = crate::cluster::bus::RoomCmd::Tell { session: 1, user: "u".into(), verb: cs.to_le_bytes().to_vec() };
        Envelope::Room { room: "r".into(), from: "n".into(), cmd }
    }

    fn act(cs: u64) -> Item {
        Item::Envelope { envelope: act_envelope(cs), done: None }
    }

    fn to(session: u64, text: &ByteString) -> Item {
        Item::Session { session, msg: ToClient::frame(text.clone()) }
    }

    #[test]
    fn a_batch_keeps_the_order_and_stores_each_text_once_per_run_of_session_messages() {
        let (update, other) = (ByteString::from_static("update"), ByteString::from_static("other"));
        let mut batch = Batch::default();
        for item in [to(1, &update), to(2, &update), to(3, &other), act(1), to(1, &other), act(2)] {
            batch.add(item);
        }
        assert_eq!(batch.distinct, 5, "two texts, an envelope, a text after it, an envelope");
        let (envelopes, waiters, sessions) = batch.finish();
        assert!(waiters.is_empty());
        assert_eq!(sessions, 4);
        let frame = |session, text| SessionFrame { session, text, close: false, stale_route: None };
        assert_eq!(
            envelopes,
            vec![
                Envelope::Sessions {
                    texts: vec!["update".into(), "other".into()],
                    items: vec![frame(1, 0), frame(2, 0), frame(3, 1)],
                },
                act_envelope(1),
                Envelope::Sessions { texts: vec!["other".into()], items: vec![frame(1, 0)] },
                act_envelope(2),
            ]
        );
    }
}
