#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! No room freezes or vanishes under faults (issue #25), with real processes: three
//! `roomd` nodes and a Redis of the test's own with AOF (`appendfsync always`), or a
//! Redis Cluster of the test's own (3 masters with 2 replicas each).
//!
//! - `randomized_faults_lose_nothing_and_every_room_comes_back`: a seeded schedule of
//!   SIGKILLs (restarted at once with the same node id), SIGSTOPs shorter and longer than
//!   the lease (5 s, the default) and around the Redis client timeout (2 s), SIGTERM drains, Redis restarts and
//!   Redis pauses, peer links that die without closing, against continuous play in 12 tally rooms with players on different
//!   nodes. After each fault and at the end: every acknowledged action is in the log
//!   exactly once, seqs are contiguous, no seq was acknowledged for two actions, nobody
//!   got a definite reject or `unknown_room`, every room takes actions again within a
//!   bound. `ROOMD_FAULT_SEED` replays a seed (printed at the start), `ROOMD_FAULT_SECS`
//!   lengthens the run (30 s by default). Long runs: see benches/README.md.
//! - `randomized_faults_on_a_redis_cluster_lose_nothing_and_every_room_comes_back`: the
//!   same on a Redis Cluster, the nodes appending with `ROOMD__REDIS__ACK_REPLICAS=1`;
//!   instead of Redis restarts and pauses, a room's or a bus channel's master SIGKILLed
//!   (back as its replica's replica once that is promoted) or hung (SIGSTOP) until its
//!   replica is promoted, a replica SIGKILLed and started again, the whole Redis Cluster
//!   SIGKILLed and started again from its AOF, and slots moved to another master. The
//!   same two variables replay and lengthen it.
//! - `a_drain_and_a_same_id_restart_never_show_unknown_room`: the regression for rooms
//!   called unknown while they move.
//!
//! These fail, never skip, without `redis-server`.

mod support;

use futures_util::{SinkExt, StreamExt};
use room_actor::redis::target::RedisTarget;
use room_actor::RedisStore;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::fault_play::{check_logs, longest_gap, play, wait_all_ack_after, Player, Seen};
use support::procs::{free_port, guest, tally_room, until_sees, OwnRedis, Proc, Ws};
use support::redis_cluster::OwnRedisCluster;
use support::tcp_proxy::Proxy;
use tokio_tungstenite::tungstenite::Message;

/// These tests start several processes each: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// splitmix64: the schedule is a pure function of the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// SIGKILL a node, restart it at once with the same node id.
    Kill,
    /// SIGSTOP a node shorter than the Redis client timeout (2 s).
    StopShort,
    /// SIGSTOP a node around the Redis client timeout (2 s), within the lease (5 s).
    StopAroundTimeout,
    /// SIGSTOP a node well past the lease.
    StopLong,
    /// SIGTERM (drain), restart once it has exited.
    Drain,
    /// SIGKILL Redis, start it again (AOF).
    RedisRestart,
    /// SIGSTOP Redis past the client timeout, within the lease: appends with unknown
    /// outcomes.
    RedisPause,
    /// The peer links into a node die without closing (a partition between nodes that
    /// still reach Redis, a firewall that forgot the connections): what is written on
    /// them vanishes, and they stay open.
    LinkBlackHole,
    /// Redis Cluster: SIGKILL the master of a room's or a bus channel's slot; once its
    /// replica is promoted, start it again (it rejoins as the new master's replica).
    MasterKill,
    /// Redis Cluster: SIGSTOP such a master (its sockets open, nothing answered); once
    /// its replica is promoted, every room must play again while it still hangs; then
    /// continue it.
    MasterHang,
    /// Redis Cluster: move a room's or a bus channel's slot to another master.
    SlotMove,
    /// Redis Cluster: SIGKILL a replica of a room's or a bus channel's shard, start it
    /// again after a pause (it resynchronises).
    ReplicaKill,
    /// Redis Cluster: SIGKILL every member, start them all again after a pause, from
    /// their AOF (rooms' leases lapse meanwhile: every room is restored anew).
    ClusterRestart,
}

/// The faults on one Redis.
const FAULTS: [Fault; 8] = [
    Fault::Kill,
    Fault::StopShort,
    Fault::StopAroundTimeout,
    Fault::StopLong,
    Fault::Drain,
    Fault::RedisRestart,
    Fault::RedisPause,
    Fault::LinkBlackHole,
];

