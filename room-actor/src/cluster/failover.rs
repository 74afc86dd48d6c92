//! Fast detection of a dead node, from what Redis already knows.
//!
//! Every node subscribes to its own bus channel on a dedicated connection. When its
//! process dies (crash, OOM kill, SIGKILL, pod deleted) the kernel closes that TCP
//! connection and Redis drops the subscription at once. So every node polls, every
//! [`DETECT_EVERY`], `PUBSUB NUMSUB` over the channels of the live nodes — one command,
//! O(number of nodes), no key reads — and declares a node dead when its channel has had
//! no subscriber for [`MISSES_TO_DECLARE`] polls in a row **and** it sent no heartbeat in
//! between (a live node whose subscriber connection is only reconnecting keeps beating,
//! and its score moves). The dead node is removed from the membership (only if its score
//! is still the one seen, `redis/lua/forget.lua`) and its rooms are taken over at once with a
//! higher epoch (`Leases::take_over`), without waiting for their leases.
//!
//! Why not `CLIENT LIST` with named connections: it is O(all clients of the Redis) per
//! poll and needs every connection (including the manager's reconnections) to be named;
//! `NUMSUB` is O(nodes) and the subscription is exactly "this process is listening".
//!
//! A node wrongly declared dead (its connections cut by a proxy or `CLIENT KILL`, its
//! process alive) loses nothing but its rooms: its leases were taken with a higher epoch,
//! so every append it tries is fenced, and its renewal loop sees the leases lost and
//! stops those rooms (their watchers get `room_moved` and follow the room).

use crate::cluster::bus;
use crate::cluster::membership::Member;
use crate::error::StoreError;
use crate::redis::conn::RedisConn;
use prometheus::{Histogram, HistogramOpts, IntCounter, Registry};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How often each node polls the other nodes' subscriptions.
pub const DETECT_EVERY: Duration = Duration::from_millis(100);
/// Polls in a row without a subscriber (and without a heartbeat) before a node is dead.
pub const MISSES_TO_DECLARE: u32 = 2;

/// `PUBSUB NUMSUB` over the nodes' bus channels: subscribers per node, in order.
pub async fn subscribers(conn: &RedisConn, prefix: &str, nodes: &[String]) -> Result<Vec<i64>, StoreError> {
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let channels: Vec<String> = nodes.iter().map(|node| bus::channel(prefix, node)).collect();
    conn.subscribers(&channels).await.map_err(|e| StoreError::Unavailable(e.to_string()))
}

/// Failover metrics (registered by the gateway next to the room metrics).
#[derive(Clone)]
pub struct FailoverMetrics {
    /// Rooms this node took over from another node before that node's lease expired
    /// (its process found dead, or its heartbeat expired).
    pub failovers: IntCounter,
    /// Nodes this node found dead (every survivor counts the same death).
    pub dead_nodes: IntCounter,
    /// Rooms this node stopped because its lease check found their lease no longer its
    /// own (taken over while it was paused or cut off, released, or lost by Redis).
    pub leases_lost: IntCounter,
    /// Per room taken over from a node found dead: from the last poll that still saw the
    /// dead node's subscription (an upper bound of the death) to the room restored here
    /// and taking inputs. Detection + take over + restore; the client's retry adds to it.
    pub resume: Histogram,
}

const RESUME_BUCKETS: &[f64] = &[0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0];

impl FailoverMetrics {
    pub fn new() -> Result<FailoverMetrics, prometheus::Error> {
        Ok(FailoverMetrics {
            failovers: IntCounter::new("roomd_failovers_total", "rooms taken over from a dead or departed node")?,
            dead_nodes: IntCounter::new(
                "roomd_dead_nodes_total",
                "nodes this node found dead (bus subscription gone)",
            )?,
            leases_lost: IntCounter::new(
                "roomd_leases_lost_total",
                "rooms this node stopped because their lease was no longer its own",
            )?,
            resume: Histogram::with_opts(
                HistogramOpts::new(
                    "roomd_failover_resume_seconds",
                    "last poll seeing the dead node alive to its room restored here",
                )
                .buckets(RESUME_BUCKETS.to_vec()),
            )?,
        })
    }

    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.failovers.clone()))?;
        registry.register(Box::new(self.dead_nodes.clone()))?;
        registry.register(Box::new(self.leases_lost.clone()))?;
        registry.register(Box::new(self.resume.clone()))
    }
}

struct Suspect {
    misses: u32,
    /// The node's heartbeat expiry when its subscription was first missed.
    score: i64,
    /// When its subscription was first missed.
    since: Instant,
}

/// What one poll found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Nodes to declare dead, with the heartbeat score they had when found dead.
    pub dead: Vec<(String, i64)>,
    /// Nodes that left the live set since the last poll (declared dead by another node,
    /// a clean leave, or their heartbeat expired): their rooms may need an owner now.
    pub departed: Vec<String>,
}

/// The detection state of one node, fed by its polls (pure: tested without Redis).
#[derive(Default)]
pub struct Detector {
    /// How long a subscription must stay missing (with no heartbeat) before its node is
    /// dead, on top of the missed polls: zero on one Redis, where a subscription lost
    /// means the Redis is lost too; a heartbeat interval and a half on a Redis Cluster,
    /// where the bus channel's shard can fail over while the membership's shard is fine,
    /// and a live node must have had the time to beat.
    min_silence: Duration,
    suspects: HashMap<String, Suspect>,
    last_seen: HashMap<String, Instant>,
    previous: HashSet<String>,
}

