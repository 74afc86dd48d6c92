//! A node's connections to a Redis Cluster ([`ClusterConn`]) and the watch of the
//! cluster's slot map that all of them made from the same seeds share
//! ([`ClusterHealth`]).
//!
//! The cluster client reconnects to a master whose socket closed, and follows `MOVED`
//! after a failover or a resharding, but a master that hangs (a stuck process, a process
//! stopped) keeps its sockets open and answers nothing: the client retries a timed-out
//! request on the same socket and keeps its slot map, so every request for that
//! master's slots times out even after its replica has been promoted, until the old
//! master wakes up. A new connection asks the cluster for its slot map again and finds
//! the promoted replica. So:
//!
//! - A [`ClusterConn`] replaces itself after a request times out or finds the connection
//!   gone (at most once per [`TIMEOUT`]: each connection has that long to prove itself).
//! - That also raises the alarm: for [`WATCH_FOR`] the node reads `CLUSTER NODES` from
//!   a member every [`WATCH_EVERY`]. When the slots' masters differ from what they were
//!   (the same new map read twice in a row), every connection made before the change is
//!   replaced at once, without waiting for a request to time out on it: a connection
//!   replaced while the master hangs but before its replica is promoted has read the
//!   old map again, and connections that were idle during the hang (a store's, a
//!   thread's that had no work) have never noticed anything. The node's sharded bus
//!   subscription follows the same map (`cluster/bus.rs`).
//! - A replacement leaves out the seeds the last read flagged as failing: connecting
//!   waits for every seed, and a hung one takes its whole connection timeout.
//!
//! The map the watch compares with is read once when the first connection is made, so
//! a failover the watch only sees after it happened still counts as a change.

use crate::redis::slots::Masters;
use crate::redis::target::{RedisTarget, TIMEOUT};
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisFuture, RedisResult, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long the watch runs after the last timeout or dropped connection.
const WATCH_FOR: Duration = Duration::from_secs(30);
/// How often it reads the map meanwhile.
const WATCH_EVERY: Duration = Duration::from_millis(250);
/// How long making a replacement connection may take.
const REPLACE_WITHIN: Duration = Duration::from_secs(6);

/// A Redis Cluster connection that replaces itself when it may be stuck on a hung master
/// (see the module doc). All clones share the replacement.
#[derive(Clone)]
pub struct ClusterConn(Arc<ClusterShared>);

struct ClusterShared {
    client: ClusterClient,
    health: Arc<ClusterHealth>,
    current: RwLock<Arc<Generation>>,
    replacing: Mutex<Replacing>,
}

/// When a [`ClusterConn`] may be replaced.
struct Replacing {
    /// A replacement is being made (one at a time): its task, to abort it when a newer
    /// map makes what it connects to out of date (a task no longer named here drops
    /// what it made).
    in_flight: Option<tokio::task::AbortHandle>,
    /// No replacement after an error before this: each connection has [`TIMEOUT`] to
    /// prove itself (a master that hangs until its replica is promoted gets one new
    /// connection per timeout, not one per request), and attempts begin at most one per
    /// [`TIMEOUT`] (a cluster that refuses every connection is not asked again on every
    /// failed request). A new map seen by the watch does not wait for it.
    quiet_until: Instant,
    /// The watch's map epoch when the current connection began to be made.
    made_at: u64,
}

/// One connection of a [`ClusterConn`].
struct Generation {
    conn: ClusterConnection,
    number: u64,
}

impl ClusterConn {
    pub(crate) async fn connect(seeds: &[String]) -> RedisResult<ClusterConn> {
        let health = ClusterHealth::for_seeds(seeds);
        let made_at = health.epoch();
        let client = RedisTarget::cluster_client(seeds, None)?;
        let conn = client.get_async_connection().await?;
        let shared = Arc::new(ClusterShared {
            client,
            health: health.clone(),
            current: RwLock::new(Arc::new(Generation { conn, number: 0 })),
            replacing: Mutex::new(Replacing { in_flight: None, quiet_until: Instant::now() + TIMEOUT, made_at }),
        });
        if health.register(&shared) {
            // The map the watch will compare with.
            let first = shared.clone();
            tokio::spawn(async move {
                if let Some(view) = first.read_view().await {
                    first.health.saw(view);
                }
            });
        }
        Ok(ClusterConn(shared))
    }