/// The faults on a Redis Cluster: the nodes' faults and the cluster's own.
const CLUSTER_FAULTS: [Fault; 11] = [
    Fault::Kill,
    Fault::StopShort,
    Fault::StopAroundTimeout,
    Fault::StopLong,
    Fault::Drain,
    Fault::LinkBlackHole,
    Fault::MasterKill,
    Fault::MasterHang,
    Fault::SlotMove,
    Fault::ReplicaKill,
    Fault::ClusterRestart,
];

/// Where the nodes keep their logs, leases and membership.
enum Backend {
    /// One Redis of the test's own, with AOF (`appendfsync always`).
    One(OwnRedis),
    /// A Redis Cluster of the test's own (3 masters with 2 replicas each); the nodes
    /// wait for a replica's acknowledgement of every append
    /// (`ROOMD__REDIS__ACK_REPLICAS=1`), so a killed master loses nothing acknowledged,
    /// and its promoted replica still has a replica to acknowledge while it is away.
    Cluster(OwnRedisCluster),
}

/// The production default lease (5 s): longer than the Redis client timeout (2 s), so a
/// pause of Redis or of a node between the two leaves appends with unknown outcomes that
/// no lease loss cleans up.
const LEASE_MS: &str = "5000";

/// Every room takes actions again within this long after a fault is over.
const RECOVERY_BOUND: Duration = Duration::from_secs(45);

