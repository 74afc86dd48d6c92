//! Prometheus metrics the rooms update (the gateway serves them at `/metrics`).

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

#[derive(Clone)]
pub struct RoomMetrics {
    pub rooms: IntGauge,
    pub games_started: IntCounter,
    pub games_finished: IntCounter,
    pub applied: IntCounter,
    pub rejected: IntCounterVec,
    /// From the moment the gateway took the message to the moment it was persisted and
    /// broadcast: queue wait + validate + apply + store append.
    pub action_latency: Histogram,
    pub store_append: Histogram,
    pub room_panics: IntCounter,
    /// Games this node took over from their log (failover or drain handover); a new room
    /// placed here does not count.
    pub rooms_restored: IntCounter,
    /// Appends refused because this node had lost the room's lease.
    pub fenced_appends: IntCounter,
    /// Store operations that failed (Redis unreachable, timeouts).
    pub store_errors: IntCounter,
    /// Appends whose outcome the store left unknown (a timeout, a dropped connection) or
    /// that found the log ahead of the room: each is resolved by reading the log back.
    pub store_unknown_outcomes: IntCounter,
    /// Rooms waiting right now for an unknown outcome to resolve (they answer
    /// `room_unavailable` meanwhile and resume by themselves).
    pub rooms_stalled: IntGauge,
    /// Stalled rooms (cluster mode) that gave themselves up after
    /// [`crate::room::STALL_GIVE_UP`] so the node restores them afresh from their log.
    pub stalls_given_up: IntCounter,
    /// Quick-chat phrases rooms of this node fanned out (refused ones not counted).
    pub chat_phrases: IntCounter,
    /// Drains this node went through (SIGTERM).
    pub drains: IntCounter,
    /// Pub/sub publish → delivery to this node's bus loop.
    pub bus_lag: Histogram,
    /// Bus frames dropped (malformed, truncated, another roomd version, or read from a
    /// peer link after its sender gave it up).
    pub bus_dropped: IntCounter,
    /// Frames that did not decode (`source="bus"`: from Redis) or failed their peer link's
    /// check (`source="link"`: a changed, replayed, dropped or reordered frame or
    /// acknowledgement, an impossible length, or a frame that did not decode). Each is
    /// dropped (and also counted in `bus_dropped`); a link's ends its link.
    pub bad_frames: IntCounterVec,
    /// Bus frames this node sent, by path: `link` (a peer link) or `redis` (pub/sub).
    pub bus_frames_sent: IntCounterVec,
    /// Peer links this node refused (no proof of the cluster's secret, another node's
    /// hello, no handshake in time).
    pub bus_links_refused: IntCounter,
    /// Peer links this node gave up as their sender: a write failed or took
    /// `link::WRITE_TIMEOUT`, or what it wrote went unacknowledged for `link::ACK_TIMEOUT`.
    pub bus_links_given_up: IntCounter,
    /// Live nodes this node can dial a peer link to (they advertise an address).
    pub bus_peer_addresses: IntGauge,
    /// Rooms whose commands from other nodes wait behind a slow one of theirs (a request
    /// awaiting the room's answer, a room being found or restored): `backlog.rs`.
    pub bus_backlog_rooms: IntGauge,
}

const LATENCY_BUCKETS: &[f64] = &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