    /// How many times the connection has been replaced.
    pub fn replacements(&self) -> u64 {
        self.0.current().number
    }

    /// Replaces the connection although no request on it failed (when [`Replacing`]
    /// allows it), and raises the alarm: for answers that say it may reach the wrong
    /// server, such as a `WAIT` that keeps counting fewer replicas than asked for (a
    /// connection still routed to a master demoted in a full restart would). A new
    /// connection reads the slot map again; a right one costs a reconnect, once per
    /// [`TIMEOUT`] at most.
    pub(crate) fn suspect(&self, why: &str) {
        self.alarm_and_replace(None, || why.to_owned());
    }

    /// The slots' masters as the node last read them (`None` before the first read).
    pub(crate) fn masters(&self) -> Option<Arc<Masters>> {
        self.0.health.masters()
    }

    /// Sends `pipeline` to the master of `slot` (as the client's own slot map has it),
    /// whatever slots its commands' keys are in: they must all be on that master, or the
    /// pipeline fails (a command refused inside it fails it whole on a cluster). A
    /// refusal that says a slot is elsewhere raises the alarm, so the node reads the
    /// slot map again ([`ClusterConn::masters`]).
    pub(crate) async fn route_pipeline(&self, slot: u16, pipeline: &Pipeline) -> RedisResult<Vec<Value>> {
        let used = self.0.current();
        let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
        let answer = used.conn.clone().route_pipeline(pipeline, 0, pipeline.len(), route).await;
        if let Err(e) = &answer {
            if matches!(e.kind(), ErrorKind::Moved | ErrorKind::Ask | ErrorKind::TryAgain | ErrorKind::ClusterDown) {
                self.0.health.alarm();
            }
        }
        self.checked(&used, answer)
    }

    /// `answer`, from `used`; after an error that says the connection may be stuck or
    /// gone, raises the alarm and replaces the connection if [`Replacing`] allows it.
    fn checked<T>(&self, used: &Generation, answer: RedisResult<T>) -> RedisResult<T> {
        if let Err(error) = &answer {
            if error.is_timeout() || error.is_connection_dropped() {
                self.alarm_and_replace(Some(used.number), || error.to_string());
            }
        }
        answer
    }

    /// Raises the alarm and replaces the connection if [`Replacing`] allows it (and,
    /// given `used`, only if that generation is still the current one).
    fn alarm_and_replace(&self, used: Option<u64>, why: impl FnOnce() -> String) {
        self.0.health.alarm();
        let mut replacing = self.0.replacing.lock().unwrap_or_else(PoisonError::into_inner);
        // (A task whose runtime went away is finished without having said so.)
        if replacing.in_flight.as_ref().is_none_or(tokio::task::AbortHandle::is_finished)
            && Instant::now() >= replacing.quiet_until
            && used.is_none_or(|number| self.0.current().number == number)
        {
            self.0.replace(&mut replacing, why());
        }
    }
}

