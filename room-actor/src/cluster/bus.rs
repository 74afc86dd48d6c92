//! Node-to-node messages over Redis pub/sub: one channel per node
//! (`<prefix>:bus:<node>`; sharded pub/sub on a Redis Cluster, so a node's frames go to
//! its channel's shard only), bincode envelopes (externally tagged enums only, which
//! bincode can decode; game actions travel as JSON text inside).
//!
//! Client → room commands go to the room's owner node; room → client messages go to
//! each subscriber's gateway node. Everything for one node leaves through that node's
//! outbox (`outbox.rs`), which sends whatever gathered while its last publish was in
//! flight as one frame.
//!
//! A frame on the wire is `[FRAME_VERSION][sent_at: u64 LE, µs since the Unix epoch]`
//! followed by the bincode envelopes (a `Vec<Envelope>`, in order; `frame.rs`). The
//! version byte lets a node recognise (and drop, with a clear log line) frames from an
//! incompatible roomd during a rolling upgrade; the timestamp gives
//! `roomd_bus_lag_seconds`, the publish→deliver lag (across hosts it includes their
//! clock offset, so keep nodes on NTP). Anything that can publish on a node's channel can
//! put bytes there: a frame that does not decode is dropped and counted
//! (`roomd_bad_frames_total{source="bus"}`), its warning summarised (`summary.rs`), and
//! the subscription reads on.
//!
//! A frame of no envelopes is a node's probe of its own subscription, published to
//! itself every second (`cluster/node/receive.rs`): every decoder of this version
//! accepts it and has nothing to deliver, so even an older node that got one (it never
//! should: a node probes its own channel only) would ignore it.

use super::frame;
use crate::error::StoreError;
use crate::metrics::RoomMetrics;
use crate::redis::cluster::ClusterHealth;
use crate::redis::conn::ThreadConns;
use crate::redis::target::RedisTarget;
use crate::summary::{Summarised, SUMMARY_EVERY};
use futures_util::StreamExt;
use redis::{PushInfo, PushKind, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tracing::warn;

pub use super::frame::{
    decode_frame, Envelope, FrameError, NodeCmd, Reply, RoomCmd, SessionFrame, FRAME_VERSION, HEADER,
};

/// Frames `envelopes` (delivered in this order) as sent at `at`.
pub fn encode_frame(envelopes: &[Envelope], at: SystemTime) -> Result<Vec<u8>, StoreError> {
    frame::frame_within(0, 0, envelopes, at).map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub fn channel(prefix: &str, node: &str) -> String {
    format!("{prefix}:bus:{node}")
}

/// Publishing side: each thread publishes on a Redis connection of its own
/// ([`ThreadConns`]), so a room's frames leave from the thread the room runs on.
#[derive(Clone)]
pub struct Publisher {
    conns: Arc<ThreadConns>,
    prefix: String,
}

impl Publisher {
    pub fn new(conns: Arc<ThreadConns>, prefix: &str) -> Publisher {
        Publisher { conns, prefix: prefix.to_owned() }
    }

    /// Publishes `envelopes` to `node`'s channel as one frame stamped `at` (when the
    /// first of them was sent): whether anyone heard it (`false`: nobody listens there,
    /// the node is gone); `Unknown` when the connection failed after the publish was
    /// sent (it may have been heard), `Unavailable` when Redis failed otherwise (nothing
    /// was published).
    pub async fn send(&self, node: &str, envelopes: &[Envelope], at: SystemTime) -> Result<bool, StoreError> {
        self.send_on(&self.channel(node), envelopes, at).await
    }

    /// `node`'s channel, for a sender that publishes there again and again
    /// ([`Self::send_on`]).
    pub fn channel(&self, node: &str) -> String {
        channel(&self.prefix, node)
    }

    /// [`Self::send`] to a channel named by [`Self::channel`].
    pub async fn send_on(&self, channel: &str, envelopes: &[Envelope], at: SystemTime) -> Result<bool, StoreError> {
        let bytes = encode_frame(envelopes, at)?;
        let conn = self.conns.get().await?;
        let receivers = conn.publish(channel, bytes).await.map_err(|e| {
            let after_sent = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
            if after_sent && !e.is_connection_refusal() {
                StoreError::Unknown(e.to_string())
            } else {
                StoreError::Unavailable(e.to_string())
            }
        })?;
        Ok(receivers > 0)
    }
}

/// A frame's envelopes off the bus and how long it took from its sender's publish to
/// here (the hop a ring from another node's player crossed; zero from a sender whose
/// clock runs ahead).
#[derive(Debug, PartialEq)]
pub struct Delivered {
    pub envelopes: Vec<Envelope>,
    pub lag: Duration,
}

/// Where a frame came from, for `roomd_bad_frames_total{source}` and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameSource {
    /// This node's channel on Redis.
    Bus,
    /// A peer link (after its frame's tag was checked: `link_wire.rs`).
    Link,
}

impl FrameSource {
    pub fn label(self) -> &'static str {
        match self {
            FrameSource::Bus => "bus",
            FrameSource::Link => "link",
        }
    }
}

