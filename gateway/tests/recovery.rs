#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Rooms always come back (issue 56): fault sequences nobody listed, on real processes.
//! Three `roomd` nodes, tally rooms whose two players sit on different nodes, and Redis
//! processes of the test's own (AOF `appendfsync always`, as production runs them):
//!
//! - a Redis Cluster master SIGKILLed under `ROOMD__REDIS__ACK_REPLICAS=1`, its replica
//!   promoted, the old master back as a replica 5 s later: every room plays again within
//!   3 s of the shard having its replica back, every player hears the other's actions,
//!   nothing acknowledged is lost;
//! - the whole Redis Cluster stopped for 5 s and started again from its AOF: the same
//!   within 3 s of the cluster being whole again (`cluster_state:ok` and every replica
//!   resynchronised: under `ACK_REPLICAS=1` nothing can be acknowledged before);
//! - one Redis restarted from its AOF (`ACK_REPLICAS=0`): the same; one Redis restarted
//!   *empty* is refused loudly: an error line, `roomd_store_wipes_total`, and
//!   `unknown_room` for the rooms it lost, never a room played on from nothing;
//! - every node's bus subscription killed (`CLIENT KILL TYPE pubsub`) is made again, and
//!   heard end to end, within 3 s;
//! - SIGTERM with Redis unreachable (SIGSTOPped: connections that answer nothing) ends
//!   the process within `ROOMD__CLUSTER__DRAIN_GRACE_S` + 5 s, every socket closed with
//!   1012.
//!
//! These fail, never skip, without `redis-server`.

mod support;

use futures_util::StreamExt;
use room_actor::RedisStore;
use std::time::{Duration, Instant};
use support::fault_play::{seat_players, wait_all_ack_after, Table};
use support::procs::{
    counter, guest, next_within, on_redis_cluster, prefix, send, start_tally, until_sees, OwnRedis, Proc, Settings,
};
use support::redis_cluster::OwnRedisCluster;
use tokio_tungstenite::tungstenite::Message;

/// These tests start many processes each: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the issue gives for a room to play again once its Redis is whole.
const BACK_WITHIN: Duration = Duration::from_secs(3);

const ACK_ONE: [(&str, &str); 2] = [("ROOMD__REDIS__ACK_REPLICAS", "1"), ("ROOMD__REDIS__ACK_TIMEOUT_MS", "1000")];

/// Starts the nodes `ids` with `start`, and waits until each sees them all.
async fn nodes(ids: &[&str], start: impl Fn(&str) -> Proc) -> (Vec<Proc>, reqwest::Client) {
    let nodes: Vec<Proc> = tokio::task::block_in_place(|| ids.iter().map(|id| start(id)).collect());
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    for node in &nodes {
        until_sees(&http, node, ids.len() as u64, Duration::from_secs(30)).await;
    }
    (nodes, http)
}