impl ClusterShared {
    fn current(&self) -> Arc<Generation> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Starts making a new connection, on a task of its own, so the request that found
    /// the old one stuck returns its error at once; a replacement still being made is
    /// given up (`replacing` is this connection's, locked).
    fn replace(self: &Arc<Self>, replacing: &mut Replacing, why: String) {
        if let Some(superseded) = replacing.in_flight.take() {
            superseded.abort();
        }
        replacing.quiet_until = Instant::now() + TIMEOUT;
        replacing.made_at = self.health.epoch();
        let seeds = self.health.answering_seeds();
        let shared = self.clone();
        let task = tokio::spawn(async move {
            let client = if seeds.len() == shared.health.seeds.len() {
                Ok(shared.client.clone())
            } else {
                RedisTarget::cluster_client(&seeds, None)
            };
            // Connecting asks every seed, then reads the slot map and connects to every
            // node it names.
            let connecting = async { client?.get_async_connection().await };
            let connected = tokio::time::timeout(REPLACE_WITHIN, connecting).await;
            let mut replacing = shared.replacing.lock().unwrap_or_else(PoisonError::into_inner);
            // Superseded (aborted, but past its last await when that came)?
            if replacing.in_flight.as_ref().map(tokio::task::AbortHandle::id) != Some(tokio::task::id()) {
                return;
            }
            replacing.in_flight = None;
            let replaced = match connected {
                Ok(Ok(conn)) => {
                    let mut current = shared.current.write().unwrap_or_else(PoisonError::into_inner);
                    let number = current.number + 1;
                    *current = Arc::new(Generation { conn, number });
                    drop(current);
                    tracing::warn!(
                        after = %why,
                        replacements = number,
                        seeds = seeds.len(),
                        "Redis Cluster connection replaced (a master may hang or have failed over; the new one reads \
                         the slot map again)"
                    );
                    true
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, after = %why, "replacing the Redis Cluster connection failed");
                    false
                }
                Err(_) => {
                    tracing::warn!(after = %why, "replacing the Redis Cluster connection timed out after {REPLACE_WITHIN:?}");
                    false
                }
            };
            if replaced {
                // The new connection has its own TIMEOUT to prove itself.
                replacing.quiet_until = replacing.quiet_until.max(Instant::now() + TIMEOUT);
            }
        });
        replacing.in_flight = Some(task.abort_handle());
    }

    /// Replaces the connection if it was made, or began to be made, before the map the
    /// watch saw last.
    fn catch_up(self: &Arc<Self>, epoch: u64) {
        let mut replacing = self.replacing.lock().unwrap_or_else(PoisonError::into_inner);
        if replacing.made_at < epoch {
            self.replace(&mut replacing, "the cluster's slot map changed".to_owned());
        }
    }

    /// `CLUSTER NODES` from a random member (the hung one too, sometimes: then this
    /// times out), read.
    async fn read_view(&self) -> Option<ClusterView> {
        let mut conn = self.current().conn.clone();
        let mut nodes = redis::cmd("CLUSTER");
        nodes.arg("NODES");
        let read = nodes.query_async::<String>(&mut conn);
        let text = tokio::time::timeout(TIMEOUT / 2, read).await.ok()?.ok()?;
        let view = ClusterView::parse(&text);
        (!view.owners.is_empty()).then_some(view)
    }
}

impl ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let used = self.0.current();
            let answer = used.conn.clone().req_packed_command(cmd).await;
            self.checked(&used, answer)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let used = self.0.current();
            let answer = used.conn.clone().req_packed_commands(pipeline, offset, count).await;
            self.checked(&used, answer)
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// What a node's connections to one Redis Cluster (the same seeds) share: the watch of
/// the slot map (see the module doc).
pub(crate) struct ClusterHealth {
    seeds: Vec<String>,
    state: Mutex<Health>,
    /// Moves on each time the watch sees a new map (the bus subscription follows it).
    epoch: watch::Sender<u64>,
}

struct Health {
    /// The watch runs until then.
    watch_until: Instant,
    /// The task running it.
    watching: Option<tokio::task::AbortHandle>,
    /// The slots' masters as of the current epoch (`None` before the first read).
    owners: Option<Arc<Masters>>,
    /// The last read, to require a new map twice in a row (members can disagree for a
    /// moment while the news of a failover spreads).
    last_read: Option<Masters>,
    /// Members the last read flagged as failing (`fail` or `fail?`).
    failing: Vec<String>,
    conns: Vec<Weak<ClusterShared>>,
}

/// The [`ClusterHealth`] of each set of seeds this process connects to.
fn healths() -> &'static Mutex<HashMap<Vec<String>, Weak<ClusterHealth>>> {
    static HEALTHS: OnceLock<Mutex<HashMap<Vec<String>, Weak<ClusterHealth>>>> = OnceLock::new();
    HEALTHS.get_or_init(Mutex::default)
}