/// Bus frames dropped because they did not decode: anyone who can publish on a node's
/// channel can send them as fast as Redis takes them.
static DROPPED: Summarised = Summarised::new(|count, last| {
    if count == 1 {
        warn!(frame = last, "bus frame dropped");
    } else {
        warn!(count, last, "bus frames dropped in the last {SUMMARY_EVERY:?}");
    }
});

/// Decodes one frame from `source`, recording its lag; a bad one is logged (summarised),
/// counted and dropped, never allowed to take the node down.
pub fn accept_frame(bytes: &[u8], source: FrameSource, metrics: &RoomMetrics) -> Option<Delivered> {
    match decode_frame(bytes) {
        Ok((envelopes, sent)) => {
            // A sender whose clock is ahead gives a negative lag: recorded as zero.
            let lag = SystemTime::now().duration_since(sent).unwrap_or_default();
            // A probe (no envelopes: the node's own, see the module doc) crossed no hop
            // between nodes: it would only dilute what the lag tells.
            if !envelopes.is_empty() {
                metrics.bus_lag.observe(lag.as_secs_f64());
            }
            Some(Delivered { envelopes, lag })
        }
        Err(e) => {
            metrics.bus_dropped.inc();
            // Another version's frame is a rolling upgrade, not a bad frame: counted as
            // dropped only.
            if !matches!(e, FrameError::Version(_)) {
                metrics.bad_frames.with_label_values(&[source.label()]).inc();
            }
            let len = bytes.len();
            let source = source.label();
            DROPPED.warn(|| match e {
                FrameError::Version(v) => format!(
                    "from {source}, {len} bytes: bus version {v}, this roomd speaks {FRAME_VERSION} \
                     (mixed versions in one cluster?)"
                ),
                FrameError::Truncated => format!("from {source}, {len} bytes: truncated"),
                FrameError::Malformed(error) => format!("from {source}, {len} bytes: malformed: {error}"),
            });
            None
        }
    }
}

/// How often a cluster node asserts its sharded subscription again (`SSUBSCRIBE` is
/// idempotent): this is what finds the channel's new master after a failover or a
/// resharding when no frame would otherwise touch that shard. It is also the
/// subscription's ping: one that times out means the channel's master hangs (its
/// sockets open, nothing answered), and the cluster client would go on asking it, so
/// the node subscribes again through a new client, which reads the slot map afresh and
/// finds the promoted replica. A new client made before the promotion reads the old
/// map, so the subscription also follows the slot map that the node's cluster
/// connections watch after a timeout (`redis/cluster.rs`): when it changes, the node
/// subscribes again at once, leaving out the seeds flagged as failing.
pub const RESUBSCRIBE_EVERY: Duration = Duration::from_millis(250);

/// A node's subscription to its bus channel: the frames it delivers, in order, while its
/// task runs (dropping this ends the task at once).
pub struct Subscription {
    frames: mpsc::UnboundedReceiver<Delivered>,
    task: tokio::task::JoinHandle<()>,
}