/// Every room acknowledges again and every player hears the other player's actions,
/// within [`BACK_WITHIN`] of `healed`.
async fn all_back(table: &Table, nodes: &[Proc], healed: Instant, what: &str) {
    let nodes: Vec<&Proc> = nodes.iter().collect();
    let left = BACK_WITHIN.saturating_sub(healed.elapsed());
    table.every_player_acked_again(&nodes, left, what).await;
    let left = BACK_WITHIN.saturating_sub(healed.elapsed());
    table.every_player_hears_another_after(&nodes, healed, left, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_cluster_master_killed_and_back_as_a_replica_under_ack_replicas_leaves_every_room_playing_on_every_node(
) {
    let _serial = SERIAL.lock().await;
    let mut cluster = tokio::task::block_in_place(OwnRedisCluster::start_durable);
    let (prefix, seeds) = (prefix("rm"), cluster.seeds());
    let (nodes, http) = nodes(&["ma", "mb", "mc"], |id| on_redis_cluster(id, &prefix, &seeds, &ACK_ONE)).await;
    let table = seat_players(&http, &nodes.iter().collect::<Vec<_>>(), 9).await;
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("every room plays");

    let slot = cluster.slot(&format!("{{room:{}}}", table.rooms[0]));
    let (master, replica) = cluster.shard_of(slot);
    let replica = replica.expect("the shard has a replica");
    let killed = Instant::now();
    cluster.kill(master.port);
    tokio::task::block_in_place(|| cluster.wait_master(replica.port, Duration::from_secs(30)));
    // The shard has no replica now: its rooms acknowledge nothing (ACK_REPLICAS=1) until
    // the old master is back, as the new master's replica, 5 s after it died.
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(killed.elapsed())).await;
    tokio::task::block_in_place(|| {
        cluster.up(master.port);
        cluster.wait_replica_linked(master.port, Duration::from_secs(30));
    });
    let healed = Instant::now();
    let store = RedisStore::connect_to(&cluster.target(), &prefix).await.expect("the test's Redis Cluster");
    all_back(&table, &nodes, healed, "the old master came back as a replica").await;
    table.finish(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_redis_cluster_restarted_from_its_aof_leaves_every_room_playing_on_every_node() {
    let _serial = SERIAL.lock().await;
    let mut cluster = tokio::task::block_in_place(OwnRedisCluster::start_durable);
    let (prefix, seeds) = (prefix("rr"), cluster.seeds());
    let (nodes, http) = nodes(&["ra", "rb", "rc"], |id| on_redis_cluster(id, &prefix, &seeds, &ACK_ONE)).await;
    let table = seat_players(&http, &nodes.iter().collect::<Vec<_>>(), 9).await;
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("every room plays");

    cluster.kill_all();
    tokio::time::sleep(Duration::from_secs(5)).await;
    tokio::task::block_in_place(|| {
        cluster.up_all();
        cluster.wait_state_ok(Duration::from_secs(60));
        // Under ACK_REPLICAS=1 nothing can be acknowledged before a replica holds it:
        // the cluster is whole when every replica has resynchronised with its master
        // (about 3 s after `cluster_state:ok` here, Redis's own time).
        cluster.wait_healthy(Duration::from_secs(60));
    });
    all_back(&table, &nodes, Instant::now(), "the Redis Cluster came back").await;
    let store = RedisStore::connect_to(&cluster.target(), &prefix).await.expect("the test's Redis Cluster");
    table.finish(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_redis_restarted_from_its_aof_leaves_every_room_playing_on_every_node() {
    let _serial = SERIAL.lock().await;
    let mut redis = tokio::task::block_in_place(OwnRedis::start);
    let (prefix, url) = (prefix("r1"), redis.url());
    let (nodes, http) = nodes(&["oa", "ob", "oc"], |id| Proc::start(id, &prefix, &url, &[])).await;
    let table = seat_players(&http, &nodes.iter().collect::<Vec<_>>(), 9).await;
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("every room plays");

    redis.kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    tokio::task::block_in_place(|| redis.up());
    all_back(&table, &nodes, Instant::now(), "Redis came back").await;
    let store = RedisStore::connect(&url, &prefix).await.expect("the test's Redis");
    table.finish(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_redis_restarted_empty_is_refused_loudly_and_no_room_plays_on_from_nothing() {
    let _serial = SERIAL.lock().await;
    let mut redis = tokio::task::block_in_place(OwnRedis::start);
    let (prefix, url) = (prefix("re"), redis.url());
    let (nodes, http) = nodes(&["ea", "eb"], |id| Proc::start(id, &prefix, &url, &[])).await;
    let (_, host) = guest(&http, &nodes[0].base, "host").await;
    let (_, other) = guest(&http, &nodes[1].base, "other").await;
    let (room, _) = start_tally(&http, &nodes[0], &host, &[(&nodes[1], other.as_str())], serde_json::json!(1000)).await;
    let mut ws = support::procs::connect(&nodes[1], &other).await;
    send(&mut ws, serde_json::json!({"t": "act", "room": room, "cs": 1, "a": {"type": "bump"}})).await;
    next_within(&mut ws, Duration::from_secs(10), |v| v["t"] == "ack").await.expect("the room plays");

    redis.kill();
    redis.wipe();
    tokio::task::block_in_place(|| redis.up());
    // Every node says so, in its log and its metrics.
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &nodes {
        while counter(&http, node, "roomd_store_wipes_total").await < 1.0 {
            assert!(Instant::now() < deadline, "{} never noticed: {}", node.id, node.log_tail(30));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(node.log_tail(200).contains("Redis came back without its data"), "{}", node.log_tail(30));
    }
    // The room is gone, and said to be (`unknown_room`, as the reject of the action):
    // never acknowledged again as if its log were new.
    let mut cs = 2;
    let gone = loop {
        send(&mut ws, serde_json::json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        let answer = next_within(&mut ws, Duration::from_secs(2), |v| v["cs"] == cs).await;
        match answer {
            Some(v) if v["t"] == "ack" => panic!("a room whose log is gone acknowledged an action: {v}"),
            Some(v) if v["code"] == "unknown_room" => break v,
            other if Instant::now() > deadline + Duration::from_secs(10) => {
                panic!(
                    "never told the room is gone: {other:?}; the nodes said:\n{}{}",
                    nodes[0].log_tail(20),
                    nodes[1].log_tail(20)
                )
            }
            _ => cs += 1,
        }
    };
    assert_eq!(gone["room"], room.as_str(), "{gone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_nodes_bus_subscription_killed_is_made_again_and_heard_within_3_s() {
    let _serial = SERIAL.lock().await;
    let redis = tokio::task::block_in_place(OwnRedis::start);
    let (prefix, url) = (prefix("rk"), redis.url());
    // Without peer links every frame between nodes goes through the bus.
    let start = |id: &str| {
        let settings = Settings::cluster(id, &prefix, &url)
            .short_lease()
            .set("ROOMD__CLUSTER__PEER_LISTEN", "off")
            .set("ROOMD__WS__RATE_PER_S", "1000")
            .set("ROOMD__WS__BURST", "1000");
        Proc::spawn(id, settings)
    };
    let (nodes, http) = nodes(&["ka", "kb", "kc"], start).await;
    let table = seat_players(&http, &nodes.iter().collect::<Vec<_>>(), 6).await;
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("every room plays");

    let killed = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "CLIENT", "KILL", "TYPE", "pubsub"])
        .output()
        .expect("redis-cli");
    let n: u32 = String::from_utf8_lossy(&killed.stdout).trim().parse().unwrap_or(0);
    assert!(n >= 3, "CLIENT KILL found {n} subscriptions, not every node's");
    all_back(&table, &nodes, Instant::now(), "every bus subscription was killed").await;
    let store = RedisStore::connect(&url, &prefix).await.expect("the test's Redis");
    table.finish(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_with_redis_unreachable_exits_within_the_drain_grace_and_closes_every_socket_with_1012() {
    let _serial = SERIAL.lock().await;
    let redis = tokio::task::block_in_place(OwnRedis::start);
    let (prefix, url) = (prefix("rt"), redis.url());
    const GRACE_S: u64 = 4;
    let grace = GRACE_S.to_string();
    let env = [("ROOMD__CLUSTER__DRAIN_GRACE_S", grace.as_str())];
    let (mut nodes, http) = nodes(&["ta", "tb"], |id| Proc::start(id, &prefix, &url, &env)).await;
    // Sockets on the node to stop: players of rooms held there and held on the other.
    let mut sockets = Vec::new();
    for i in 0..6 {
        let (_, host) = guest(&http, &nodes[i % 2].base, &format!("h{i}")).await;
        let (_, guest_token) = guest(&http, &nodes[0].base, &format!("g{i}")).await;
        let (room, _) =
            start_tally(&http, &nodes[i % 2], &host, &[(&nodes[0], guest_token.as_str())], serde_json::json!(1000))
                .await;
        let mut ws = support::procs::connect(&nodes[0], &guest_token).await;
        send(&mut ws, serde_json::json!({"t": "act", "room": room, "cs": 1, "a": {"type": "bump"}})).await;
        next_within(&mut ws, Duration::from_secs(10), |v| v["t"] == "ack").await.expect("the room plays");
        sockets.push(ws);
    }

    redis.signal("STOP");
    let termed = Instant::now();
    nodes[0].signal("TERM");
    let bound = Duration::from_secs(GRACE_S + 5);
    let exited = tokio::task::block_in_place(|| nodes[0].wait_exit(bound + Duration::from_secs(10)));
    let took = termed.elapsed();
    redis.signal("CONT");
    assert!(
        exited && took <= bound,
        "SIGTERM took {took:?} (bound {bound:?}); the node said:\n{}",
        nodes[0].log_tail(30)
    );
    for (i, ws) in sockets.iter_mut().enumerate() {
        let mut code = None;
        while let Ok(Some(frame)) = tokio::time::timeout(Duration::from_secs(1), ws.next()).await {
            match frame {
                Ok(Message::Close(frame)) => {
                    code = frame.map(|f| u16::from(f.code));
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        assert_eq!(code, Some(1012), "socket {i} was not closed with 1012");
    }
}
