#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! roomd on a real Redis Cluster (issue #16): six `redis-server` processes of the test's
//! own (3 masters, 3 replicas, `support/redis_cluster.rs`) and several `roomd` nodes with
//! `ROOMD__REDIS__CLUSTER_URLS`, players split over the nodes, continuous play.
//!
//! - play across nodes over sharded pub/sub (no `PUBLISH` at all), the lobby across
//!   slots, and a SIGKILLed roomd node's rooms resumed by the other (failure detection
//!   over `PUBSUB SHARDNUMSUB`);
//! - a Redis master SIGKILLed mid-game with `ROOMD__REDIS__ACK_REPLICAS=1`, its replica
//!   stopped first so that the master holds writes the replica does not: the room
//!   acknowledges nothing meanwhile, the replica is promoted, and no acknowledged action
//!   is lost or applied twice;
//! - with `ACK_REPLICAS`, a connection whose `WAIT`s keep counting too few replicas is
//!   replaced, and reads are confirmed again once the replica is back;
//! - a busy room's slot, and a node's bus channel slot, moved to another master
//!   mid-game: play goes on;
//! - the master of a node's bus channel hung (SIGSTOP: open connections that answer
//!   nothing) and failed over to its replica: the node hears its channel again; and the
//!   cluster connections made before the promotion (one replaced during the hang, one
//!   idle) replace themselves once it happened, without a request timing out first;
//! - a TLS-only Redis Cluster (`rediss://` seeds, TLS cluster bus and replication), its
//!   CA given with `SSL_CERT_FILE`;
//! - a batch of appends goes to each master in one round trip, checked first, then on
//!   the fast path (bare `XADD`s and one canary `INCR` per master);
//! - both `ROOMD__REDIS__URL` and `ROOMD__REDIS__CLUSTER_URLS` set: a clear start-up error.
//!
//! These fail, never skip, without `redis-server`.

mod support;

use room_actor::RedisStore;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::fault_play::{seat_players, wait_all_ack_after};
use support::procs::{get_json, guest, on_redis_cluster, prefix, until_sees, Proc, Settings};
use support::redis_cluster::{OwnRedisCluster, Tls};

/// These tests start many processes each: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Two nodes on the Redis Cluster `seeds`, once they see each other, and an HTTP client.
async fn two_nodes(ids: [&str; 2], prefix: &str, seeds: &str, env: &[(&str, &str)]) -> ([Proc; 2], reqwest::Client) {
    let nodes = tokio::task::block_in_place(|| ids.map(|id| on_redis_cluster(id, prefix, seeds, env)));
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    for node in &nodes {
        until_sees(&http, node, 2, Duration::from_secs(30)).await;
    }
    (nodes, http)
}