impl Subscription {
    /// The next frame; `None` once the subscription's task ended (it never does by
    /// itself unless it panicked: its owner then makes a new one).
    pub async fn recv(&mut self) -> Option<Delivered> {
        self.frames.recv().await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Subscribes to this node's channel on the current thread and forwards decoded
/// envelopes, resubscribing with backoff whenever Redis goes away, until the
/// [`Subscription`] is dropped.
pub fn subscribe(target: RedisTarget, prefix: String, node: String, metrics: RoomMetrics) -> Subscription {
    let (tx, frames) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let channel = channel(&prefix, &node);
        let mut backoff = Duration::from_millis(50);
        let mut source = match target {
            RedisTarget::Single(url) => Source::Single(url),
            RedisTarget::Cluster(seeds) => {
                let health = ClusterHealth::for_seeds(&seeds);
                let moved = health.follow();
                Source::Cluster(health, moved)
            }
        };
        loop {
            let listened = match &mut source {
                Source::Single(url) => listen(url, &channel, &tx, &metrics).await,
                Source::Cluster(health, moved) => listen_sharded(health, moved, &channel, &tx, &metrics).await,
            };
            match listened {
                Ok(Listened::Stopped) => return,
                Ok(Listened::Lost) => {
                    backoff = Duration::from_millis(50);
                    warn!(node = %node, "bus subscription lost; resubscribing");
                }
                Ok(Listened::Silent) => {
                    backoff = Duration::from_millis(50);
                    warn!(
                        node = %node,
                        "bus subscription silent: no answer to a ping (one Redis) or to a renewed SSUBSCRIBE (a cluster) \
                         within {:?}; resubscribing on a new connection",
                        crate::redis::target::TIMEOUT
                    );
                }
                Ok(Listened::Moved) => {
                    backoff = Duration::from_millis(50);
                    warn!(node = %node, "the Redis Cluster's slot map changed; subscribing again on a new connection");
                }
                Err(e) => warn!(node = %node, error = %e, "bus subscribe failed; retrying"),
            }
            if tx.is_closed() {
                return;
            }
            match &mut source {
                // A new slot map (a hung master's replica promoted) ends the wait.
                Source::Cluster(_, moved) => tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = moved.changed() => {}
                },
                Source::Single(_) => tokio::time::sleep(backoff).await,
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    });
    Subscription { frames, task }
}

/// Where a node's subscription is: one Redis, or a Redis Cluster whose slot map it
/// follows as the node's cluster connections watch it (`redis/cluster.rs`).
enum Source {
    Single(String),
    Cluster(Arc<ClusterHealth>, watch::Receiver<u64>),
}

/// How a subscription ended.
enum Listened {
    /// Nobody reads the envelopes any more.
    Stopped,
    /// The connection went away after it was subscribed.
    Lost,
    /// The connection stopped answering (see [`PING_EVERY`] and [`RESUBSCRIBE_EVERY`]).
    Silent,
    /// The Redis Cluster's slot map changed while the subscription waited (a master
    /// that hangs, failed over; `redis/cluster.rs`).
    Moved,
}

/// How often a node pings Redis on its subscription's connection (one Redis). A
/// subscription only reads, so a connection that died without closing (Redis's host gone
/// behind a stable address, a partition, a NAT that forgot it) would leave the node deaf
/// to every frame sent through Redis until TCP gave up, many minutes later, while Redis
/// may still count it as subscribed. A ping unanswered within the Redis timeout (2 s)
/// ends the subscription, and the node subscribes again on a new connection.
pub const PING_EVERY: Duration = Duration::from_secs(1);

fn forward(bytes: &[u8], tx: &mpsc::UnboundedSender<Delivered>, metrics: &RoomMetrics) -> bool {
    match accept_frame(bytes, FrameSource::Bus, metrics) {
        Some(delivered) => tx.send(delivered).is_ok(),
        None => true,
    }
}

/// `SUBSCRIBE` on a dedicated connection to one Redis.
async fn listen(
    url: &str,
    channel: &str,
    tx: &mpsc::UnboundedSender<Delivered>,
    metrics: &RoomMetrics,
) -> redis::RedisResult<Listened> {
    crate::redis::target::install_tls_provider(url.starts_with("rediss://"));
    // Bounded like every other wait on Redis: a connection that cannot be made, or a
    // subscription never confirmed, is retried rather than waited on.
    let subscribed = tokio::time::timeout(crate::redis::target::TIMEOUT, async {
        let mut pubsub = redis::Client::open(url)?.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        redis::RedisResult::Ok(pubsub)
    })
    .await;
    let pubsub = subscribed.map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no subscription within {:?}", crate::redis::target::TIMEOUT),
        )
    })??;
    let (mut sink, mut messages) = pubsub.split();
    // The pings go on a task of their own, so the messages are read while one waits.
    let (silent, mut went_silent) = tokio::sync::oneshot::channel::<()>();
    let pinger = tokio::spawn(async move {
        loop {
            tokio::time::sleep(PING_EVERY).await;
            let answered = tokio::time::timeout(crate::redis::target::TIMEOUT, sink.ping::<Value>()).await;
            if !matches!(answered, Ok(Ok(_))) {
                let _ = silent.send(());
                return;
            }
        }
    });
    let ended = loop {
        tokio::select! {
            msg = messages.next() => match msg {
                Some(msg) => {
                    if !forward(msg.get_payload_bytes(), tx, metrics) {
                        break Listened::Stopped;
                    }
                }
                None => break Listened::Lost,
            },
            _ = &mut went_silent => break Listened::Silent,
        }
    };
    pinger.abort();
    Ok(ended)
}