impl RoomMetrics {
    pub fn new(registry: &Registry) -> Result<RoomMetrics, prometheus::Error> {
        let m = RoomMetrics {
            rooms: IntGauge::new("roomd_rooms", "rooms hosted by this node")?,
            games_started: IntCounter::new("roomd_games_started_total", "games started on this node")?,
            games_finished: IntCounter::new("roomd_games_finished_total", "games finished on this node")?,
            applied: IntCounter::new("roomd_actions_applied_total", "inputs applied (client and server)")?,
            rejected: IntCounterVec::new(
                Opts::new("roomd_actions_rejected_total", "inputs refused, by code"),
                &["code"],
            )?,
            action_latency: Histogram::with_opts(
                HistogramOpts::new("roomd_action_latency_seconds", "client action: receive to persisted and broadcast")
                    .buckets(LATENCY_BUCKETS.to_vec()),
            )?,
            store_append: Histogram::with_opts(
                HistogramOpts::new("roomd_store_append_seconds", "room log append latency")
                    .buckets(LATENCY_BUCKETS.to_vec()),
            )?,
            room_panics: IntCounter::new("roomd_room_panics_total", "game code panics contained by a room")?,
            rooms_restored: IntCounter::new(
                "roomd_rooms_restored_total",
                "rooms restored on this node from their log",
            )?,
            fenced_appends: IntCounter::new("roomd_fenced_appends_total", "appends refused for a lost room lease")?,
            store_errors: IntCounter::new("roomd_store_errors_total", "failed room store operations")?,
            store_unknown_outcomes: IntCounter::new(
                "roomd_store_unknown_outcomes_total",
                "appends with an unknown outcome (timeout, dropped connection) or a log ahead of the room",
            )?,
            rooms_stalled: IntGauge::new(
                "roomd_rooms_stalled",
                "rooms waiting for an unknown append outcome to resolve (answering room_unavailable)",
            )?,
            stalls_given_up: IntCounter::new(
                "roomd_room_stalls_given_up_total",
                "stalled rooms that gave themselves up to be restored afresh from their log (cluster mode)",
            )?,
            chat_phrases: IntCounter::new("roomd_chat_phrases_total", "quick-chat phrases fanned out by rooms of this node")?,
            drains: IntCounter::new("roomd_drains_total", "drains (SIGTERM) of this node")?,
            bus_lag: Histogram::with_opts(
                HistogramOpts::new(
                    "roomd_bus_lag_seconds",
                    "bus frame sent (publish or link write) to delivery at this node",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
            )?,
            bus_dropped: IntCounter::new(
                "roomd_bus_dropped_total",
                "bus frames dropped as malformed or foreign, or read from a peer link after its sender gave it up",
            )?,
            bad_frames: IntCounterVec::new(
                Opts::new(
                    "roomd_bad_frames_total",
                    "frames dropped because they did not decode (bus: from Redis) or failed a peer link's check (link)",
                ),
                &["source"],
            )?,
            bus_frames_sent: IntCounterVec::new(
                Opts::new("roomd_bus_frames_sent_total", "bus frames sent to other nodes, by path (link or redis)"),
                &["path"],
            )?,
            bus_peer_addresses: IntGauge::new(
                "roomd_bus_peer_addresses",
                "live nodes this node can dial a peer link to (they advertise an address)",
            )?,
            bus_links_refused: IntCounter::new(
                "roomd_bus_links_refused_total",
                "peer links refused (no proof of the cluster secret, wrong node, no handshake)",
            )?,
            bus_links_given_up: IntCounter::new(
                "roomd_bus_links_given_up_total",
                "peer links given up by this node as their sender (a write failed or timed out, or frames went unacknowledged)",
            )?,
            bus_backlog_rooms: IntGauge::new(
                "roomd_bus_backlog_rooms",
                "rooms whose commands from other nodes wait behind a slow one of theirs",
            )?,
        };
        registry.register(Box::new(m.rooms.clone()))?;
        registry.register(Box::new(m.games_started.clone()))?;
        registry.register(Box::new(m.games_finished.clone()))?;
        registry.register(Box::new(m.applied.clone()))?;
        registry.register(Box::new(m.rejected.clone()))?;
        registry.register(Box::new(m.action_latency.clone()))?;
        registry.register(Box::new(m.store_append.clone()))?;
        registry.register(Box::new(m.room_panics.clone()))?;
        registry.register(Box::new(m.rooms_restored.clone()))?;
        registry.register(Box::new(m.fenced_appends.clone()))?;
        registry.register(Box::new(m.store_errors.clone()))?;
        registry.register(Box::new(m.store_unknown_outcomes.clone()))?;
        registry.register(Box::new(m.rooms_stalled.clone()))?;
        registry.register(Box::new(m.stalls_given_up.clone()))?;
        registry.register(Box::new(m.chat_phrases.clone()))?;
        registry.register(Box::new(m.drains.clone()))?;
        registry.register(Box::new(m.bus_lag.clone()))?;
        registry.register(Box::new(m.bus_dropped.clone()))?;
        // Both sources exported from the start (at 0), so an alert on them has a series.
        for source in ["bus", "link"] {
            m.bad_frames.with_label_values(&[source]);
        }
        registry.register(Box::new(m.bad_frames.clone()))?;
        // Both paths exported from the start (at 0), so a rate over them is never empty.
        for path in ["link", "redis"] {
            m.bus_frames_sent.with_label_values(&[path]);
        }
        registry.register(Box::new(m.bus_frames_sent.clone()))?;
        registry.register(Box::new(m.bus_links_refused.clone()))?;
        registry.register(Box::new(m.bus_links_given_up.clone()))?;
        registry.register(Box::new(m.bus_peer_addresses.clone()))?;
        registry.register(Box::new(m.bus_backlog_rooms.clone()))?;
        Ok(m)
    }

    /// Metrics registered nowhere (tests).
    pub fn unregistered() -> Result<RoomMetrics, prometheus::Error> {
        RoomMetrics::new(&Registry::new())
    }
}
