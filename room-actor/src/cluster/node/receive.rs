//! The bus receiver: this node's subscription to its bus channel, its peer-link listener,
//! and the loop that hands every frame's envelopes, in order, to their rooms, sockets and
//! waiting requests. It runs on a worker (where those rooms and sockets run), supervised
//! (`supervise.rs`): if any part of it ends, the whole receiver starts again.
//!
//! The subscription is verified end to end, not by a flag in memory: every
//! [`PROBE_EVERY`] the node publishes a probe (a frame of no envelopes) to its own channel
//! through Redis — on a Redis Cluster with `SPUBLISH`, on its channel's shard — and notes
//! when a frame last came back through the subscription ([`BusCheck`]). None for
//! [`UNVERIFIED_AFTER`]: the subscription is declared dead and made again, and `/readyz`
//! answers 503 `bus_unverified` until one comes back. This catches what the
//! subscription's own checks (pings, re-asserted `SSUBSCRIBE`) cannot see: a subscription
//! whose connection answers but that delivers nothing, or a task that died.

use super::ClusterNode;
use crate::cluster::bus::{self, Subscription};
use crate::cluster::link::{self, Gate, Inbound};
use crate::supervise::AbortOnDrop;
use prometheus::{IntCounter, Registry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// How often a node sends itself a probe through its bus channel. A subscription that
/// stopped delivering is found within [`UNVERIFIED_AFTER`] of its last frame, which must
/// span a few probes so a late one is no false alarm; a second keeps that under what a
/// player notices as a pause (about 3 s) for one publish per node per second, nothing
/// beside the frames a node already sends.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How often while the subscription is not verified (at start, after it was made again):
/// the node is ready a moment after its subscription is, not up to a second later. Only
/// while unverified, so a Redis outage costs a node at most five publishes a second.
pub const PROBE_EVERY_UNVERIFIED: Duration = Duration::from_millis(200);
/// No frame through the subscription for this long (three probes lost; pub/sub loses a
/// message only with its subscription): it is declared dead and made again, and the node
/// is not ready until a frame comes back.
pub const UNVERIFIED_AFTER: Duration = Duration::from_secs(3);

/// When a frame last came back through this node's bus subscription (its probes, or any
/// other node's frame published to it through Redis; peer links do not count).
pub struct BusCheck {
    since: Instant,
    /// Milliseconds from `since` to the last frame, plus one; zero: none yet.
    heard: AtomicU64,
    /// `roomd_bus_resubscribes_total`.
    remade: IntCounter,
}

impl BusCheck {
    pub(super) fn new() -> BusCheck {
        let remade = IntCounter::new(
            "roomd_bus_resubscribes_total",
            "bus subscriptions made again because no probe came back through them",
        );
        // INVARIANT: the name and help are valid Prometheus identifiers and text.
        #[allow(clippy::expect_used)]
        let remade = remade.expect("a constant counter definition");
        BusCheck { since: Instant::now(), heard: AtomicU64::new(0), remade }
    }

    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.remade.clone()))
    }

    /// A new subscription is unverified until a frame comes back through it.
    fn forget(&self) {
        self.heard.store(0, Ordering::Relaxed);
    }

    fn heard_now(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.heard.store(ms + 1, Ordering::Relaxed);
    }

    /// How long since a frame last came back through the subscription; `None` before the
    /// first.
    pub fn silence(&self) -> Option<Duration> {
        let heard = self.heard.load(Ordering::Relaxed).checked_sub(1)?;
        Some(self.since.elapsed().saturating_sub(Duration::from_millis(heard)))
    }

    /// Whether a frame came back through the subscription within [`UNVERIFIED_AFTER`].
    pub fn verified(&self) -> bool {
        self.silence().is_some_and(|silence| silence < UNVERIFIED_AFTER)
    }
}

impl ClusterNode {
    /// This node's bus subscription as last checked end to end (readiness).
    pub fn bus_check(&self) -> &BusCheck {
        &self.bus_check
    }

    fn subscribe(&self) -> Subscription {
        bus::subscribe(
            self.config.redis.clone(),
            self.config.prefix.clone(),
            self.id().to_owned(),
            self.deps.metrics.clone(),
        )
    }

    /// Takes peer links on a copy of the node's peer socket (kept for the next start of
    /// the receiver), bringing them to `links`; `None` without peer links.
    fn listen_for_links(&self, links: mpsc::UnboundedSender<Inbound>) -> Option<AbortOnDrop> {
        let peer = self.config.peer.as_ref()?;
        let copy = self.peer_listener.lock().ok()?.as_ref()?.try_clone();
        let listener =
            copy.and_then(|l| l.set_nonblocking(true).map(|()| l)).and_then(tokio::net::TcpListener::from_std);
        match listener {
            Ok(listener) => {
                info!(node = self.id(), advertise = %peer.advertise, "taking peer links");
                let metrics = self.deps.metrics.clone();
                Some(AbortOnDrop(tokio::spawn(link::listen(
                    listener,
                    peer.key.clone(),
                    self.id().to_owned(),
                    links,
                    metrics,
                ))))
            }
            Err(e) => {
                warn!(error = %e, "peer link socket unusable; frames to this node go through Redis");
                None
            }
        }
    }

