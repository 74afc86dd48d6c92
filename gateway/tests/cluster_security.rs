#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The cluster findings of the second outside probe (issue 55), with real `roomd` nodes
//! and the test Redis (`REDIS_URL`, started by ./scripts/test), all on 127.0.0.1: a bad
//! frame published on a node's bus channel (finding 2), a relay on a peer link that
//! changes what passes it (finding 3), and idle connections to the peer port (finding
//! 7). Each test uses its own key prefix.

mod support;

use room_actor::redis::target::RedisTarget;
use room_actor::{RedisStore, RoomStore};
use serde_json::json;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::fault_play::{check_logs, Seen};
use support::procs::{
    bus_publish_verb, connect, counter, next_within, on_test_redis, redis_cli_target, resend_until_acked, room_on,
    send, tally_room, token, until_all_see, Proc, Ws,
};
use support::tcp_proxy::Proxy;

/// These tests start several processes each: one at a time, so a loaded machine does not
/// turn timing into flakiness.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn prefix() -> String {
    support::procs::prefix("sec")
}

/// Waits until `holds` (checked every 100 ms), for at most 20 s.
async fn until<F: std::future::Future<Output = bool>>(holds: impl Fn() -> F, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !holds().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes `payload` (any bytes) on `channel` of the tests' Redis: how many heard it.
fn publish(channel: &str, payload: &[u8]) -> String {
    let mut cli = Command::new("redis-cli")
        .args(redis_cli_target())
        .args(["-x", bus_publish_verb(), channel])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli is installed with redis-server");
    cli.stdin.take().unwrap().write_all(payload).unwrap();
    let out = cli.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Subscribes `ws` to `room`, asking again until its `sync` comes (a first `sub` may be
/// lost with a link that broke, as any frame on it).
async fn subscribe(ws: &mut Ws, room: &str) {
    for _ in 0..10 {
        send(ws, json!({"t": "sub", "room": room})).await;
        if next_within(ws, Duration::from_secs(3), |v| v["t"] == "sync" && v["room"] == room).await.is_some() {
            return;
        }
    }
    panic!("no sync for {room}");
}

/// `bumps` acknowledged bumps of `room` from `ws` from `cs` on, each resent until its ack
/// comes, as a client does; each ack recorded for `user` in `seen`.
async fn bump(ws: &mut Ws, room: &str, user: &str, cs: u64, bumps: u64, seen: &Arc<Mutex<Seen>>) {
    for cs in cs..cs + bumps {
        let ack = resend_until_acked(ws, room, cs, Duration::from_secs(2), Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("no ack for cs {cs} in 30 s"));
        seen.lock().unwrap().ack(0, user, cs, ack["seq"].as_u64().unwrap());
    }
}

/// Finding 2: 19 bytes published on a node's bus channel (frame version 4, a timestamp,
/// then a bincode length prefix of 2^64 − 1) panicked its bus subscription with "capacity
/// overflow"; the subscription never came back, and the node, still ready, answered none
/// of its players' actions across nodes. Now the frame is dropped and counted, and the
/// node serves on. (The 19 bytes put the prefix where a frame's batch length is; the
/// 20-byte frame beside them puts it where its first envelope's room id's length is, the
/// allocation bincode panicked on.)
#[tokio::test]
async fn a_bad_bus_frame_is_dropped_and_counted_and_the_node_serves_on() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    // Peer links off: every frame between the nodes, either way, goes through their bus
    // channels, so the node's answers to its own players come through its subscription.
    let plain =
        |id: &str| Proc::spawn(id, on_test_redis(id, &prefix).short_lease().set("ROOMD__CLUSTER__PEER_LISTEN", "off"));
    let nodes = [plain("ba"), plain("bb")];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    let header = [&[room_actor::cluster::bus::FRAME_VERSION][..], &micros.to_le_bytes()].concat();
    let huge = [0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    let nineteen = [&header[..], &huge, &[0x00]].concat();
    assert_eq!(nineteen.len(), 19);
    let in_a_room_id = [&header[..], &[0x01, 0x00], &huge].concat();
    let bad = r#"roomd_bad_frames_total{source="bus"}"#;
    for frame in [&nineteen, &in_a_room_id] {
        assert_eq!(publish(&format!("{prefix}:bus:ba"), frame), "1", "ba's subscription heard it");
    }
    // ba still serves across nodes both ways: its player's actions in a room bb owns (the
    // acks come back on ba's subscription), and bb's player's in a room ba owns.
    let (alice_id, alice) = token(&http, &nodes[0], "alice").await;
    let (bob_id, bob) = token(&http, &nodes[1], "bob").await;
    let seen = || Arc::new(Mutex::new(Seen { ack_times: vec![Vec::new()], ..Seen::default() }));
    let on_bb = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "bb", json!(null), 40).await;
    let mut a = connect(&nodes[0], &alice).await;
    subscribe(&mut a, &on_bb).await;
    bump(&mut a, &on_bb, &alice_id, 1, 3, &seen()).await;
    let on_ba = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "ba", json!(null), 40).await;
    let mut b = connect(&nodes[1], &bob).await;
    subscribe(&mut b, &on_ba).await;
    bump(&mut b, &on_ba, &bob_id, 1, 3, &seen()).await;
    // (The subscription hands frames on in order: the bad ones were taken first.)
    until(|| async { counter(&http, &nodes[0], bad).await == 2.0 }, "ba counts both bad frames").await;
    let ready = http.get(format!("{}/readyz", nodes[0].base)).send().await.unwrap();
    assert_eq!(ready.status(), 200, "ba is ready, and serving");
    assert_eq!(counter(&http, &nodes[0], bad).await, 2.0);
    assert_eq!(counter(&http, &nodes[1], bad).await, 0.0);
    assert!(counter(&http, &nodes[0], "roomd_bus_dropped_total").await >= 2.0);
}

/// Finding 3: node B advertised (`PEER_ADVERTISE`) a relay in front of its peer port, and
/// the relay swapped a player's user id for another's (the same length) in the frames A
/// sent B after the handshake: B applied and acknowledged her actions as the other
/// player. Now every frame carries a tag under the link's session key: the changed frame
/// fails its check, B ends the link and counts it, and A's frames go through Redis until
/// a new link is up, while every acknowledged action is in the log as its own player's.
#[tokio::test]
async fn a_user_id_swapped_on_a_peer_link_is_caught_and_no_action_is_applied_as_another_player() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let la = Proc::spawn("la", on_test_redis("la", &prefix).short_lease());
    let http = reqwest::Client::new();
    let (alice_id, alice) = token(&http, &la, "alice").await;
    let (bob_id, bob) = token(&http, &la, "bob").await;
    assert_eq!(alice_id.len(), bob_id.len(), "ids of one length: {alice_id} {bob_id}");
    // lb's real peer port, and the relay it advertises in front of it.
    let port = support::procs::free_port();
    let relay = Proxy::rewriting(format!("127.0.0.1:{port}"), alice_id.as_bytes(), bob_id.as_bytes()).await;
    let lb = Proc::spawn(
        "lb",
        on_test_redis("lb", &prefix)
            .short_lease()
            .set("ROOMD__CLUSTER__PEER_LISTEN", format!("127.0.0.1:{port}"))
            .set("ROOMD__CLUSTER__PEER_ADVERTISE", &relay.addr),
    );
    until_all_see(&[&la, &lb], 2).await;
    for n in [&la, &lb] {
        until(|| async { counter(&http, n, "roomd_bus_peer_addresses").await == 1.0 }, "peer address known").await;
    }
    // A room lb owns, played by alice on la: her actions cross la's link to lb, through
    // the relay.
    let (room, pk) = loop {
        let (room, pk, owner) = tally_room(&http, &la.base, &alice, &[&bob]).await;
        if owner == "lb" {
            break (room, pk);
        }
    };
    let mut a = connect(&la, &alice).await;
    subscribe(&mut a, &room).await;
    let seen = Arc::new(Mutex::new(Seen { ack_times: vec![Vec::new()], ..Seen::default() }));
    bump(&mut a, &room, &alice_id, 1, 2, &seen).await;
    let by_link = r#"roomd_bus_frames_sent_total{path="link"}"#;
    let by_redis = r#"roomd_bus_frames_sent_total{path="redis"}"#;
    assert!(counter(&http, &la, by_link).await >= 2.0, "la's frames to lb went on its link");
    let redis_before = counter(&http, &la, by_redis).await;
    // From now on the relay swaps alice's id for bob's in what la's link sends lb.
    assert!(relay.tamper() >= 1, "la's link to lb goes through the relay");
    bump(&mut a, &room, &alice_id, 3, 4, &seen).await;
    assert!(relay.rewritten.load(std::sync::atomic::Ordering::Relaxed) >= 1, "the relay changed a frame");
    // Nothing alice was acknowledged was applied as anyone but her.
    let target = match support::procs::test_redis_cluster() {
        Some(seeds) => RedisTarget::Cluster(seeds.split(',').map(str::to_owned).collect()),
        None => RedisTarget::Single(support::procs::redis_url()),
    };
    let store = RedisStore::connect_to(&target, &prefix).await.unwrap();
    let problems = check_logs(&store, std::slice::from_ref(&pk), &seen).await;
    assert!(problems.is_empty(), "acknowledged actions not in the log as their player's: {problems:#?}");
    let stored = store.load(&pk).await.unwrap().unwrap();
    let by_bob = stored.entries.iter().filter(|e| matches!(&e.actor, engine::Actor::Player(u) if u.as_str() == bob_id));
    assert_eq!(by_bob.count(), 0, "bob never acted");
    // lb caught the changed frame and ended the link; la's frames went through Redis.
    assert!(counter(&http, &lb, r#"roomd_bad_frames_total{source="link"}"#).await >= 1.0, "lb counted it");
    assert!(counter(&http, &la, by_redis).await > redis_before, "la sent through Redis once the link was dropped");
    let log = lb.log.lock().unwrap().clone();
    assert!(log.contains("failed its check"), "lb said why it closed the link:\n{}", lb.log_tail(20));
}

/// Finding 7 (the peer port): 6,000 idle connections to a node's peer port took its file
/// descriptors from 25 to 3,429 and wrote a line per refusal. Now at most 64 are held in
/// their handshake (each at most 2 s), the rest are closed at once, and the refusals are
/// logged once per 10 s with their count; a real peer's link still comes up afterwards.
#[tokio::test]
async fn idle_connections_to_the_peer_port_hold_few_sockets_and_few_log_lines() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let port = support::procs::free_port();
    let pa = Proc::spawn(
        "pa",
        on_test_redis("pa", &prefix).short_lease().set("ROOMD__CLUSTER__PEER_LISTEN", format!("127.0.0.1:{port}")),
    );
    let http = reqwest::Client::new();
    until(|| async { http.get(format!("{}/readyz", pa.base)).send().await.is_ok() }, "pa answers").await;
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", pa.pid().unwrap())).unwrap().count();
    let before = fds();
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = fds();
    assert!(
        during <= before + room_actor::cluster::link::MAX_HANDSHAKES + 16,
        "300 idle connections hold {} fds (from {before})",
        during - before.min(during)
    );
    // Held no longer than the handshake timeout.
    tokio::time::sleep(room_actor::cluster::link::HANDSHAKE_TIMEOUT + Duration::from_secs(1)).await;
    let after = fds();
    assert!(after <= before + 16, "{after} fds after the handshakes timed out (from {before})");
    assert_eq!(counter(&http, &pa, "roomd_bus_links_refused_total").await, 300.0, "every one refused and counted");
    let lines = pa.log.lock().unwrap().lines().filter(|l| l.contains("peer link refused")).count();
    assert!((1..=2).contains(&lines), "{lines} log lines for 300 refusals:\n{}", pa.log_tail(10));
    drop(idle);
    // A real peer dials pa now and its frames go on the link.
    let pb = Proc::spawn("pb", on_test_redis("pb", &prefix).short_lease());
    until_all_see(&[&pa, &pb], 2).await;
    until(|| async { counter(&http, &pb, "roomd_bus_peer_addresses").await == 1.0 }, "pb knows pa's address").await;
    let (_, alice) = token(&http, &pa, "alice").await;
    let (bob_id, bob) = token(&http, &pb, "bob").await;
    let room = room_on(&http, &pa, &alice, &[(&pb, &bob)], "pa", json!(null), 40).await;
    let mut b = connect(&pb, &bob).await;
    subscribe(&mut b, &room).await;
    let seen = Arc::new(Mutex::new(Seen { ack_times: vec![Vec::new()], ..Seen::default() }));
    let mut cs = 1;
    let by_link = r#"roomd_bus_frames_sent_total{path="link"}"#;
    while counter(&http, &pb, by_link).await < 3.0 {
        assert!(cs < 60, "pb never sent on a link to pa");
        bump(&mut b, &room, &bob_id, cs, 1, &seen).await;
        cs += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