/// `SSUBSCRIBE` through a cluster connection of its own (RESP3 pushes). The connection
/// resubscribes after it reconnects; a slot that moved (resharding) ends the
/// subscription with an `SUNSUBSCRIBE` push, answered by subscribing again at the slot's
/// new master, and the periodic re-assertion finds a promoted replica after a failover.
async fn listen_sharded(
    health: &Arc<ClusterHealth>,
    moved: &mut watch::Receiver<u64>,
    channel: &str,
    tx: &mpsc::UnboundedSender<Delivered>,
    metrics: &RoomMetrics,
) -> redis::RedisResult<Listened> {
    // The client made now reads the newest map; a later one ends this subscription.
    moved.borrow_and_update();
    let (push_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    let client = RedisTarget::cluster_client(&health.answering_seeds(), Some(push_tx))?;
    let subscribed = async {
        let mut conn = client.get_async_connection().await?;
        conn.ssubscribe(channel).await?;
        Ok::<_, redis::RedisError>(conn)
    };
    let subscribed = tokio::select! {
        subscribed = subscribed => subscribed,
        _ = moved.changed() => return Ok(Listened::Moved),
    };
    let mut conn = match subscribed {
        Ok(conn) => conn,
        Err(e) => {
            if e.is_timeout() {
                health.alarm();
            }
            return Err(e);
        }
    };
    let mut reassert = tokio::time::interval(RESUBSCRIBE_EVERY);
    reassert.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            push = pushes.recv() => {
                let Some(push) = push else { return Ok(Listened::Lost) };
                match push.kind {
                    PushKind::SMessage => {
                        if let Some(Value::BulkString(bytes)) = push.data.get(1) {
                            if !forward(bytes, tx, metrics) {
                                return Ok(Listened::Stopped);
                            }
                        }
                    }
                    PushKind::SUnsubscribe => {
                        // Not ours to end: the slot moved. Subscribe where it is now.
                        if let Err(e) = conn.ssubscribe(channel).await {
                            warn!(channel, error = %e, "sharded bus subscription moved; subscribing again failed");
                        }
                    }
                    _ => {}
                }
            }
            _ = reassert.tick() => {
                if tx.is_closed() {
                    return Ok(Listened::Stopped);
                }
                let renewed = tokio::select! {
                    renewed = conn.ssubscribe(channel) => renewed,
                    _ = moved.changed() => return Ok(Listened::Moved),
                };
                if let Err(e) = renewed {
                    if e.is_timeout() {
                        health.alarm();
                        return Ok(Listened::Silent);
                    }
                    warn!(channel, error = %e, "sharded bus subscription not confirmed; retrying");
                }
            }
            _ = moved.changed() => return Ok(Listened::Moved),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::frame::RoomOpError;
    use crate::log::{decode_body as decode, encode_body as encode};
    use bytestring::ByteString;
    use serde::Serialize;

    fn metrics() -> RoomMetrics {
        RoomMetrics::unregistered().unwrap()
    }

    /// The one envelope of a frame.
    fn accepted(bytes: &[u8], metrics: &RoomMetrics) -> Option<Envelope> {
        let mut envelopes = accept_frame(bytes, FrameSource::Bus, metrics)?.envelopes;
        assert_eq!(envelopes.len(), 1);
        envelopes.pop()
    }

    fn one(env: &Envelope, at: SystemTime) -> Vec<u8> {
        encode_frame(std::slice::from_ref(env), at).unwrap()
    }

    #[test]
    fn envelopes_round_trip_and_garbage_is_dropped() {
        let m = metrics();
        let env = Envelope::Room {
            room: "r".into(),
            from: "n1".into(),
            // A verb's bytes are opaque here (the room's node decodes them).
            cmd: RoomCmd::Tell { session: 7, user: "u".into(), verb: vec![2, 3, 0xff] },
        };
        let frame = one(&env, SystemTime::now());
        assert_eq!(accepted(&frame, &m), Some(env));
        let reply = Envelope::Reply {
            req: 1,
            reply: Reply::Answer(Err(RoomOpError::new(409, "room_full", "자리가 없어요"))),
        };
        assert_eq!(accepted(&one(&reply, SystemTime::now()), &m), Some(reply));
        for env in [
            Envelope::Room {
                room: "r".into(),
                from: "n1".into(),
                cmd: RoomCmd::Ask { req: 2, verb: "욕설".as_bytes().to_vec() },
            },
            Envelope::Node { from: "n1".into(), cmd: NodeCmd::Drain { req: 3, by: "token:ab12".into() } },
            Envelope::Reply { req: 3, reply: Reply::Answer(Ok("{}".into())) },
            // A stale-route frame keeps its flag across nodes; an update has none.
            Envelope::Sessions {
                texts: vec!["{}".into()],
                items: vec![
                    SessionFrame { session: 1, text: 0, close: false, stale_route: Some("r".into()) },
                    SessionFrame { session: 2, text: 0, close: true, stale_route: None },
                ],
            },
        ] {
            assert_eq!(accepted(&one(&env, SystemTime::now()), &m), Some(env));
        }
        assert_eq!(m.bus_lag.get_sample_count(), 6);
        assert_eq!(m.bus_dropped.get(), 0);
        assert_eq!(accepted(b"\x01\xff\xff\xff\xff\xff\xff\xff\xff\x00garbage", &m), None);
        assert_eq!(accepted(b"\x01\x00", &m), None);
        assert_eq!(accepted(&[], &m), None);
        assert_eq!(m.bus_dropped.get(), 3);
        // The first is a frame of version 1 (another roomd's, not a bad one).
        assert_eq!(m.bad_frames.with_label_values(&["bus"]).get(), 2);
        assert_eq!(m.bus_lag.get_sample_count(), 6);
    }

    #[test]
    fn a_probe_is_a_frame_of_no_envelopes_that_delivers_nothing_and_is_no_lag_sample() {
        let m = metrics();
        let probe = encode_frame(&[], SystemTime::now()).unwrap();
        assert_eq!(probe.len(), HEADER + 1, "the header and an empty list");
        assert_eq!(accept_frame(&probe, FrameSource::Bus, &m).map(|d| d.envelopes), Some(Vec::new()));
        assert_eq!(m.bus_dropped.get(), 0, "a valid frame");
        assert_eq!(m.bus_lag.get_sample_count(), 0, "no hop between nodes");
    }

    #[test]
    fn a_frame_carries_its_envelopes_in_order() {
        let m = metrics();
        let batch: Vec<Envelope> = (0u64..5)
            .map(|cs| Envelope::Room {
                room: "r".into(),
                from: "n1".into(),
                cmd: RoomCmd::Tell { session: 7, user: "u".into(), verb: cs.to_le_bytes().to_vec() },
            })
            .chain([Envelope::Reply { req: 9, reply: Reply::NotHere }])
            .collect();
        let frame = encode_frame(&batch, SystemTime::now()).unwrap();
        assert_eq!(accept_frame(&frame, FrameSource::Bus, &m).unwrap().envelopes, batch);
        assert_eq!(m.bus_lag.get_sample_count(), 1, "one frame, one lag sample");
    }

    #[test]
    fn a_refusal_is_encoded_as_the_status_code_and_reason_it_always_was() {
        // Replies carry `RoomOpError` itself; its bytes are those of the former
        // `{status: u16, code: String, reason: String}`, so frames keep their version.
        #[derive(Serialize)]
        struct Before {
            status: u16,
            code: String,
            reason: String,
        }
        let now = RoomOpError::new(409, "room_full", "자리가 없어요");
        let before = Before { status: 409, code: "room_full".into(), reason: "자리가 없어요".into() };
        assert_eq!(encode(&now).unwrap(), encode(&before).unwrap());
        assert_eq!(decode::<RoomOpError>(&encode(&before).unwrap()).unwrap(), now);
    }

    #[test]
    fn session_texts_are_encoded_as_the_strings_they_always_were() {
        // `Envelope::Sessions` carries `ByteString`s; their bytes are those of the former
        // `Vec<String>`, so frames keep their version.
        #[derive(Serialize)]
        enum Before {
            #[allow(dead_code)]
            Room,
            Sessions {
                texts: Vec<String>,
                items: Vec<SessionFrame>,
            },
        }
        let items = vec![SessionFrame { session: 7, text: 0, close: false, stale_route: None }];
        let now = Envelope::Sessions { texts: vec![ByteString::from("{\"t\":\"update\"}")], items: items.clone() };
        let before = Before::Sessions { texts: vec!["{\"t\":\"update\"}".into()], items };
        assert_eq!(encode(&now).unwrap(), encode(&before).unwrap());
        assert_eq!(decode::<Envelope>(&encode(&before).unwrap()).unwrap(), now);
    }

    #[test]
    fn frames_of_another_version_are_dropped() {
        let env = Envelope::Reply { req: 1, reply: Reply::NotHere };
        let mut frame = one(&env, SystemTime::now());
        frame[0] = FRAME_VERSION + 1;
        assert_eq!(decode_frame(&frame), Err(FrameError::Version(FRAME_VERSION + 1)));
        // A bare envelope without a header (what an older build sent) is refused too.
        assert!(decode_frame(&encode(&env).unwrap()).is_err());
    }

    #[test]
    fn the_lag_is_the_time_since_publication() {
        let m = metrics();
        let env = Envelope::Reply { req: 1, reply: Reply::NotHere };
        let frame = one(&env, SystemTime::now() - Duration::from_millis(250));
        let (_, sent) = decode_frame(&frame).unwrap();
        assert!(SystemTime::now().duration_since(sent).unwrap() >= Duration::from_millis(250));
        let delivered = accept_frame(&frame, FrameSource::Bus, &m).unwrap();
        assert!(delivered.lag >= Duration::from_millis(250), "{:?}", delivered.lag);
        assert!(m.bus_lag.get_sample_sum() >= 0.25, "{}", m.bus_lag.get_sample_sum());
        // From a sender whose clock runs ahead: zero, not a panic.
        let ahead = one(&env, SystemTime::now() + Duration::from_secs(5));
        assert_eq!(accept_frame(&ahead, FrameSource::Bus, &m).unwrap().lag, Duration::ZERO);
        assert_eq!(m.bus_lag.get_sample_count(), 2);
    }
}