    /// Publishes the probes: through Redis to this node's own channel, on this thread's
    /// connection, whatever the peer links.
    async fn probe(self: Arc<Self>) {
        let channel = self.probes.channel(self.id());
        loop {
            let sent = tokio::time::timeout(UNVERIFIED_AFTER, self.probes.send_on(&channel, &[], SystemTime::now()));
            match sent.await {
                Ok(Ok(true)) => {}
                // Nobody subscribed: the check finds the subscription dead soon enough.
                Ok(Ok(false)) => debug!(node = self.id(), "bus probe published; nobody subscribed to hear it"),
                // Redis itself is out of reach: readiness says so from its own check.
                Ok(Err(e)) => debug!(node = self.id(), error = %e, "bus probe not published"),
                Err(_) => debug!(node = self.id(), "bus probe not published in time"),
            }
            let every = if self.bus_check.verified() { PROBE_EVERY } else { PROBE_EVERY_UNVERIFIED };
            tokio::time::sleep(every).await;
        }
    }

    /// The bus receiver (see the module doc), on the current thread, until a part of it
    /// ends: the subscription's task, the peer-link listener, or the prober. The
    /// supervisor then starts it again (what it drops is what a subscription that drops
    /// loses: frames not yet delivered, which senders resend or time out on).
    pub(super) async fn receive(self: Arc<Self>) {
        // What the last receiver heard says nothing of this one's subscription.
        self.bus_check.forget();
        let mut subscription = self.subscribe();
        let mut made = Instant::now();
        let (link_tx, mut links) = mpsc::unbounded_channel();
        let mut listener = self.listen_for_links(link_tx);
        let mut prober = AbortOnDrop(tokio::spawn(self.clone().probe()));
        let mut gate = Gate::default();
        let mut tick = tokio::time::interval(link::MARK_WAIT / 4);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut check = tokio::time::interval(PROBE_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Each envelope in order: commands to one room keep their order (one
            // that must wait waits in its room's backlog, holding up no other room).
            // A link's frames wait for its mark from Redis, and stop at its sender's
            // `Unlink` (`link.rs`).
            tokio::select! {
                delivered = subscription.recv() => {
                    let Some(delivered) = delivered else {
                        warn!(node = self.id(), "the bus subscription's task ended; the bus receiver starts again");
                        return;
                    };
                    self.bus_check.heard_now();
                    for envelope in delivered.envelopes {
                        match envelope {
                            bus::Envelope::Link { link, .. } => self.deliver(gate.mark(link)),
                            bus::Envelope::Unlink { link, .. } => self.deliver(gate.cut(link)),
                            envelope => self.on_envelope(envelope, delivered.lag),
                        }
                    }
                }
                Some(inbound) = links.recv() => match inbound {
                    Inbound::Frame { link, delivered } => {
                        if gate.is_cut(link) {
                            // Written before the sender gave the link up, read after
                            // what it published since: dropped, never out of order.
                            self.deps.metrics.bus_dropped.inc();
                        } else {
                            self.deliver(gate.frame(link, delivered, Instant::now()));
                        }
                    }
                    Inbound::Closed { link } => self.deliver(gate.closed(link)),
                },
                _ = tick.tick(), if gate.holding() => self.deliver(gate.expired(Instant::now())),
                _ = check.tick() => {
                    // Given the time to subscribe and hear a probe before it is judged.
                    let silent = self.bus_check.silence().is_none_or(|s| s >= UNVERIFIED_AFTER);
                    if silent && made.elapsed() >= UNVERIFIED_AFTER {
                        warn!(
                            node = self.id(),
                            silent_for = ?self.bus_check.silence(),
                            "no probe came back through the bus subscription within {UNVERIFIED_AFTER:?}: \
                             the node is not ready and subscribes again on a new connection"
                        );
                        self.bus_check.remade.inc();
                        subscription = self.subscribe();
                        made = Instant::now();
                    }
                }
                () = async {
                    match listener.as_mut() {
                        Some(listening) => listening.await,
                        None => std::future::pending().await,
                    }
                } => {
                    warn!(node = self.id(), "the peer link listener ended; the bus receiver starts again");
                    return;
                }
                () = &mut prober => {
                    warn!(node = self.id(), "the bus prober ended; the bus receiver starts again");
                    return;
                }
            }
        }
    }

    /// Hands on frames the receive loop released (a link's, once its gate let them go).
    fn deliver(self: &Arc<Self>, frames: impl IntoIterator<Item = bus::Delivered>) {
        for delivered in frames {
            for envelope in delivered.envelopes {
                self.on_envelope(envelope, delivered.lag);
            }
        }
    }
}