impl ClusterHealth {
    /// The one for `seeds` (made now if no connection to them is alive).
    pub(crate) fn for_seeds(seeds: &[String]) -> Arc<ClusterHealth> {
        let mut healths = healths().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(health) = healths.get(seeds).and_then(Weak::upgrade) {
            return health;
        }
        healths.retain(|_, health| health.strong_count() > 0);
        let health = Arc::new(ClusterHealth {
            seeds: seeds.to_vec(),
            state: Mutex::new(Health {
                watch_until: Instant::now(),
                watching: None,
                owners: None,
                last_read: None,
                failing: Vec::new(),
                conns: Vec::new(),
            }),
            epoch: watch::Sender::new(0),
        });
        healths.insert(seeds.to_vec(), Arc::downgrade(&health));
        health
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Health> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn epoch(&self) -> u64 {
        *self.epoch.borrow()
    }

    /// The slots' masters as of the current epoch (`None` before the first read).
    pub(crate) fn masters(&self) -> Option<Arc<Masters>> {
        self.state().owners.clone()
    }

    /// Follows the epoch (a change: the slots' masters moved).
    pub(crate) fn follow(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Adds a connection for the watch to read through and to replace; true if nobody
    /// has read the map yet.
    fn register(&self, conn: &Arc<ClusterShared>) -> bool {
        let mut state = self.state();
        state.conns.retain(|c| c.strong_count() > 0);
        state.conns.push(Arc::downgrade(conn));
        state.owners.is_none()
    }

    /// The seeds the last read did not flag as failing (all of them if that leaves none).
    pub(crate) fn answering_seeds(&self) -> Vec<String> {
        answering_seeds(&self.seeds, &self.state().failing)
    }

    /// A timeout or a dropped connection: the watch runs (on) for [`WATCH_FOR`].
    pub(crate) fn alarm(self: &Arc<Self>) {
        let mut state = self.state();
        state.watch_until = Instant::now() + WATCH_FOR;
        // (A task whose runtime went away is finished without having said so.)
        if state.watching.as_ref().is_none_or(tokio::task::AbortHandle::is_finished) {
            state.watching = Some(tokio::spawn(self.clone().watch()).abort_handle());
        }
    }

    /// Takes in a read of the map; a new one read twice moves the epoch on.
    fn saw(&self, view: ClusterView) {
        let mut state = self.state();
        state.failing = view.failing;
        let twice = state.last_read.as_ref() == Some(&view.owners);
        state.last_read = Some(view.owners.clone());
        match &state.owners {
            None => state.owners = Some(Arc::new(view.owners)),
            Some(owners) if twice && **owners != view.owners => {
                tracing::warn!(epoch = self.epoch() + 1, "the Redis Cluster's slot map changed");
                state.owners = Some(Arc::new(view.owners));
                self.epoch.send_modify(|epoch| *epoch += 1);
            }
            Some(_) => {}
        }
    }

    async fn watch(self: Arc<Self>) {
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            let conns: Vec<Arc<ClusterShared>> = {
                let mut state = self.state();
                state.conns.retain(|c| c.strong_count() > 0);
                let conns: Vec<_> = state.conns.iter().filter_map(Weak::upgrade).collect();
                if conns.is_empty() || Instant::now() >= state.watch_until {
                    state.watching = None;
                    return;
                }
                conns
            };
            // Through the first connection that answers (one whose runtime went away
            // fails at once; a read that went to the hung member times out).
            for conn in conns.iter().take(3) {
                if let Some(view) = conn.read_view().await {
                    self.saw(view);
                    break;
                }
            }
            let epoch = self.epoch();
            for conn in &conns {
                conn.catch_up(epoch);
            }
        }
    }
}

/// What one member's `CLUSTER NODES` says: the slots' masters and the members it flags
/// as failing.
#[derive(Debug, Default, PartialEq, Eq)]
struct ClusterView {
    owners: Masters,
    failing: Vec<String>,
}

impl ClusterView {
    /// Reads `CLUSTER NODES` (`<id> <ip:port@cport[,hostname]> <flags> <master> <ping>
    /// <pong> <epoch> <link> <slot>...`); a slot being migrated (`[slot->-id]`) is the
    /// old owner's still. Lines it cannot read are skipped.
    fn parse(text: &str) -> ClusterView {
        let mut view = ClusterView::default();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else { continue };
            let addr = addr.split('@').next().unwrap_or(addr).to_owned();
            let flags: Vec<&str> = flags.split(',').collect();
            if flags.iter().any(|f| *f == "fail" || *f == "fail?") {
                view.failing.push(addr.clone());
            }
            if !flags.contains(&"master") {
                continue;
            }
            for range in fields.iter().skip(8).filter(|r| !r.starts_with('[')) {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(first), Ok(last)) = (first.parse(), last.parse()) {
                    view.owners.0.push((first, last, addr.clone()));
                }
            }
        }
        view.owners.0.sort_unstable();
        view.failing.sort_unstable();
        view
    }
}