impl Detector {
    pub fn new() -> Detector {
        Detector::default()
    }

    /// A detector that waits `min_silence` (see the field) before a verdict.
    pub fn with_min_silence(min_silence: Duration) -> Detector {
        Detector { min_silence, ..Detector::default() }
    }

    /// Feeds one poll: the live members with their heartbeat scores (`me` excluded or
    /// not), and the subscriber counts of `others` (the live members but `me`, in order).
    pub fn observe(&mut self, me: &str, live: &[(Member, i64)], counts: &[i64], now: Instant) -> Verdict {
        let others: Vec<&(Member, i64)> = live.iter().filter(|(m, _)| m.id != me).collect();
        let mut verdict = Verdict::default();
        for ((member, score), count) in others.iter().zip(counts) {
            if *count > 0 {
                self.suspects.remove(&member.id);
                self.last_seen.insert(member.id.clone(), now);
                continue;
            }
            let fresh = Suspect { misses: 0, score: *score, since: now };
            let suspect = self.suspects.entry(member.id.clone()).or_insert(fresh);
            if suspect.score != *score {
                // A heartbeat arrived since the first miss: the process lives (its
                // subscriber is reconnecting). Start counting again.
                *suspect = Suspect { misses: 0, score: *score, since: now };
            }
            suspect.misses += 1;
            if suspect.misses >= MISSES_TO_DECLARE && now.duration_since(suspect.since) >= self.min_silence {
                verdict.dead.push((member.id.clone(), suspect.score));
            }
        }
        let current: HashSet<String> = live.iter().map(|(m, _)| m.id.clone()).collect();
        verdict.departed = self.previous.iter().filter(|n| !current.contains(*n)).cloned().collect();
        verdict.departed.sort();
        self.suspects.retain(|n, _| current.contains(n));
        self.previous = current;
        verdict
    }

    /// The last time `node`'s subscription was seen (the bound of its death).
    pub fn last_seen(&self, node: &str) -> Option<Instant> {
        self.last_seen.get(node).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(nodes: &[(&str, i64)]) -> Vec<(Member, i64)> {
        nodes.iter().map(|(id, s)| (Member { id: (*id).to_owned(), draining: false, peer: None }, *s)).collect()
    }

    #[test]
    fn a_node_without_subscriber_for_two_polls_and_no_heartbeat_is_dead() {
        let mut d = Detector::new();
        let t = Instant::now();
        let nodes = live(&[("a", 10), ("b", 10), ("me", 10)]);
        assert_eq!(d.observe("me", &nodes, &[1, 1], t), Verdict::default());
        let first = d.observe("me", &nodes, &[1, 0], t + DETECT_EVERY);
        assert!(first.dead.is_empty(), "one miss is not enough: {first:?}");
        let second = d.observe("me", &nodes, &[1, 0], t + DETECT_EVERY * 2);
        assert_eq!(second.dead, vec![("b".to_owned(), 10)]);
        assert_eq!(d.last_seen("b"), Some(t));
    }

    #[test]
    fn a_node_that_keeps_beating_while_its_subscriber_reconnects_is_not_dead() {
        let mut d = Detector::new();
        let t = Instant::now();
        assert!(d.observe("me", &live(&[("b", 10), ("me", 10)]), &[0], t).dead.is_empty());
        // Its heartbeat moved its score: it lives.
        assert!(d.observe("me", &live(&[("b", 20), ("me", 10)]), &[0], t).dead.is_empty());
        assert!(d.observe("me", &live(&[("b", 20), ("me", 10)]), &[1], t).dead.is_empty());
        // Back to listening: the count starts over.
        assert!(d.observe("me", &live(&[("b", 20), ("me", 10)]), &[0], t).dead.is_empty());
        assert_eq!(d.observe("me", &live(&[("b", 20), ("me", 10)]), &[0], t).dead.len(), 1);
    }

    #[test]
    fn on_a_redis_cluster_a_node_is_dead_only_after_it_had_the_time_to_beat() {
        let mut d = Detector::with_min_silence(Duration::from_millis(750));
        let t = Instant::now();
        let nodes = live(&[("b", 10), ("me", 10)]);
        for i in 0..7 {
            let verdict = d.observe("me", &nodes, &[0], t + DETECT_EVERY * i);
            assert!(verdict.dead.is_empty(), "poll {i}: its shard may be failing over");
        }
        assert_eq!(d.observe("me", &nodes, &[0], t + Duration::from_millis(760)).dead, vec![("b".to_owned(), 10)]);
        // A beat in the meantime starts the silence again.
        let mut d = Detector::with_min_silence(Duration::from_millis(750));
        d.observe("me", &nodes, &[0], t);
        d.observe("me", &live(&[("b", 20), ("me", 10)]), &[0], t + Duration::from_millis(500));
        let late = d.observe("me", &live(&[("b", 20), ("me", 10)]), &[0], t + Duration::from_millis(900));
        assert!(late.dead.is_empty(), "{late:?}");
    }

    #[test]
    fn a_node_leaving_the_live_set_is_reported_once() {
        let mut d = Detector::new();
        let t = Instant::now();
        d.observe("me", &live(&[("a", 1), ("b", 1), ("me", 1)]), &[1, 1], t);
        assert_eq!(d.observe("me", &live(&[("a", 1), ("me", 1)]), &[1], t).departed, vec!["b".to_owned()]);
        assert!(d.observe("me", &live(&[("a", 1), ("me", 1)]), &[1], t).departed.is_empty());
    }
}