/// A room unavailable this long across a fault (the fault included) gets the nodes' last
/// log lines printed: most recover within a few seconds.
const SLOW_RECOVERY: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_faults_lose_nothing_and_every_room_comes_back() {
    let _serial = SERIAL.lock().await;
    randomized(tokio::task::block_in_place(|| Backend::One(OwnRedis::start()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_faults_on_a_redis_cluster_lose_nothing_and_every_room_comes_back() {
    let _serial = SERIAL.lock().await;
    randomized(tokio::task::block_in_place(|| Backend::Cluster(OwnRedisCluster::start_with_two_replicas()))).await;
}

/// The seeded schedule of faults against continuous play, on `backend`, for
/// `ROOMD_FAULT_SECS` (else 30) seconds.
async fn randomized(mut backend: Backend) {
    let seed: u64 = match std::env::var("ROOMD_FAULT_SEED") {
        Ok(s) => s.parse().expect("ROOMD_FAULT_SEED is a number"),
        Err(_) => Rng(u64::from(std::process::id()) ^ Instant::now().elapsed().as_nanos() as u64 ^ rand_seed()).next(),
    };
    let secs: u64 = std::env::var("ROOMD_FAULT_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let on = match backend {
        Backend::One(_) => "one Redis",
        Backend::Cluster(_) => "a Redis Cluster",
    };
    println!("fault test on {on}: seed {seed} ({secs} s); replay with ROOMD_FAULT_SEED={seed} ROOMD_FAULT_SECS={secs}");
    eprintln!(
        "fault test on {on}: seed {seed} ({secs} s); replay with ROOMD_FAULT_SEED={seed} ROOMD_FAULT_SECS={secs}"
    );
    let mut rng = Rng(seed);

    let prefix = format!("roomd-faults-{seed}");
    // The nodes' Redis settings, and a store of the test's own to read the logs with.
    let (url, redis_env, target) = match &backend {
        Backend::One(redis) => (redis.url(), Vec::new(), RedisTarget::Single(redis.url())),
        Backend::Cluster(cluster) => {
            let env = vec![
                ("ROOMD__REDIS__CLUSTER_URLS", cluster.seeds()),
                ("ROOMD__REDIS__ACK_REPLICAS", "1".to_owned()),
                ("ROOMD__REDIS__ACK_TIMEOUT_MS", "300".to_owned()),
            ];
            (String::new(), env, cluster.target())
        }
    };
    // Each node takes its peer links through a proxy of the test's (on a port it keeps
    // across restarts), which can make them die without closing.
    let mut proxies = Vec::new();
    let mut link_env = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let proxy = Proxy::start(format!("127.0.0.1:{port}")).await;
        link_env.push([format!("127.0.0.1:{port}"), proxy.addr.clone()]);
        proxies.push(proxy);
    }
    let mut nodes: Vec<Proc> = tokio::task::block_in_place(|| {
        ["fa", "fb", "fc"]
            .iter()
            .zip(&link_env)
            .map(|(id, [listen, advertise])| {
                let mut env = vec![
                    ("ROOMD__CLUSTER__LEASE_MS", LEASE_MS),
                    ("ROOMD__CLUSTER__PEER_LISTEN", listen.as_str()),
                    ("ROOMD__CLUSTER__PEER_ADVERTISE", advertise.as_str()),
                ];
                env.extend(redis_env.iter().map(|(k, v)| (*k, v.as_str())));
                Proc::start(id, &prefix, &url, &env)
            })
            .collect()
    });
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    for node in &nodes {
        until_sees(&http, node, 3, Duration::from_secs(30)).await;
    }
    let addrs = Arc::new(Mutex::new(nodes.iter().map(|n| n.base.clone()).collect::<Vec<_>>()));

    // 12 rooms, two players each, on different nodes.
    const ROOMS: usize = 12;
    let mut players = Vec::new();
    let mut pks = Vec::new();
    let mut room_ids = Vec::new();
    for room in 0..ROOMS {
        let (a_home, b_home) = (room % 3, (room + 1) % 3);
        let (a_id, a_tok) = guest(&http, &nodes[a_home].base, &format!("a{room}")).await;
        let (b_id, b_tok) = guest(&http, &nodes[b_home].base, &format!("b{room}")).await;
        let (room_id, pk, _) = tally_room(&http, &nodes[a_home].base, &a_tok, &[&b_tok]).await;
        pks.push(pk);
        room_ids.push(room_id.clone());
        players.push(Player { room, room_id: room_id.clone(), user: a_id, token: a_tok, home: a_home });
        players.push(Player { room, room_id, user: b_id, token: b_tok, home: b_home });
    }
    let seen = Arc::new(Mutex::new(Seen { ack_times: vec![Vec::new(); ROOMS], ..Seen::default() }));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> =
        players.into_iter().map(|p| tokio::spawn(play(p, addrs.clone(), seen.clone(), stop.clone()))).collect();
    let store = RedisStore::connect_to(&target, &prefix).await.expect("the test's own Redis");

    // Warm up: every room plays before the first fault.
    wait_all_ack_after(&seen, Instant::now(), RECOVERY_BOUND).await.expect("every room plays before any fault");

    let mut outages: BTreeMap<Fault, Vec<Duration>> = BTreeMap::new();
    // Per kind: from the fault healed (its process back, its cluster whole) to every room
    // acknowledging an action again.
    let mut back: BTreeMap<Fault, Vec<Duration>> = BTreeMap::new();
    let mut order: Vec<Fault> = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        if order.is_empty() {
            // Every kind once per round, in a seeded order.
            order = match backend {
                Backend::One(_) => FAULTS.to_vec(),
                Backend::Cluster(_) => CLUSTER_FAULTS.to_vec(),
            };
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let fault = order.pop().unwrap();
        let target = rng.below(3) as usize;
        // A Redis Cluster fault's slot: a room's, or a node's bus channel's (drawn for
        // those faults only, so one Redis's seeds replay the schedules they always did).
        let key = match fault {
            Fault::MasterKill | Fault::MasterHang | Fault::SlotMove | Fault::ReplicaKill => match rng.below(2) {
                0 => format!("{{room:{}}}", room_ids[rng.below(ROOMS as u64) as usize]),
                _ => format!("{prefix}:bus:{}", nodes[target].id),
            },
            _ => String::new(),
        };
        let t0 = Instant::now();
        println!(
            "t={:>5.1}s {fault:?} {}",
            started.elapsed().as_secs_f64(),
            match fault {
                Fault::RedisRestart | Fault::RedisPause => "redis".to_owned(),
                Fault::MasterKill | Fault::MasterHang | Fault::SlotMove | Fault::ReplicaKill => key.clone(),
                Fault::ClusterRestart => "every member".to_owned(),
                _ => nodes[target].id.clone(),
            }
        );
        match fault {
            Fault::Kill => {
                let pause = rng.ms(0, 1500);
                tokio::task::block_in_place(|| nodes[target].kill());
                addrs.lock().unwrap()[target] = String::new();
                tokio::time::sleep(pause).await;
                tokio::task::block_in_place(|| nodes[target].up());
                addrs.lock().unwrap()[target] = nodes[target].base.clone();
            }
            Fault::StopShort | Fault::StopAroundTimeout | Fault::StopLong => {
                let pause = match fault {
                    Fault::StopShort => rng.ms(300, 1500),
                    Fault::StopAroundTimeout => rng.ms(1700, 3500),
                    _ => rng.ms(5500, 8000),
                };
                nodes[target].signal("STOP");
                tokio::time::sleep(pause).await;
                nodes[target].signal("CONT");
            }
            Fault::Drain => {
                nodes[target].signal("TERM");
                let exited = tokio::task::block_in_place(|| nodes[target].wait_exit(Duration::from_secs(20)));
                if !exited {
                    seen.lock()
                        .unwrap()
                        .violations
                        .push(format!("{} did not exit within its drain grace", nodes[target].id));
                }
                addrs.lock().unwrap()[target] = String::new();
                tokio::task::block_in_place(|| nodes[target].up());
                addrs.lock().unwrap()[target] = nodes[target].base.clone();
            }
            Fault::RedisRestart => {
                let Backend::One(redis) = &mut backend else { unreachable!("one Redis's fault") };
                let pause = rng.ms(300, 1500);
                tokio::task::block_in_place(|| redis.kill());
                tokio::time::sleep(pause).await;
                tokio::task::block_in_place(|| redis.up());
            }
            Fault::RedisPause => {
                let Backend::One(redis) = &backend else { unreachable!("one Redis's fault") };
                let pause = rng.ms(2300, 3000);
                redis.signal("STOP");
                tokio::time::sleep(pause).await;
                redis.signal("CONT");
            }
            Fault::MasterKill | Fault::MasterHang => {
                let Backend::Cluster(cluster) = &mut backend else { unreachable!("a Redis Cluster's fault") };
                let slot = tokio::task::block_in_place(|| cluster.slot(&key));
                let (master, _) = tokio::task::block_in_place(|| cluster.shard_of(slot));
                if fault == Fault::MasterKill {
                    tokio::task::block_in_place(|| cluster.kill(master.port));
                } else {
                    cluster.signal(master.port, "STOP");
                }
                tokio::task::block_in_place(|| cluster.wait_failed_over(slot, master.port, Duration::from_secs(30)));
                if fault == Fault::MasterHang {
                    // Every room plays again through the promoted replica while the old
                    // master still hangs (a client that kept asking it would wait for as
                    // long as it hangs).
                    let promoted = Instant::now();
                    if let Err(rooms) = wait_all_ack_after(&seen, promoted, RECOVERY_BOUND).await {
                        seen.lock().unwrap().violations.push(format!(
                            "MasterHang: rooms {rooms:?} took no action within {RECOVERY_BOUND:?} of the replica's \
                             promotion while the old master hung"
                        ));
                    }
                    println!(
                        "  promoted {:.1} s after the hang; every room played again {:.1} s after that",
                        (promoted - t0).as_secs_f64(),
                        promoted.elapsed().as_secs_f64()
                    );
                    cluster.signal(master.port, "CONT");
                } else {
                    tokio::task::block_in_place(|| cluster.up(master.port));
                }
                // The old master is the new one's replica again before the next fault.
                tokio::task::block_in_place(|| cluster.wait_healthy(Duration::from_secs(30)));
            }
            Fault::SlotMove => {
                let Backend::Cluster(cluster) = &backend else { unreachable!("a Redis Cluster's fault") };
                tokio::task::block_in_place(|| {
                    let slot = cluster.slot(&key);
                    let (from, _) = cluster.shard_of(slot);
                    let masters: Vec<u16> = cluster
                        .nodes()
                        .iter()
                        .filter(|n| n.master && !n.failed && n.port != from.port)
                        .map(|n| n.port)
                        .collect();
                    cluster.move_slot(slot, masters[rng.below(masters.len() as u64) as usize]);
                });
            }
            Fault::ReplicaKill => {
                let Backend::Cluster(cluster) = &mut backend else { unreachable!("a Redis Cluster's fault") };
                let pause = rng.ms(500, 3000);
                let slot = tokio::task::block_in_place(|| cluster.slot(&key));
                let (_, replica) = tokio::task::block_in_place(|| cluster.shard_of(slot));
                if let Some(replica) = replica {
                    tokio::task::block_in_place(|| cluster.kill(replica.port));
                    tokio::time::sleep(pause).await;
                    tokio::task::block_in_place(|| {
                        cluster.up(replica.port);
                        cluster.wait_healthy(Duration::from_secs(30));
                    });
                }
            }
            Fault::ClusterRestart => {
                let Backend::Cluster(cluster) = &mut backend else { unreachable!("a Redis Cluster's fault") };
                let pause = rng.ms(1000, 5000);
                tokio::task::block_in_place(|| cluster.kill_all());
                tokio::time::sleep(pause).await;
                tokio::task::block_in_place(|| {
                    cluster.up_all();
                    cluster.wait_state_ok(Duration::from_secs(60));
                    cluster.wait_healthy(Duration::from_secs(60));
                });
            }
            Fault::LinkBlackHole => {
                proxies[target].black_hole();
            }
        }
        let t_end = Instant::now();
        match wait_all_ack_after(&seen, t_end, RECOVERY_BOUND).await {
            Ok(()) => back.entry(fault).or_default().push(t_end.elapsed()),
            Err(rooms) => seen
                .lock()
                .unwrap()
                .violations
                .push(format!("after {fault:?}: rooms {rooms:?} took no action within {RECOVERY_BOUND:?}")),
        }
        let (gap, slowest) = longest_gap(&seen, t0);
        outages.entry(fault).or_default().push(gap);
        if gap > SLOW_RECOVERY {
            // Within the bound, but far slower than usual: what the nodes said, so the
            // next such run can be read rather than guessed at.
            println!("  slow: room {slowest} ({}) went {:.1} s without an ack", room_ids[slowest], gap.as_secs_f64());
            for node in &nodes {
                print!("{}", node.log_tail(12));
            }
        }
        let problems = check_logs(&store, &pks, &seen).await;
        seen.lock().unwrap().violations.extend(problems.into_iter().map(|p| format!("after {fault:?}: {p}")));
        let violations = seen.lock().unwrap().violations.clone();
        assert!(violations.is_empty(), "seed {seed}: {violations:#?}");
        tokio::time::sleep(rng.ms(300, 1500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
    let problems = check_logs(&store, &pks, &seen).await;
    let seen = seen.lock().unwrap();
    let mut violations = seen.violations.clone();
    violations.extend(problems);
    println!(
        "fault test: seed {seed}, {:.0} s of faults, {} actions acknowledged",
        started.elapsed().as_secs_f64(),
        seen.acked
    );
    for (fault, gaps) in &outages {
        let longest = gaps.iter().max().copied().unwrap_or_default();
        let healed = back.get(fault).and_then(|b| b.iter().max().copied()).unwrap_or_default();
        println!(
            "  {fault:?}: {} injected, longest room unavailability {:.1} s, every room acting again within {:.1} s of \
             the fault healing (bound {:.0} s)",
            gaps.len(),
            longest.as_secs_f64(),
            healed.as_secs_f64(),
            RECOVERY_BOUND.as_secs_f64()
        );
    }
    assert!(violations.is_empty(), "seed {seed}: {violations:#?}");
    assert!(seen.acked > 100, "seed {seed}: only {} actions acknowledged", seen.acked);
    assert!(!outages.is_empty(), "no fault was injected");
}

fn rand_seed() -> u64 {
    u64::from_le_bytes(engine::Seed::from_os().unwrap().0.to_le_bytes()[..8].try_into().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_and_a_same_id_restart_never_show_unknown_room() {
    let _serial = SERIAL.lock().await;
    let redis = OwnRedis::start();
    let url = redis.url();
    let prefix = format!("roomd-moving-{}", rand_seed());
    // A long lease: a restarted node that waited for its old lease to run out would be
    // seen answering for its rooms much later than the bound below.
    let env = [("ROOMD__CLUSTER__LEASE_MS", "20000")];
    let mut nodes: Vec<Proc> = tokio::task::block_in_place(|| {
        ["ma", "mb", "mc"].iter().map(|id| Proc::start(id, &prefix, &url, &env)).collect()
    });
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    for node in &nodes {
        until_sees(&http, node, 3, Duration::from_secs(30)).await;
    }
    let (_, alice) = guest(&http, &nodes[0].base, "alice").await;
    let (_, bob) = guest(&http, &nodes[1].base, "bob").await;
    // A room owned by mc, played from ma.
    let mut room = None;
    for _ in 0..24 {
        let (r, _, owner) = tally_room(&http, &nodes[0].base, &alice, &[&bob]).await;
        if owner == "mc" {
            room = Some(r);
            break;
        }
    }
    let room = room.expect("a room on mc");
    let mut a = connect(&nodes[0].ws(), &alice).await;
    a.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await.unwrap();
    let mut cs = 0u64;

    // Drain mc while alice plays: every answer is an ack or `room_unavailable`/`room_moved`.
    nodes[2].signal("TERM");
    let drain_started = Instant::now();
    while drain_started.elapsed() < Duration::from_secs(8) {
        cs += 1;
        acked_never_unknown(&mut a, &room, cs, Duration::from_secs(20)).await;
    }
    assert!(tokio::task::block_in_place(|| nodes[2].wait_exit(Duration::from_secs(20))), "mc exits after its drain");

    // mc comes back (same id) and gets a room of its own again.
    tokio::task::block_in_place(|| nodes[2].up());
    for node in &nodes {
        until_sees(&http, node, 3, Duration::from_secs(30)).await;
    }
    let mut room2 = None;
    for _ in 0..24 {
        let (r, _, owner) = tally_room(&http, &nodes[0].base, &alice, &[&bob]).await;
        if owner == "mc" {
            room2 = Some(r);
            break;
        }
    }
    let room2 = room2.expect("a room on the restarted mc");
    // SIGKILL mc and restart it at once with the same id: its previous process's lease
    // (20 s) is still there. The new process takes the room back at once.
    tokio::task::block_in_place(|| {
        nodes[2].kill();
        nodes[2].up();
    });
    let restarted = Instant::now();
    let mut on_mc = connect(&nodes[2].ws(), &bob).await;
    let info = http.get(format!("{}/api/rooms/{room2}", nodes[2].base)).bearer_auth(&bob).send().await.unwrap();
    assert_ne!(info.status(), 404, "a room that exists is never unknown");
    for cs in 1..=3 {
        acked_never_unknown(&mut on_mc, &room2, cs, Duration::from_secs(20)).await;
    }
    assert!(
        restarted.elapsed() < Duration::from_secs(15),
        "the restarted node took its room back only after {:?} (its old lease lasts 20 s)",
        restarted.elapsed()
    );
    // The drained room plays on too.
    cs += 1;
    acked_never_unknown(&mut a, &room, cs, Duration::from_secs(20)).await;
}

async fn connect(ws_base: &str, token: &str) -> Ws {
    tokio_tungstenite::connect_async(format!("{ws_base}/ws?token={token}")).await.unwrap().0
}

/// Sends `cs` until acknowledged (resending on `room_unavailable`/`room_moved`); panics on
/// `unknown_room` or any reject.
async fn acked_never_unknown(ws: &mut Ws, room: &str, cs: u64, within: Duration) -> u64 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        ws.send(Message::text(json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}}).to_string()))
            .await
            .unwrap();
        let answer_by = (tokio::time::Instant::now() + Duration::from_secs(3)).min(deadline);
        loop {
            let frame = match tokio::time::timeout_at(answer_by, ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => t,
                Ok(Some(Ok(_))) => continue,
                Ok(_) => panic!("socket closed waiting for cs {cs}"),
                Err(_) => break,
            };
            let msg: Value = serde_json::from_str(&frame).unwrap();
            assert_ne!(msg["code"], "unknown_room", "a room that exists was called unknown: {msg}");
            assert_ne!(msg["t"], "reject", "a definite reject for a moving room: {msg}");
            if msg["t"] == "ack" && msg["cs"] == cs {
                return msg["seq"].as_u64().unwrap();
            }
            if msg["t"] == "error" && (msg["cs"] == cs || msg["cs"].is_null()) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                break;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "cs {cs} in {room} never acknowledged");
    }
}