/// `host:port` of a seed URL (`redis[s]://[user:password@]host:port[/db]`).
fn seed_addr(seed: &str) -> &str {
    let rest = seed.split_once("://").map_or(seed, |(_, rest)| rest);
    let rest = rest.split(['/', '?']).next().unwrap_or(rest);
    rest.rsplit_once('@').map_or(rest, |(_, host)| host)
}

/// The seeds not flagged as failing; all of them if that leaves none.
fn answering_seeds(seeds: &[String], failing: &[String]) -> Vec<String> {
    let answering: Vec<String> = seeds.iter().filter(|s| !failing.iter().any(|f| f == seed_addr(s))).cloned().collect();
    if answering.is_empty() {
        seeds.to_vec()
    } else {
        answering
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail? - 0 1426238318243 3 connected 10923-16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail - 1426238316232 0 5 disconnected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master,nofailover - 0 0 1 connected 0-5459 5460 [5461->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 :0@0 slave,noaddr 292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 0 0 6 connected
garbage
";

    /// `NODES` after 30004 took 30003's slots over.
    fn promoted() -> String {
        NODES
            .replace("10923-16383", "")
            .replace("30004@31004,host-4 slave", "30004@31004 master")
            .replace(" 4 connected", " 4 connected 10923-16383")
    }

    #[test]
    fn a_cluster_view_reads_the_slots_masters_and_the_members_flagged_failing() {
        let view = ClusterView::parse(NODES);
        let owner = |first, last, port: u16| (first, last, format!("127.0.0.1:{port}"));
        assert_eq!(
            view.owners.0,
            vec![
                owner(0, 5459, 30001),
                owner(5460, 5460, 30001),
                owner(5461, 10922, 30002),
                owner(10923, 16383, 30003)
            ]
        );
        assert_eq!(view.failing, vec!["127.0.0.1:30003".to_owned(), "127.0.0.1:30005".to_owned()]);
        assert_eq!(
            ClusterView::parse(&promoted()).owners.0[3..],
            [owner(10923, 16383, 30004)],
            "a promotion shows as another master for the same slots"
        );
        assert_eq!(ClusterView::parse(""), ClusterView::default());
    }

    #[test]
    fn a_replacement_leaves_out_the_seeds_flagged_failing_unless_that_leaves_none() {
        let seeds: Vec<String> =
            ["redis://127.0.0.1:7001/", "rediss://user:pw@127.0.0.1:7002/0", "redis://127.0.0.1:7003"]
                .map(str::to_owned)
                .to_vec();
        assert_eq!(seed_addr(&seeds[1]), "127.0.0.1:7002");
        assert_eq!(answering_seeds(&seeds, &[]), seeds);
        assert_eq!(
            answering_seeds(&seeds, &["127.0.0.1:7002".to_owned(), "127.0.0.1:9999".to_owned()]),
            vec![seeds[0].clone(), seeds[2].clone()]
        );
        let all = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"].map(str::to_owned);
        assert_eq!(answering_seeds(&seeds, &all), seeds);
    }

    #[test]
    fn only_a_new_map_read_twice_in_a_row_moves_the_epoch_on() {
        let health = ClusterHealth::for_seeds(&["redis://127.0.0.1:1/".to_owned()]);
        let view = || ClusterView::parse(NODES);
        let new = || ClusterView::parse(&promoted());
        health.saw(view());
        assert_eq!(health.epoch(), 0, "the first read is what later ones compare with");
        health.saw(view());
        health.saw(new());
        assert_eq!(health.epoch(), 0, "one member's news is not the cluster's yet");
        health.saw(view());
        health.saw(new());
        assert_eq!(health.epoch(), 0);
        health.saw(new());
        assert_eq!(health.epoch(), 1);
        health.saw(new());
        assert_eq!(health.epoch(), 1, "the same map again is no change");
        assert_eq!(health.answering_seeds(), health.seeds);
        assert!(Arc::ptr_eq(&health, &ClusterHealth::for_seeds(&health.seeds)), "one per set of seeds");
    }
}