async fn cluster_store(cluster: &OwnRedisCluster, prefix: &str) -> RedisStore {
    RedisStore::connect_to(&cluster.target(), prefix).await.expect("the test's Redis Cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_play_across_each_other_over_sharded_pub_sub_and_survive_a_node_killed() {
    let _serial = SERIAL.lock().await;
    let cluster = tokio::task::block_in_place(OwnRedisCluster::start);
    let prefix = prefix("rc");
    let seeds = cluster.seeds();
    let (mut nodes, http) = two_nodes(["ka", "kb"], &prefix, &seeds, &[]).await;
    let table = seat_players(&http, &[&nodes[0], &nodes[1]], 6).await;
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("every room plays");

    // The lobby reads rooms spread over many slots.
    let (_, lister) = guest(&http, &nodes[0].base, "lister").await;
    let listed: Value = get_json(&http, format!("{}/api/rooms?game=tally&limit=200", nodes[1].base), &lister).await;
    let ids: Vec<&str> = listed.as_array().unwrap().iter().filter_map(|r| r["roomId"].as_str()).collect();
    for room in &table.rooms {
        assert!(ids.contains(&room.as_str()), "{room} is not in the lobby: {listed}");
    }
    // Frames between nodes went over sharded pub/sub only.
    assert!(cluster.calls("spublish") > 0, "no SPUBLISH on any master");
    assert_eq!(cluster.calls("publish"), 0, "a PUBLISH is broadcast to every shard");

    // A node dies: its rooms are found (SHARDNUMSUB) and resumed by the other node.
    let killed = Instant::now();
    nodes[1].kill();
    let after = wait_all_ack_after(&table.seen, killed, Duration::from_secs(45)).await;
    assert!(after.is_ok(), "rooms silent after kb was killed: {after:?}");
    let store = cluster_store(&cluster, &prefix).await;
    let acked = table.finish(&store).await;
    assert!(acked > 12, "only {acked} actions acknowledged");
}

/// Issue 60: appends on a Redis Cluster are group-committed per master. One batch of
/// many rooms' first appends (each checked by the script, several on one master at once)
/// goes to each master in one round trip; the next batch goes on the fast path, bare
/// `XADD`s vouched for by one canary `INCR` per master, no script; every log reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_of_appends_goes_to_each_master_at_once_and_the_next_one_takes_the_fast_path() {
    use room_actor::log::{LogEntry, StartEntry};
    use room_actor::redis::keys::game_pk;
    use room_actor::RoomStore;
    let _serial = SERIAL.lock().await;
    let cluster = tokio::task::block_in_place(OwnRedisCluster::start);
    let prefix = prefix("ab");
    let store = cluster_store(&cluster, &prefix).await;
    let mut conn = store.connection();
    let token = "node-a/3".to_owned();
    let games: Vec<String> = (0..24).map(|i| game_pk(&format!("r_ab{i}"), "01")).collect();
    for (i, pk) in games.iter().enumerate() {
        let room = format!("r_ab{i}");
        store
            .begin(StartEntry {
                game_pk: pk.clone(),
                room_id: room.clone(),
                game: "tally".into(),
                seed: engine::Seed(7),
                players: vec!["a".into()],
                bots: vec![],
                names: vec!["a".into()],
                options_json: r#"{"target":10}"#.into(),
                state_version: 1,
                started_at: 1_000,
                rtt: Default::default(),
            })
            .await
            .unwrap();
        let _: () = redis::cmd("SET").arg(store.keys().lease(&room)).arg(&token).query_async(&mut conn).await.unwrap();
    }
    let entry = |seq: u64| LogEntry {
        seq,
        at: 1_000 + seq as i64,
        actor: engine::Actor::Player("a".into()),
        cs: Some(seq),
        rtt_ms: None,
        auto: false,
        input_json: r#"{"client":{"type":"bump"}}"#.into(),
        rtt: None,
    };
    // On a runtime of one thread (as a node's rooms are), every append of a round is
    // queued before the queue's task runs: one batch.
    let calls = |name: &str| cluster.calls(name);
    let (batches, fast) = (store.append_batches().0, store.fast_appends());
    let one_thread = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let round = |seq: u64| {
        let appends = || games.iter().map(|pk| store.append_fenced(pk.clone(), entry(seq), token.clone()));
        let outcomes = tokio::task::block_in_place(|| {
            one_thread.block_on(async { futures_util::future::join_all(appends()).await })
        });
        for outcome in outcomes {
            outcome.unwrap_or_else(|e| panic!("append {seq}: {e}"));
        }
    };
    round(1);
    assert_eq!(store.append_batches().0 - batches, 1, "the first appends in one batch");
    assert_eq!(store.fast_appends(), fast, "a room's first append under its lease is checked");
    let (xadd, incr, eval) = (calls("xadd"), calls("incr"), calls("eval"));
    round(2);
    tokio::task::block_in_place(move || drop(one_thread));
    assert_eq!(store.append_batches().0 - batches, 2, "the next appends in one batch");
    assert_eq!(store.fast_appends() - fast, 24, "every next append on the fast path");
    assert_eq!(calls("xadd") - xadd, 24, "one XADD per append");
    assert_eq!(calls("incr") - incr, 3, "one canary INCR per master");
    assert_eq!(calls("eval"), eval, "no script on the fast path");
    for pk in &games {
        let stored = store.load(pk).await.unwrap().expect("the game is stored");
        assert_eq!(stored.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2], "{pk}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_master_killed_mid_game_with_ack_replicas_loses_no_acknowledged_action() {
    let _serial = SERIAL.lock().await;
    let mut cluster = tokio::task::block_in_place(OwnRedisCluster::start);
    let prefix = prefix("rk");
    let seeds = cluster.seeds();
    let acks = [("ROOMD__REDIS__ACK_REPLICAS", "1"), ("ROOMD__REDIS__ACK_TIMEOUT_MS", "300")];
    let (nodes, http) = two_nodes(["ma", "mb"], &prefix, &seeds, &acks).await;
    let table = seat_players(&http, &[&nodes[0], &nodes[1]], 4).await;
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("every room plays");

    // Room 0's shard: its replica stops taking the master's writes, then the master dies
    // while it holds writes the replica never got. (With `ACK_REPLICAS=0` this loses
    // acknowledged actions: the replica is promoted without them.)
    let slot = cluster.slot(&format!("{{room:{}}}", table.rooms[0]));
    let (master, replica) = cluster.shard_of(slot);
    let replica = replica.expect("the shard has a replica");
    cluster.signal(replica.port, "STOP");
    // Cut the replication link too (a stopped replica would still find the master's
    // stream in its socket buffer when it wakes up).
    cluster.cli(master.port, &["CLIENT", "KILL", "TYPE", "replica"]).expect("CLIENT KILL");
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let unreplicated = table.acks_of(0, stopped + Duration::from_millis(1000), Instant::now());
    cluster.kill(master.port);
    cluster.signal(replica.port, "CONT");
    tokio::task::block_in_place(|| cluster.wait_master(replica.port, Duration::from_secs(30)));
    // The old master comes back as the new one's replica: the shard can acknowledge again.
    tokio::task::block_in_place(|| {
        cluster.up(master.port);
        cluster.wait_healthy(Duration::from_secs(30));
    });
    let healed = Instant::now();
    let after = wait_all_ack_after(&table.seen, healed, Duration::from_secs(45)).await;
    assert!(after.is_ok(), "rooms silent after the shard healed: {after:?}");
    let store = cluster_store(&cluster, &prefix).await;
    table.finish(&store).await;
    assert_eq!(unreplicated, 0, "room 0 acknowledged actions its shard's replica did not hold");
}

/// Issue 56: with `ACK_REPLICAS`, a connection whose `WAIT`s keep counting too few
/// replicas is replaced (it may be routed to a server that is no longer the slot's
/// master, after a full restart); the reads it confirms are refused meanwhile and
/// confirmed again once the replica is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_connection_whose_waits_keep_counting_too_few_replicas_is_replaced() {
    use room_actor::RoomStore;
    let _serial = SERIAL.lock().await;
    let cluster = tokio::task::block_in_place(OwnRedisCluster::start);
    let target = cluster.target();
    let store = RedisStore::connect_to(&target, &prefix("ra"))
        .await
        .expect("the test's Redis Cluster")
        .with_acks(&target, 1, 200)
        .await
        .expect("ack connections");
    let pk = room_actor::redis::keys::game_pk("r_acks", "ab");
    let read = store.entry(&pk, 1).await;
    assert!(matches!(read, Ok(None)), "confirmed by the replica: {read:?}");
    assert_eq!(store.ack_connection_replacements(), 0);

    // The room's replica stops taking the master's writes: every WAIT counts 0.
    let (master, replica) = cluster.shard_of(cluster.slot("{room:r_acks}"));
    let replica = replica.expect("the shard has a replica");
    cluster.signal(replica.port, "STOP");
    cluster.cli(master.port, &["CLIENT", "KILL", "TYPE", "replica"]).expect("CLIENT KILL");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut refused = 0;
    while store.ack_connection_replacements() == 0 {
        assert!(Instant::now() < deadline, "never replaced after {refused} short WAITs");
        let read = store.entry(&pk, 1).await;
        let Err(e) = read else { panic!("confirmed without a replica: {read:?}") };
        assert!(e.to_string().contains("0 of the 1 replicas"), "{e}");
        refused += 1;
    }
    assert!(refused >= 3, "replaced after {refused} short WAITs, before 3 in a row");

    // The replica comes back: reads are confirmed again, on the new connection.
    cluster.signal(replica.port, "CONT");
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.entry(&pk, 1).await.is_err() {
        assert!(Instant::now() < deadline, "reads never confirmed again after the replica came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_rooms_slot_and_a_nodes_bus_channel_moved_to_another_master_play_on() {
    let _serial = SERIAL.lock().await;
    let cluster = tokio::task::block_in_place(OwnRedisCluster::start);
    let prefix = prefix("rm");
    let seeds = cluster.seeds();
    let (nodes, http) = two_nodes(["sa", "sb"], &prefix, &seeds, &[]).await;
    let table = seat_players(&http, &[&nodes[0], &nodes[1]], 4).await;
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("every room plays");

    for key in [format!("{{room:{}}}", table.rooms[0]), format!("{prefix}:bus:sa")] {
        let slot = cluster.slot(&key);
        let (from, _) = cluster.shard_of(slot);
        let to = cluster.nodes().into_iter().find(|n| n.master && !n.failed && n.port != from.port).unwrap();
        tokio::task::block_in_place(|| cluster.move_slot(slot, to.port));
        assert_eq!(cluster.shard_of(slot).0.port, to.port, "slot {slot} of {key} moved");
        table
            .every_player_acked_again(
                &[&nodes[0], &nodes[1]],
                Duration::from_secs(30),
                &format!("the slot of {key} moved"),
            )
            .await;
    }
    let store = cluster_store(&cluster, &prefix).await;
    table.finish(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_redis_master_is_failed_over_and_its_rooms_and_the_bus_channel_it_served_play_on() {
    let _serial = SERIAL.lock().await;
    let cluster = tokio::task::block_in_place(OwnRedisCluster::start);
    let prefix = prefix("rh");
    let seeds = cluster.seeds();
    // Frames between the nodes through sharded pub/sub (no peer links), so ha's bus
    // channel carries every frame it hears from rooms owned by hb.
    let (nodes, http) = two_nodes(["ha", "hb"], &prefix, &seeds, &[("ROOMD__CLUSTER__PEER_LISTEN", "off")]).await;
    let table = seat_players(&http, &[&nodes[0], &nodes[1]], 6).await;
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("every room plays");

    // The master of ha's bus channel hangs (SIGSTOP: a stuck process, a paused VM). Its
    // connections stay open and answer nothing, so no client sees an error; the cluster
    // promotes its replica. ha must then hear the frames sent to it through the new
    // master, and every room on that shard must append there.
    let slot = cluster.slot(&format!("{prefix}:bus:ha"));
    let (master, replica) = cluster.shard_of(slot);
    let replica = replica.expect("the shard has a replica");
    cluster.signal(master.port, "STOP");
    tokio::task::block_in_place(|| cluster.wait_master(replica.port, Duration::from_secs(30)));
    table
        .every_player_acked_again(
            &[&nodes[0], &nodes[1]],
            Duration::from_secs(30),
            "the bus channel's master hung and was failed over",
        )
        .await;

    // The old master wakes up as the new one's replica; play goes on and every log
    // agrees with what was acknowledged.
    cluster.signal(master.port, "CONT");
    tokio::task::block_in_place(|| cluster.wait_healthy(Duration::from_secs(30)));
    table.every_player_acked_again(&[&nodes[0], &nodes[1]], Duration::from_secs(30), "the old master came back").await;
    let store = cluster_store(&cluster, &prefix).await;
    table.finish(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_connections_made_before_a_hung_masters_replica_is_promoted_replace_themselves_once_it_is() {
    let _serial = SERIAL.lock().await;
    let cluster = tokio::task::block_in_place(OwnRedisCluster::start);
    let key = format!("{}:{{watched}}", prefix("rw"));
    let (master, replica) = cluster.shard_of(cluster.slot(&key));
    let replica = replica.expect("the shard has a replica");
    // The test promotes the replica itself, when the connection has been replaced once.
    assert!(cluster.cli(replica.port, &["CONFIG", "SET", "cluster-replica-no-failover", "yes"]).is_some());
    let conn = cluster.target().connect().await.expect("connects to the Redis Cluster");
    let room_actor::redis::conn::RedisConn::Cluster(watched) = conn.clone() else { panic!("a cluster connection") };
    // Another connection of the same process to the same cluster, idle throughout.
    let idle = cluster.target().connect().await.expect("connects to the Redis Cluster");
    let room_actor::redis::conn::RedisConn::Cluster(idle_one) = idle.clone() else { panic!("a cluster connection") };
    let set: String = redis::cmd("SET").arg(&key).arg("before").query_async(&mut conn.clone()).await.unwrap();
    assert_eq!(set, "OK");

    // The key's master hangs: a request times out, and the connection is replaced while
    // the hung master still holds the key's slot, so the new connection's map names it.
    cluster.signal(master.port, "STOP");
    let timed_out = redis::cmd("GET").arg(&key).query_async::<Option<String>>(&mut conn.clone()).await;
    assert!(timed_out.as_ref().is_err_and(|e| e.is_timeout()), "{timed_out:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while watched.replacements() < 1 {
        assert!(Instant::now() < deadline, "the connection was not replaced after the timeout");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The replica takes the slots over. No request is made: the connection must notice
    // the new map by itself and replace itself again, so that the first request after
    // the promotion reaches the new master instead of timing out on the hung one. The
    // idle connection, which never saw an error, is replaced with it.
    let replaced = watched.replacements();
    assert_eq!(idle_one.replacements(), 0);
    assert!(cluster.cli(replica.port, &["CLUSTER", "FAILOVER", "TAKEOVER"]).is_some());
    tokio::task::block_in_place(|| cluster.wait_master(replica.port, Duration::from_secs(30)));
    let deadline = Instant::now() + Duration::from_secs(20);
    while watched.replacements() == replaced || idle_one.replacements() == 0 {
        assert!(
            Instant::now() < deadline,
            "the connections never noticed the promotion by themselves: replaced {} and {} times",
            watched.replacements(),
            idle_one.replacements()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for conn in [&conn, &idle] {
        let got: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut conn.clone()).await.unwrap();
        assert_eq!(got.as_deref(), Some("before"));
    }

    cluster.signal(master.port, "CONT");
    tokio::task::block_in_place(|| cluster.wait_healthy(Duration::from_secs(30)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_play_through_a_tls_only_redis_cluster_whose_ca_is_in_ssl_cert_file_and_refuse_another() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = support::procs::tls_files(dir.path(), "roomd-cluster-ca");
    let cluster = tokio::task::block_in_place(|| OwnRedisCluster::start_tls(Tls { ca: ca.clone(), cert, key }));
    let seeds = cluster.seeds();
    assert!(seeds.starts_with("rediss://"), "{seeds}");
    let prefix = prefix("rt");
    // Another CA: the node refuses to start rather than talk to an unverified cluster.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (other_ca, _, _) = support::procs::tls_files(&other, "another-ca");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_roomd"));
    Settings::cluster("tx", &prefix, "")
        .unset("ROOMD__REDIS__URL")
        .set("ROOMD__REDIS__CLUSTER_URLS", &seeds)
        .set("SSL_CERT_FILE", &other_ca)
        .apply(&mut cmd);
    let out = tokio::task::block_in_place(|| cmd.output().unwrap());
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "a node trusting another CA started: {printed}");
    assert!(printed.contains("cannot reach Redis at ROOMD__REDIS__CLUSTER_URLS"), "{printed}");
    let ca = ca.to_str().unwrap().to_owned();
    let env = [("SSL_CERT_FILE", ca.as_str())];
    let (nodes, http) = two_nodes(["ta", "tb"], &prefix, &seeds, &env).await;
    let table = seat_players(&http, &[&nodes[0], &nodes[1]], 3).await;
    let started = Instant::now();
    wait_all_ack_after(&table.seen, started, Duration::from_secs(30)).await.expect("every room plays over TLS");
    wait_all_ack_after(&table.seen, Instant::now(), Duration::from_secs(30)).await.expect("and goes on");
    table.stop.store(true, Ordering::Relaxed);
    for task in table.tasks {
        let _ = task.await;
    }
    let seen = table.seen.lock().unwrap();
    assert!(seen.violations.is_empty(), "violations: {:?}", seen.violations);
    assert!(seen.acked >= 6, "{} acknowledged", seen.acked);
    assert!(cluster.calls("spublish") > 0, "the bus crossed the TLS cluster");
}

#[test]
fn a_node_given_both_one_redis_and_a_redis_cluster_refuses_to_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_roomd"))
        .env("ROOMD__REDIS__URL", "redis://127.0.0.1:1/")
        .env("ROOMD__REDIS__CLUSTER_URLS", "redis://127.0.0.1:2/")
        .env("ROOMD__AUTH__SECRET", support::procs::SECRET)
        .env("ROOMD__HTTP__PORT", "0")
        .output()
        .expect("roomd runs");
    assert!(!out.status.success(), "roomd started with both settings");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ROOMD__REDIS__URL and ROOMD__REDIS__CLUSTER_URLS are both set"),
        "unclear start-up error: {stderr}"
    );
}
