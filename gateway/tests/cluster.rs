#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Cluster mode with real processes: three `roomd` nodes and the test Redis
//! (`REDIS_URL`, started by ./scripts/test; these fail, never skip, without it), all on
//! 127.0.0.1. Each test uses its own key prefix, so tests never see each other's rooms.

mod support;

use futures_util::StreamExt;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::procs::{
    bus_publish_verb, connect, counter, create_room, get_json, metric, next_within, on_test_redis, redis_cli_target,
    resend_until_acked, room_on, send, start_tally, tls_files, token, until_all_see, OwnRedis, Proc, Settings, Ws,
};
use support::tcp_proxy::Proxy;
use tokio_tungstenite::tungstenite::Message;

/// A node with a short lease whose ended rooms linger 2 s, on the tests' Redis (one Redis,
/// or the Redis Cluster of `ROOMD_TEST_REDIS_CLUSTER_URLS`: see `on_test_redis`).
fn node(id: &str, prefix: &str) -> Proc {
    Proc::spawn(id, on_test_redis(id, prefix).short_lease().set("ROOMD__ROOMS__ENDED_LINGER_S", "2"))
}

fn node_on(id: &str, prefix: &str, url: &str) -> Proc {
    Proc::spawn(id, Settings::cluster(id, prefix, url).short_lease().set("ROOMD__ROOMS__ENDED_LINGER_S", "2"))
}

/// These tests start several processes each: run them one at a time so a loaded CI
/// machine does not turn timing into flakiness.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn prefix() -> String {
    support::procs::prefix("it")
}

/// The next message matching `pred`, within `secs`.
async fn next_where(ws: &mut Ws, secs: u64, pred: impl Fn(&Value) -> bool) -> Option<Value> {
    next_within(ws, Duration::from_secs(secs), pred).await
}

/// With no peer link setting at all (links are on by default in cluster mode, on the HTTP
/// bind address), every frame of the game crosses node to node, none through Redis.
#[tokio::test]
async fn clients_on_two_nodes_play_a_room_owned_by_a_third() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("na", &prefix), node("nb", &prefix), node("nc", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1], &nodes[2]], 3).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    // Find a room whose owner is neither of the two nodes the players use.
    let mut found = None;
    // Placement spreads rooms over the three nodes: 40 tries miss nc once in ~10^7.
    for _ in 0..40 {
        let (room, owner) = start_tally(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], json!(10)).await;
        if owner == "nc" {
            found = Some(room);
            break;
        }
    }
    let room = found.expect("some room lands on nc");
    // Each node knows where the other two take links (from its next membership read).
    for n in &nodes {
        until(|| async { counter(&http, n, "roomd_bus_peer_addresses").await == 2.0 }, "peer addresses known").await;
    }
    let mut a = connect(&nodes[0], &alice).await;
    let mut b = connect(&nodes[1], &bob).await;
    for ws in [&mut a, &mut b] {
        send(ws, json!({"t": "sub", "room": room})).await;
        let sync = next_where(ws, 10, |v| v["t"] == "sync").await.expect("sync through the owner");
        assert_eq!(sync["seq"], 0);
    }
    let by_redis = r#"roomd_bus_frames_sent_total{path="redis"}"#;
    let by_link = r#"roomd_bus_frames_sent_total{path="link"}"#;
    let mut before = Vec::new();
    for n in &nodes {
        before.push((counter(&http, n, by_redis).await, counter(&http, n, by_link).await));
    }
    // Alternate bumps from both nodes; each gets its ack and sees the other's update.
    for i in 1..=5u64 {
        send(&mut a, json!({"t": "act", "room": room, "cs": i, "a": {"type": "bump"}})).await;
        let ack = next_where(&mut a, 10, |v| v["t"] == "ack").await.expect("ack for alice");
        assert_eq!(ack["cs"], i);
        send(&mut b, json!({"t": "act", "room": room, "cs": i, "a": {"type": "bump"}})).await;
        let ack = next_where(&mut b, 10, |v| v["t"] == "ack").await.expect("ack for bob");
        assert_eq!(ack["cs"], i);
    }
    let result = next_where(&mut a, 10, |v| v["t"] == "result").await.expect("result reaches alice's node");
    assert_eq!(result["result"]["details"]["count"], 10);
    next_where(&mut b, 10, |v| v["t"] == "result").await.expect("result reaches bob's node");
    // Every frame of the game crossed on peer links: the players' commands to nc, and
    // nc's acks and updates to both gateways; none went through Redis pub/sub.
    let mut after = Vec::new();
    for n in &nodes {
        after.push((counter(&http, n, by_redis).await, counter(&http, n, by_link).await));
    }
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(after[i].0, before[i].0, "{}: frames through Redis during the game", n.id);
        assert!(after[i].1 >= before[i].1 + 5.0, "{}: frames on links {:?} -> {:?}", n.id, before[i], after[i]);
    }
}

#[tokio::test]
async fn a_node_without_peer_links_plays_with_one_that_has_them() {
    // A rolling upgrade, or an operator who leaves links off on one node: frames to and
    // from that node go through Redis, the others' links still carry theirs.
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let linked = node("nlink", &prefix);
    let plain = Proc::spawn(
        "nplain",
        on_test_redis("nplain", &prefix)
            .short_lease()
            .set("ROOMD__ROOMS__ENDED_LINGER_S", "2")
            .set("ROOMD__CLUSTER__PEER_LISTEN", "off"),
    );
    until_all_see(&[&linked, &plain], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &linked, "alice").await;
    let (_, bob) = token(&http, &plain, "bob").await;
    // One room owned by each node, each played from both.
    let mut owned = std::collections::HashMap::new();
    for _ in 0..40 {
        let (room, owner) = start_tally(&http, &linked, &alice, &[(&plain, &bob)], json!(10)).await;
        owned.entry(owner).or_insert(room);
        if owned.len() == 2 {
            break;
        }
    }
    assert_eq!(owned.len(), 2, "rooms land on both nodes: {owned:?}");
    let mut a = connect(&linked, &alice).await;
    let mut b = connect(&plain, &bob).await;
    for room in owned.values() {
        for ws in [&mut a, &mut b] {
            send(ws, json!({"t": "sub", "room": room})).await;
            next_where(ws, 10, |v| v["t"] == "sync" && v["room"] == *room).await.expect("sync through the owner");
        }
        for i in 1..=5u64 {
            for ws in [&mut a, &mut b] {
                send(ws, json!({"t": "act", "room": room, "cs": i, "a": {"type": "bump"}})).await;
                let ack = next_where(ws, 10, |v| v["t"] == "ack" && v["room"] == *room).await.expect("ack");
                assert_eq!(ack["cs"], i);
            }
        }
        for ws in [&mut a, &mut b] {
            let result = next_where(ws, 10, |v| v["t"] == "result" && v["room"] == *room).await.expect("result");
            assert_eq!(result["result"]["details"]["count"], 10);
        }
    }
    // The linked node found no link to dial: its frames went through Redis.
    assert_eq!(counter(&http, &linked, "roomd_bus_peer_addresses").await, 0.0);
    assert!(counter(&http, &linked, r#"roomd_bus_frames_sent_total{path="redis"}"#).await >= 10.0);
    assert_eq!(counter(&http, &linked, r#"roomd_bus_frames_sent_total{path="link"}"#).await, 0.0);
}

/// Peer links are on by default; a cluster node bound to every address cannot work out
/// one other nodes can dial, and refuses to start saying what to set, rather than start
/// with links nobody can reach.
#[tokio::test]
async fn a_cluster_node_on_every_address_with_nothing_to_advertise_refuses_to_start() {
    let prefix = prefix();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_roomd"));
    Settings::cluster("wild", &prefix, &support::procs::redis_url())
        .set("ROOMD__HTTP__BIND", "0.0.0.0")
        .apply(&mut cmd);
    let refused = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let out = tokio::task::spawn_blocking(move || refused.wait_with_output().unwrap()).await.unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "started with links nobody can dial: {printed}");
    assert!(printed.contains("peer links are on by default"), "{printed}");
    assert!(printed.contains("ROOMD__CLUSTER__PEER_ADVERTISE") && printed.contains("PEER_LISTEN to off"), "{printed}");
    assert!(!printed.contains("roomd listening"), "{printed}");
}

#[tokio::test]
async fn sigkill_of_the_owner_loses_no_acknowledged_action_in_any_of_its_rooms() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let mut nodes = [node("fa", &prefix), node("fb", &prefix), node("fc", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1], &nodes[2]], 3).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    // Rooms until four of them live on fc (the node we will kill).
    let mut rooms = Vec::new();
    for _ in 0..40 {
        let (room, owner) = start_tally(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], json!(10)).await;
        if owner == "fc" {
            rooms.push(room);
            if rooms.len() == 4 {
                break;
            }
        }
    }
    assert_eq!(rooms.len(), 4, "four rooms land on fc");
    let mut sockets = Vec::new();
    for room in &rooms {
        // Each room played from alice's node (fa), which survives.
        let mut ws = connect(&nodes[0], &alice).await;
        send(&mut ws, json!({"t": "sub", "room": room})).await;
        next_where(&mut ws, 10, |v| v["t"] == "sync").await.expect("sync");
        for cs in 1..=3u64 {
            send(&mut ws, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
            let ack = next_where(&mut ws, 10, |v| v["t"] == "ack").await.expect("ack");
            assert_eq!(ack["seq"], cs);
        }
        sockets.push(ws);
    }
    let killed_at = tokio::time::Instant::now();
    nodes[2].kill();
    let mut resume_ms = Vec::new();
    for (room, ws) in rooms.iter().zip(sockets.iter_mut()) {
        // Resend cs 4 until the room answers from its new owner.
        let mut resumed = None;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while resumed.is_none() && tokio::time::Instant::now() < deadline {
            send(ws, json!({"t": "act", "room": room, "cs": 4, "a": {"type": "bump"}})).await;
            resumed = next_where(ws, 1, |v| v["t"] == "ack" && v["cs"] == 4).await;
        }
        let ack = resumed.expect("the room resumed on a live node");
        resume_ms.push(killed_at.elapsed().as_millis());
        assert_eq!(ack["seq"], 4, "the three acknowledged actions survived, none applied twice");
        // A retry of an old cs is deduplicated from the log.
        send(ws, json!({"t": "act", "room": room, "cs": 2, "a": {"type": "bump"}})).await;
        let again = next_where(ws, 10, |v| v["t"] == "ack" && v["cs"] == 2).await.expect("ack for retried cs");
        assert_eq!(again["seq"], 2);
        // The game plays to its end on the new owner.
        for cs in 5..=10u64 {
            send(ws, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
            next_where(ws, 10, |v| v["t"] == "ack" && v["cs"] == cs).await.expect("ack after failover");
        }
        let result = next_where(ws, 10, |v| v["t"] == "result").await.expect("game ends");
        assert_eq!(result["result"]["details"]["count"], 10);
        let info: Value = get_json(&http, format!("{}/api/rooms/{room}", nodes[1].base), &bob).await;
        assert_ne!(info["node"], "fc");
    }
    // Operators see the failover: the survivors count the rooms they restored.
    let mut restored = 0.0;
    for node in &nodes[..2] {
        restored += metric(&http, node, "roomd_rooms_restored_total").await;
    }
    assert!(restored >= 4.0, "restored {restored}");
    resume_ms.sort_unstable();
    eprintln!(
        "failover: kill -> first ack, ms: median {} max {} ({resume_ms:?})",
        resume_ms[resume_ms.len() / 2],
        resume_ms[resume_ms.len() - 1]
    );
}

#[tokio::test]
async fn sigterm_drains_rooms_to_other_nodes_and_closes_its_sockets_with_1012() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let mut nodes = [node("da", &prefix), node("db", &prefix), node("dc", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1], &nodes[2]], 3).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let room = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "dc", json!(null), 40).await;
    let mut a = connect(&nodes[0], &alice).await;
    let mut on_drained = connect(&nodes[2], &bob).await;
    send(&mut a, json!({"t": "sub", "room": room})).await;
    send(&mut on_drained, json!({"t": "sub", "room": room})).await;
    next_where(&mut a, 10, |v| v["t"] == "sync").await.expect("sync");
    next_where(&mut on_drained, 10, |v| v["t"] == "sync").await.expect("sync on dc");
    for cs in 1..=3u64 {
        send(&mut a, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        next_where(&mut a, 10, |v| v["t"] == "ack").await.expect("ack");
    }
    nodes[2].signal("TERM");
    // bob's socket on the draining node is closed with 1012 (service restart).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut close_code = None;
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, on_drained.next()).await {
        if let Ok(Message::Close(Some(frame))) = msg {
            close_code = Some(u16::from(frame.code));
            break;
        }
    }
    assert_eq!(close_code, Some(1012));
    // alice, on another node, continues in the same room: nothing acknowledged is lost.
    let mut resumed = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while resumed.is_none() && tokio::time::Instant::now() < deadline {
        send(&mut a, json!({"t": "act", "room": room, "cs": 4, "a": {"type": "bump"}})).await;
        resumed = next_where(&mut a, 1, |v| v["t"] == "ack" && v["cs"] == 4).await;
    }
    assert_eq!(resumed.expect("room continues elsewhere")["seq"], 4);
    // The drained process exits by itself within its grace.
    let exit_deadline = std::time::Instant::now() + Duration::from_secs(25);
    loop {
        if nodes[2].exited() {
            break;
        }
        assert!(std::time::Instant::now() < exit_deadline, "drained node did not exit");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let info: Value = get_json(&http, format!("{}/api/rooms/{room}", nodes[1].base), &bob).await;
    assert_ne!(info["node"], "dc");
}

#[tokio::test]
async fn a_paused_owner_is_fenced_after_another_node_takes_its_room() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("sa", &prefix), node("sb", &prefix), node("sc", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1], &nodes[2]], 3).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let room = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "sc", json!(null), 40).await;
    let mut a = connect(&nodes[0], &alice).await;
    send(&mut a, json!({"t": "sub", "room": room})).await;
    next_where(&mut a, 10, |v| v["t"] == "sync").await.expect("sync");
    for cs in 1..=3u64 {
        send(&mut a, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        next_where(&mut a, 10, |v| v["t"] == "ack").await.expect("ack");
    }
    // Freeze the owner past its lease: another node takes the room.
    nodes[2].signal("STOP");
    let mut seen: std::collections::BTreeMap<u64, Value> = std::collections::BTreeMap::new();
    let mut resumed = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while resumed.is_none() && tokio::time::Instant::now() < deadline {
        send(&mut a, json!({"t": "act", "room": room, "cs": 4, "a": {"type": "bump"}})).await;
        resumed = next_where(&mut a, 1, |v| v["t"] == "ack" && v["cs"] == 4).await;
    }
    assert_eq!(resumed.expect("another node took the room")["seq"], 4);
    // Wake the old owner. It still believes it owns the room and may try to act on the
    // commands queued for it; its appends are fenced, so nothing it does reaches alice.
    nodes[2].signal("CONT");
    for cs in 5..=8u64 {
        send(&mut a, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let msg = next_where(&mut a, 10, |_| true).await.expect("answer");
            if msg["t"] == "update" {
                let seq = msg["seq"].as_u64().unwrap();
                if let Some(before) = seen.insert(seq, msg["view"]["count"].clone()) {
                    assert_eq!(before, msg["view"]["count"], "two different updates for seq {seq}");
                }
                assert_eq!(msg["view"]["count"].as_u64(), Some(seq), "one history: count equals seq");
            }
            if msg["t"] == "ack" && msg["cs"] == cs {
                assert_eq!(msg["seq"], cs, "acks follow one history");
                break;
            }
            if msg["t"] == "error" {
                // A fenced old owner or a moving room: resend the same cs.
                send(&mut a, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
            }
            assert!(tokio::time::Instant::now() < deadline, "cs {cs} never acknowledged");
        }
    }
}

#[tokio::test]
async fn a_request_waiting_for_its_room_holds_up_no_other_room_of_that_node() {
    // A node serves its bus channel on one task. A request for a room that cannot answer
    // yet (here: its append waits for a frozen replica) must wait alone, not in front of
    // every command for the node's other rooms.
    let _serial = SERIAL.lock().await;
    let redis = OwnRedis::start();
    let replica = OwnRedis::replica_of(&redis);
    let url = redis.url();
    let acked = |id: &str| {
        Settings::cluster(id, "roomd-hol", &url)
            .short_lease()
            .set("ROOMD__REDIS__ACK_REPLICAS", "1")
            .set("ROOMD__REDIS__ACK_TIMEOUT_MS", "3000")
    };
    let nodes = [Proc::spawn("ha", acked("ha")), Proc::spawn("hb", acked("hb"))];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    // Two rooms owned by ha, asked about through hb.
    let slow = room_on(&http, &nodes[1], &bob, &[(&nodes[0], &alice)], "ha", json!(null), 40).await;
    let other = room_on(&http, &nodes[1], &bob, &[(&nodes[0], &alice)], "ha", json!(null), 40).await;
    let mut b = connect(&nodes[1], &bob).await;
    send(&mut b, json!({"t": "sub", "room": slow})).await;
    next_where(&mut b, 10, |v| v["t"] == "sync").await.expect("sync");

    // The replica freezes: the slow room's next append waits out the 3 s acknowledgement
    // timeout, and its mailbox with it.
    replica.signal("STOP");
    let frames = metric(&http, &nodes[0], "roomd_bus_lag_seconds_count").await;
    send(&mut b, json!({"t": "act", "room": slow, "cs": 1, "a": {"type": "bump"}})).await;
    // The bump has reached ha (and so its room, before anything ha receives after it).
    until(|| async { metric(&http, &nodes[0], "roomd_bus_lag_seconds_count").await > frames }, "the bump reaches ha")
        .await;
    let slow_info = tokio::spawn({
        let (http, url, bob) = (http.clone(), format!("{}/api/rooms/{slow}", nodes[1].base), bob.clone());
        async move { http.get(url).bearer_auth(bob).send().await.map(|r| r.status()) }
    });
    until(|| async { metric(&http, &nodes[0], "roomd_bus_backlog_rooms").await == 1.0 }, "the request reaches ha")
        .await;
    assert!(!slow_info.is_finished(), "the slow room answered while its append waits");
    // The other room answers through the same two nodes, at once.
    let info = get_json(&http, format!("{}/api/rooms/{other}", nodes[1].base), &bob).await;
    assert_eq!(info["roomId"], other, "{info}");
    assert_eq!(info["node"], "ha", "{info}");
    assert!(!slow_info.is_finished(), "the other room was answered only after the slow one");
    assert_eq!(metric(&http, &nodes[0], "roomd_bus_backlog_rooms").await, 1.0, "the slow room's backlog shows");

    replica.signal("CONT");
    let status = slow_info.await.unwrap().expect("the slow room's request is answered");
    assert!(status == 200 || status == 503, "{status}");
    // Its backlog is gone once served (the answer left ha just before it was removed).
    until(|| async { metric(&http, &nodes[0], "roomd_bus_backlog_rooms").await == 0.0 }, "the backlog empties").await;
}

/// Waits (10 s at most) until `holds` says yes; `what` names it in the failure.
async fn until<F: std::future::Future<Output = bool>>(holds: impl Fn() -> F, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !holds().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_redis_restart_pauses_rooms_and_loses_no_acknowledged_action() {
    let _serial = SERIAL.lock().await;
    let mut redis = OwnRedis::start();
    let url = redis.url();
    let nodes = [node_on("ra", "roomd-aof", &url), node_on("rb", "roomd-aof", &url)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let (room, _) = start_tally(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], json!(null)).await;
    let mut a = connect(&nodes[0], &alice).await;
    send(&mut a, json!({"t": "sub", "room": room})).await;
    next_where(&mut a, 10, |v| v["t"] == "sync").await.expect("sync");
    for cs in 1..=3u64 {
        send(&mut a, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        next_where(&mut a, 10, |v| v["t"] == "ack").await.expect("ack");
    }

    redis.kill();
    // The store is unreachable: readiness says so, and an action is not acknowledged.
    let ready = http.get(format!("{}/readyz", nodes[0].base)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    send(&mut a, json!({"t": "act", "room": room, "cs": 4, "a": {"type": "bump"}})).await;
    assert!(next_where(&mut a, 2, |v| v["t"] == "ack" && v["cs"] == 4).await.is_none(), "acked without a store");

    redis.up();
    let mut acked = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while acked.is_none() && tokio::time::Instant::now() < deadline {
        send(&mut a, json!({"t": "act", "room": room, "cs": 4, "a": {"type": "bump"}})).await;
        acked = next_where(&mut a, 1, |v| v["t"] == "ack" && v["cs"] == 4).await;
    }
    assert_eq!(
        acked.expect("the room continues after Redis is back")["seq"],
        4,
        "the three acknowledged bumps survived"
    );
    // Ready again once the reconciler has made a pass over the store that came back and the
    // bus is heard again: not necessarily at the moment the first action is acknowledged.
    until(
        || async {
            let answer = http.get(format!("{}/readyz", nodes[0].base)).send().await;
            answer.is_ok_and(|r| r.status() == 200)
        },
        "ra ready again after Redis is back",
    )
    .await;
}

/// Plays `room` (a tally with no target, owned by another node) from `ws` for `bumps`
/// acknowledged bumps starting at `cs`.
async fn bump(ws: &mut Ws, room: &str, cs: u64, bumps: u64) {
    send(ws, json!({"t": "sub", "room": room})).await;
    next_where(ws, 10, |v| v["t"] == "sync" && v["room"] == room).await.expect("sync through the owner");
    for i in cs..cs + bumps {
        send(ws, json!({"t": "act", "room": room, "cs": i, "a": {"type": "bump"}})).await;
        let ack = next_where(ws, 10, |v| v["t"] == "ack" && v["room"] == room).await.expect("ack");
        assert_eq!(ack["cs"], i);
    }
}

#[tokio::test]
async fn a_node_restarted_on_a_new_peer_port_is_dialled_there_and_frames_go_back_on_links() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let mut nodes = [node("ra", &prefix), node("rb", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    for n in &nodes {
        until(|| async { counter(&http, n, "roomd_bus_peer_addresses").await == 1.0 }, "peer address known").await;
    }
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let by_link = r#"roomd_bus_frames_sent_total{path="link"}"#;
    let first = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "rb", json!(null), 40).await;
    let mut a = connect(&nodes[0], &alice).await;
    bump(&mut a, &first, 1, 3).await;
    let before = counter(&http, &nodes[0], by_link).await;
    assert!(before >= 3.0, "ra's commands went on its link to rb: {before}");
    // rb restarts with the same id: a new process, a new peer port. ra's link to the old
    // one closed with it; ra reads the new address and dials there.
    nodes[1].kill();
    nodes[1].up();
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let second = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "rb", json!(null), 40).await;
    let mut a = connect(&nodes[0], &alice).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut cs = 1;
    loop {
        bump(&mut a, &second, cs, 3).await;
        cs += 3;
        // The first frames after the restart may go through Redis (the old address is
        // refused until ra's next membership read); then the link takes them again.
        if counter(&http, &nodes[0], by_link).await >= before + 3.0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "ra never sent on a link to the new rb");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(counter(&http, &nodes[1], by_link).await >= 3.0, "the new rb answers on its own link to ra");
}

/// A link that dies without closing (a partition between two nodes that both still reach
/// Redis, a firewall that forgot the connection): its writes succeed and its frames vanish,
/// and the membership says both nodes are alive, so no failover comes. The sender sees its
/// frames go unacknowledged, gives the link up (through Redis until a new link is up, which
/// then passes), and the room plays on. Without acknowledgements the room would take no
/// action again for as long as the connections stayed open.
#[tokio::test]
async fn a_peer_link_whose_frames_vanish_is_given_up_and_play_goes_on() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let ports = [support::procs::free_port(), support::procs::free_port()];
    let proxies =
        [Proxy::start(format!("127.0.0.1:{}", ports[0])).await, Proxy::start(format!("127.0.0.1:{}", ports[1])).await];
    let behind = |id: &str, i: usize| {
        Proc::spawn(
            id,
            on_test_redis(id, &prefix)
                .short_lease()
                .set("ROOMD__CLUSTER__PEER_LISTEN", format!("127.0.0.1:{}", ports[i]))
                .set("ROOMD__CLUSTER__PEER_ADVERTISE", &proxies[i].addr),
        )
    };
    let nodes = [behind("ha", 0), behind("hb", 1)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    for n in &nodes {
        until(|| async { counter(&http, n, "roomd_bus_peer_addresses").await == 1.0 }, "peer address known").await;
    }
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let room = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "hb", json!(null), 40).await;
    let mut a = connect(&nodes[0], &alice).await;
    // Alice on ha plays hb's room: her actions to hb and its answers to ha cross links.
    bump(&mut a, &room, 1, 3).await;
    let by_link = r#"roomd_bus_frames_sent_total{path="link"}"#;
    let given_up = "roomd_bus_links_given_up_total";
    for n in &nodes {
        assert!(counter(&http, n, by_link).await >= 3.0, "{} sent on its link", n.id);
        assert_eq!(counter(&http, n, given_up).await, 0.0, "{}", n.id);
    }
    let holed: usize = proxies.iter().map(Proxy::black_hole).sum();
    assert!(holed >= 2, "both links go through the proxies ({holed} connections holed)");
    let on_links_at_cut = counter(&http, &nodes[0], by_link).await;
    // Alice resends the same action while she hears nothing back, as a client does.
    let cs = 4;
    let ack = resend_until_acked(&mut a, &room, cs, Duration::from_secs(4), Duration::from_secs(30))
        .await
        .expect("an ack within 30 s of the links dying");
    assert_eq!((ack["cs"].as_u64(), ack["seq"].as_u64()), (Some(cs), Some(cs)), "{ack}");
    let gave_up = counter(&http, &nodes[0], given_up).await + counter(&http, &nodes[1], given_up).await;
    assert!(gave_up >= 1.0, "a sender gave a dead link up: {gave_up}");
    // New links pass the proxies: frames go back on links.
    let mut cs = cs + 1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while counter(&http, &nodes[0], by_link).await < on_links_at_cut + 3.0 {
        assert!(tokio::time::Instant::now() < deadline, "ha never sent on a new link to hb");
        bump(&mut a, &room, cs, 1).await;
        cs += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A node's subscription to its bus channel only reads, so a connection that dies
/// without closing (Redis's host gone behind a stable address, a partition) would leave it
/// deaf to every frame sent through Redis, while Redis may still count it as subscribed
/// (so no node finds it dead). The node pings on that connection; unanswered, it
/// subscribes again on a new connection, and its players' answers come through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_subscription_that_goes_silent_is_replaced_and_play_goes_on() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let url = support::procs::redis_url();
    let redis_at = url.trim_start_matches("redis://").split('/').next().unwrap().to_owned();
    let proxy = Proxy::start(redis_at).await;
    // Peer links off: every frame between the nodes goes through Redis pub/sub. sb reaches
    // Redis through the proxy.
    let settings = |id: &str, url: &str| {
        Settings::cluster(id, &prefix, url).short_lease().set("ROOMD__CLUSTER__PEER_LISTEN", "off")
    };
    // (The proxy runs on this test's runtime: a node starting through it must not block it.)
    let nodes = tokio::task::block_in_place(|| {
        [
            Proc::spawn("sa", settings("sa", &url)),
            Proc::spawn("sb", settings("sb", &format!("redis://{}/", proxy.addr))),
        ]
    });
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let room = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "sa", json!(null), 40).await;
    // Bob on sb plays sa's room: his acks come back on sb's subscription.
    let mut b = connect(&nodes[1], &bob).await;
    bump(&mut b, &room, 1, 3).await;
    let holed = proxy.black_hole_where(|opening| support::tcp_proxy::holds(opening, "SUBSCRIBE"));
    assert_eq!(holed, 1, "sb's one subscription goes silent");
    // Bob resends the same action while he hears nothing back, as a client does.
    let cs = 4;
    let ack = resend_until_acked(&mut b, &room, cs, Duration::from_secs(4), Duration::from_secs(30))
        .await
        .expect("an ack within 30 s of the subscription going silent");
    assert_eq!((ack["cs"].as_u64(), ack["seq"].as_u64()), (Some(cs), Some(cs)), "{ack}");
    // And the new subscription keeps working.
    bump(&mut b, &room, cs + 1, 2).await;
}

#[tokio::test]
async fn a_nodes_peer_port_takes_only_a_process_that_holds_the_cluster_secret() {
    use room_actor::cluster::link::{dial, LinkKey};
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("pa", &prefix), node("pb", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    // Where pa advertises its links, as its peers read it from the membership.
    let peers = format!("{prefix}:{{nodes}}:peers");
    let out = Command::new("redis-cli").args(redis_cli_target()).args(["HGET", &peers, "pa"]).output().unwrap();
    let addr = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "pa advertises {addr:?}");
    let http = reqwest::Client::new();
    let refused = "roomd_bus_links_refused_total";
    assert_eq!(counter(&http, &nodes[0], refused).await, 0.0);
    // A process with another secret gets no link (it would read players' hidden views, or
    // feed the node commands in their names).
    let err =
        dial(&addr, &LinkKey::from_secret("not-the-cluster-secret-0123"), "pb", "pa").await.err().expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    until(|| async { counter(&http, &nodes[0], refused).await == 1.0 }, "pa counts the refused link").await;
    // One that holds it does.
    let key = LinkKey::from_secret(support::procs::SECRET);
    assert!(dial(&addr, &key, "pb", "pa").await.is_ok());
    assert_eq!(counter(&http, &nodes[0], refused).await, 1.0);
}

#[tokio::test]
async fn malformed_bus_envelopes_are_dropped_and_the_node_lives_on() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("ma", &prefix), node("mb", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let target = redis_cli_target();
    // Garbage, a truncated frame, an empty message, and a frame of another bus version on
    // node ma's channel.
    let foreign = format!("{}12345678{{}}", char::from(room_actor::cluster::bus::FRAME_VERSION + 1));
    for payload in ["garbage", "\u{1}\u{2}", "", foreign.as_str()] {
        let status = Command::new("redis-cli")
            .args(&target)
            .args([bus_publish_verb(), &format!("{prefix}:bus:ma"), payload])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli is installed with redis-server");
        assert!(status.success());
    }
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    // ma's bus loop still works: a room owned by ma, played from mb, goes both ways.
    let room = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "ma", json!(null), 40).await;
    let mut b = connect(&nodes[1], &bob).await;
    send(&mut b, json!({"t": "sub", "room": room})).await;
    next_where(&mut b, 10, |v| v["t"] == "sync").await.expect("sync");
    send(&mut b, json!({"t": "act", "room": room, "cs": 1, "a": {"type": "bump"}})).await;
    assert_eq!(next_where(&mut b, 10, |v| v["t"] == "ack").await.expect("ack")["seq"], 1);
    assert_eq!(http.get(format!("{}/healthz", nodes[0].base)).send().await.unwrap().status(), 200);
    // Operators see the drops, and the lag of the frames that did arrive, on both sides.
    assert_eq!(metric(&http, &nodes[0], "roomd_bus_dropped_total").await, 4.0);
    assert_eq!(metric(&http, &nodes[1], "roomd_bus_dropped_total").await, 0.0);
    for node in &nodes {
        assert!(metric(&http, node, "roomd_bus_lag_seconds_count").await >= 1.0, "{}", node.base);
        let lag = metric(&http, node, "roomd_bus_lag_seconds_sum").await;
        assert!((0.0..60.0).contains(&lag), "{}: {lag}", node.base);
    }
}

#[tokio::test]
async fn a_replay_is_served_by_a_node_that_never_hosted_the_game() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("pa", &prefix), node("pb", &prefix), node("pc", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1], &nodes[2]], 3).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let room = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "pc", json!(10), 40).await;
    let mut a = connect(&nodes[0], &alice).await;
    send(&mut a, json!({"t": "sub", "room": room})).await;
    next_where(&mut a, 10, |v| v["t"] == "sync").await.expect("sync");
    let mut pk = None;
    for cs in 1..=10u64 {
        send(&mut a, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        next_where(&mut a, 10, |v| v["t"] == "ack" && v["cs"] == cs).await.expect("ack");
    }
    if let Some(result) = next_where(&mut a, 10, |v| v["t"] == "result").await {
        pk = result["gamePk"].as_str().map(str::to_owned);
    }
    let pk = pk.expect("the game ended");
    // Ask pb, which neither hosted the room nor served alice.
    let replay = http.get(format!("{}/api/replays/{pk}", nodes[1].base)).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(replay.status(), 200);
    let body: Value = replay.json().await.unwrap();
    assert_eq!(body["scenes"], 11);
    let games: Value = get_json(&http, format!("{}/api/me/games", nodes[2].base), &bob).await;
    assert_eq!(games[0]["gamePk"], pk.as_str());
}

#[tokio::test]
async fn an_ended_room_nobody_watches_closes_and_gives_its_lease_back() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("ea", &prefix), node("eb", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let (room, owner) = start_tally(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], json!(10)).await;
    let owner_node = match owner.as_str() {
        "ea" => &nodes[0],
        "eb" => &nodes[1],
        other => panic!("unknown owner {other}"),
    };
    let lease_key = format!("{prefix}:{{room:{room}}}:lease");
    let target = redis_cli_target();
    let lease = || {
        let out = Command::new("redis-cli").args(&target).args(["GET", &lease_key]).output().expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert!(lease().starts_with(&owner), "the owner holds the lease: {:?}", lease());
    // Play it out from node a, then stop watching.
    let mut a = connect(&nodes[0], &alice).await;
    send(&mut a, json!({"t": "sub", "room": room})).await;
    next_where(&mut a, 10, |v| v["t"] == "sync").await.expect("sync");
    for cs in 1..=10u64 {
        send(&mut a, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
    }
    next_where(&mut a, 10, |v| v["t"] == "result").await.expect("the game ends");
    drop(a);
    // Linger (2 s) + a lease tick (0.5 s): the room is gone and its lease released,
    // long before the lease itself would have expired had it been kept renewed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(lease().is_empty() && metric(&http, owner_node, "roomd_rooms").await == 0.0) {
        assert!(tokio::time::Instant::now() < deadline, "lease {:?} still held", lease());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The finished game is still listed.
    let games: Value = get_json(&http, format!("{}/api/me/games", nodes[1].base), &bob).await;
    assert_eq!(games.as_array().map(Vec::len), Some(1), "{games}");
}

#[tokio::test]
async fn the_host_removes_a_seated_player_through_a_node_that_does_not_own_the_room() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("ka", &prefix), node("kb", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, host) = token(&http, &nodes[0], "방장").await;
    let (guest_id, guest) = token(&http, &nodes[0], "손님").await;
    let room = create_room(&http, &nodes[0].base, &host, json!({"game": "tally"})).await;
    let info = get_json(&http, format!("{}/api/rooms/{room}", nodes[0].base), &host).await;
    // Every call below goes through the node that does not own the room (over the bus).
    let via = if info["node"] == "ka" { &nodes[1] } else { &nodes[0] };
    let r = http.post(format!("{}/api/rooms/{room}/seats", via.base)).bearer_auth(&guest).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut ws = connect(via, &guest).await;
    send(&mut ws, json!({"t": "sub", "room": room})).await;
    next_where(&mut ws, 10, |m| m["t"] == "sync").await.expect("sync through the other node");

    let remove = |who: String, token: String| {
        let http = http.clone();
        let url = format!("{}/api/rooms/{room}/seats/{who}", via.base);
        async move {
            let r = http.delete(url).bearer_auth(token).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, body) = remove(guest_id.clone(), guest.clone()).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("not_host")), "{body}");
    let (status, body) = remove(guest_id.clone(), host.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["seats"].as_array().unwrap().len(), 1, "{body}");
    let told = next_where(&mut ws, 10, |m| m["t"] == "error").await.expect("the removed player is told");
    assert_eq!((told["code"].as_str(), told["room"].as_str()), (Some("removed_from_seat"), Some(room.as_str())));
    // They may not sit there again, through either node (issue 55).
    for node in &nodes {
        let r = http.post(format!("{}/api/rooms/{room}/seats", node.base)).bearer_auth(&guest).send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or_default();
        assert_eq!((status, body["code"].as_str()), (403, Some("removed_from_seat")), "{body}");
    }
}

/// The cap on seats in rooms that have not started counts a user's seats on every node
/// (from the user's own index, not a scan of every open room): with a cap of 2, a user
/// hosting a room on one node and seated in a second through the other is refused a
/// third, and seated once the second room starts.
#[tokio::test]
async fn waiting_seats_are_capped_across_nodes_and_a_started_room_frees_its_seat() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let capped =
        |id: &str| Proc::spawn(id, on_test_redis(id, &prefix).set("ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER", "2"));
    let nodes = [capped("wa"), capped("wb")];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, user) = token(&http, &nodes[0], "도윤").await;
    let (_, other) = token(&http, &nodes[1], "서연").await;
    create_room(&http, &nodes[0].base, &user, json!({"game": "tally"})).await;
    let second = create_room(&http, &nodes[1].base, &other, json!({"game": "tally"})).await;
    let third = create_room(&http, &nodes[1].base, &other, json!({"game": "tally"})).await;
    let sit = |node: usize, room: &str| {
        let request = http.post(format!("{}/api/rooms/{room}/seats", nodes[node].base)).bearer_auth(&user);
        async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, body) = sit(1, &second).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = sit(0, &third).await;
    assert_eq!((status, body["code"].as_str()), (429, Some("too_many_waiting_seats")), "{body}");
    let started = http.post(format!("{}/api/rooms/{second}/start", nodes[1].base)).bearer_auth(&other).send().await;
    assert_eq!(started.unwrap().status(), 200);
    let (status, body) = sit(0, &third).await;
    assert_eq!(status, 200, "the started room's seat no longer waits: {body}");
}

/// `rediss://`: a node reaches a TLS-only Redis (a `redis-server --tls-port` of the
/// test's own, its certificate signed by a CA made here) when `SSL_CERT_FILE` names that
/// CA, and plays a game through it (fenced appends and the bus both over TLS). Given
/// another CA it refuses to start, with a clear error, rather than talk to an unverified
/// server.
#[tokio::test]
async fn a_node_plays_through_a_tls_redis_whose_ca_is_in_ssl_cert_file_and_refuses_an_unknown_one() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(dir.path(), "roomd-test-ca");
    let (other_ca, _, _) = {
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        tls_files(&other, "another-ca")
    };
    let port = support::procs::free_port();
    let mut redis = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", "0", "--tls-port", &port.to_string()])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .arg("--tls-ca-cert-file")
        .arg(&ca)
        .args(["--tls-auth-clients", "no", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server is installed (./scripts/test installs it)");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the TLS redis-server did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("rediss://127.0.0.1:{port}/");
    let prefix = prefix();

    // An unknown CA: the node does not start.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_roomd"));
    Settings::cluster("tls-x", &prefix, &url).set("SSL_CERT_FILE", &other_ca).apply(&mut cmd);
    let refused = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let out = tokio::task::spawn_blocking(move || refused.wait_with_output().unwrap()).await.unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "a node trusting another CA started: {printed}");
    assert!(printed.contains("cannot reach Redis at ROOMD__REDIS__URL"), "{printed}");
    assert!(!printed.contains("roomd listening"), "{printed}");

    // The right CA: two nodes play a room owned by either of them.
    let nodes = [
        Proc::spawn("tls-a", Settings::cluster("tls-a", &prefix, &url).short_lease().set("SSL_CERT_FILE", &ca)),
        Proc::spawn("tls-b", Settings::cluster("tls-b", &prefix, &url).short_lease().set("SSL_CERT_FILE", &ca)),
    ];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let (room, _) = start_tally(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], json!(10)).await;
    let mut a = connect(&nodes[0], &alice).await;
    let mut b = connect(&nodes[1], &bob).await;
    for ws in [&mut a, &mut b] {
        send(ws, json!({"t": "sub", "room": room})).await;
        next_where(ws, 10, |v| v["t"] == "sync").await.expect("sync over the TLS bus");
    }
    for i in 1..=5u64 {
        for ws in [&mut a, &mut b] {
            send(ws, json!({"t": "act", "room": room, "cs": i, "a": {"type": "bump"}})).await;
            let ack = next_where(ws, 10, |v| v["t"] == "ack").await.expect("ack: the entry is in the TLS Redis");
            assert_eq!(ack["cs"], i);
        }
    }
    let result = next_where(&mut a, 10, |v| v["t"] == "result").await.expect("result");
    assert_eq!(result["result"]["details"]["count"], 10);
    next_where(&mut b, 10, |v| v["t"] == "result").await.expect("result on the other node");
    drop(nodes);
    let _ = redis.kill();
    let _ = redis.wait();
}

#[tokio::test]
async fn room_info_names_the_owners_public_url_and_a_socket_there_plays_and_follows_a_failover() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    // Each node knows its own address before it starts: its public URL is that address.
    let start = |id: &str| {
        let port = support::procs::free_port();
        let public = format!("http://127.0.0.1:{port}/");
        let settings = on_test_redis(id, &prefix)
            .short_lease()
            .set("ROOMD__HTTP__PORT", port.to_string())
            .set("ROOMD__NODE__PUBLIC_URL", public);
        Proc::spawn(id, settings)
    };
    let mut nodes = [start("da"), start("db")];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let (room, owner) = start_tally(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], json!(100)).await;
    let (o, s) = if owner == "da" { (0, 1) } else { (1, 0) };
    for via in &nodes {
        let info: Value = get_json(&http, format!("{}/api/rooms/{room}", via.base), &alice).await;
        assert_eq!(info["nodeUrl"], nodes[o].base.as_str(), "every node names the owner's URL, trailing / trimmed");
    }
    let ws_at = |base: &str| format!("{}/ws?token={alice}", base.replacen("http://", "ws://", 1));
    let mut ws = tokio_tungstenite::connect_async(ws_at(&nodes[o].base)).await.unwrap().0;
    send(&mut ws, json!({"t": "sub", "room": room})).await;
    next_where(&mut ws, 10, |v| v["t"] == "sync").await.expect("sync from the owner itself");
    assert_eq!(metric(&http, &nodes[o], "roomd_sessions").await, 1.0, "the socket is on the owner");
    assert_eq!(metric(&http, &nodes[s], "roomd_sessions").await, 0.0);
    for cs in 1..=3u64 {
        send(&mut ws, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        let ack = next_where(&mut ws, 10, |v| v["t"] == "ack" && v["cs"] == cs).await.expect("ack on the owner");
        assert_eq!(ack["seq"], cs);
    }
    nodes[o].kill();
    // The survivor takes the room over and names itself; a client that reads the info
    // again connects there and goes on where the log left off.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let info = loop {
        let r = http.get(format!("{}/api/rooms/{room}", nodes[s].base)).bearer_auth(&alice).send().await.unwrap();
        let info: Value = r.json().await.unwrap_or(Value::Null);
        if info["node"] == nodes[s].id.as_str() || tokio::time::Instant::now() > deadline {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(info["nodeUrl"], nodes[s].base.as_str(), "the new owner's URL: {info}");
    let mut ws = tokio_tungstenite::connect_async(ws_at(&nodes[s].base)).await.unwrap().0;
    send(&mut ws, json!({"t": "sub", "room": room})).await;
    next_where(&mut ws, 10, |v| v["t"] == "sync").await.expect("sync from the new owner");
    send(&mut ws, json!({"t": "act", "room": room, "cs": 4, "a": {"type": "bump"}})).await;
    let ack = next_where(&mut ws, 10, |v| v["t"] == "ack" && v["cs"] == 4).await.expect("ack after failover");
    assert_eq!(ack["seq"], 4, "the three acknowledged bumps survived");
}

#[test]
fn a_public_url_that_is_not_an_http_base_url_stops_the_node_with_its_reason() {
    // An embedded node on its default file store, with no secret: nothing may be written.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_roomd"))
        .current_dir(dir.path())
        .env("ROOMD__HTTP__PORT", "0")
        .env_remove("ROOMD__STORE__KIND")
        .env_remove("ROOMD__STORE__PATH")
        .env_remove("ROOMD__AUTH__SECRET")
        .env_remove("ROOMD__REDIS__URL")
        .env("ROOMD__NODE__PUBLIC_URL", "ws://127.0.0.1:8080")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("ROOMD__NODE__PUBLIC_URL") && said.contains("http://"), "{said}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "a refused start wrote {left:?}");
}

/// The per-user socket cap (`ROOMD__WS__MAX_SOCKETS_PER_USER`, 8) counts a user's sockets
/// on every node, not on each (three nodes used to allow 24): with 4 open on each of two
/// nodes, a 9th is refused on either with 429 `too_many_sockets`; once one closes, one more
/// is accepted.
#[tokio::test]
async fn the_per_user_socket_cap_counts_the_sockets_on_every_node() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("sa", &prefix), node("sb", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    // Each node reads the live nodes every 100 ms: let both have read the other.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let http = reqwest::Client::new();
    let (_, user) = token(&http, &nodes[0], "소켓").await;
    let open = |node: usize| {
        let url = format!("{}/ws?token={user}", nodes[node].ws());
        async move { tokio_tungstenite::connect_async(url).await }
    };
    let refused = |result: Result<_, tokio_tungstenite::tungstenite::Error>| match result {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body = resp.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default().into_owned();
            Some((resp.status().as_u16(), body))
        }
        Err(e) => panic!("expected an HTTP answer, got {e}"),
        Ok(_) => None,
    };
    let mut sockets = Vec::new();
    for i in 0..8 {
        let (ws, _) = open(i % 2).await.unwrap_or_else(|e| panic!("socket {i}: {e}"));
        sockets.push(ws);
    }
    for node in 0..2 {
        let (status, body) = refused(open(node).await).unwrap_or_else(|| panic!("a 9th socket opened on node {node}"));
        assert_eq!(status, 429, "{body}");
        assert!(body.contains("too_many_sockets"), "{body}");
    }
    let mut closed = sockets.remove(0);
    closed.close(None).await.unwrap();
    // The close reaches Redis in the background: the next socket is accepted soon after.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match refused(open(1).await) {
            None => break,
            Some((status, body)) => assert_eq!(status, 429, "{body}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "no socket accepted after one of 8 closed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Quick chat across nodes (issue 59): the chatting player's socket is on a node that does
/// not own the room and a spectator's is on the owner, so the phrase crosses to the room
/// and its fan-out crosses back; a refusal (`rate_limited`) reaches the remote player
/// too. The players' lobby of either node leaves out an unlisted room, and a lobby that
/// names the game shows it (`LobbyFilter` on the Redis lobby index).
#[tokio::test]
async fn quick_chat_reaches_watchers_on_another_node_and_refusals_come_back() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("qa", &prefix), node("qb", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (alice_id, alice) = token(&http, &nodes[0], "alice").await;
    let (bob_id, bob) = token(&http, &nodes[1], "bob").await;
    let (_, carol) = token(&http, &nodes[1], "carol").await;
    let room = create_room(&http, &nodes[0].base, &alice, json!({"game": "cockroach-poker", "listed": false})).await;
    let sat = http.post(format!("{}/api/rooms/{room}/seats", nodes[1].base)).bearer_auth(&bob).send().await.unwrap();
    assert_eq!(sat.status(), 200, "{}", sat.text().await.unwrap());
    let started = http.post(format!("{}/api/rooms/{room}/start", nodes[0].base)).bearer_auth(&alice).send().await;
    assert_eq!(started.unwrap().status(), 200);
    let info = get_json(&http, format!("{}/api/rooms/{room}", nodes[1].base), &carol).await;
    let owner = nodes.iter().position(|n| info["node"] == n.id.as_str()).expect("an owner");
    let (elsewhere, at_owner) = (&nodes[1 - owner], &nodes[owner]);

    // Alice talks through the node that does not own the room; Carol watches on the owner.
    let mut a = connect(elsewhere, &alice).await;
    let mut b = connect(at_owner, &bob).await;
    let mut c = connect(at_owner, &carol).await;
    for ws in [&mut a, &mut b, &mut c] {
        send(ws, json!({"t": "sub", "room": room})).await;
        next_where(ws, 10, |v| v["t"] == "sync").await.expect("sync");
    }
    let chat_of =
        |room: String| move |v: &Value| matches!(v["t"].as_str(), Some("chat" | "error")) && v["room"] == room;
    send(&mut a, json!({"t": "chat", "room": room, "phrase": "really"})).await;
    for ws in [&mut c, &mut b, &mut a] {
        let chat = next_where(ws, 10, chat_of(room.clone())).await.expect("the phrase");
        assert_eq!(chat, json!({"t": "chat", "room": room, "from": alice_id, "phrase": "really"}));
    }
    send(&mut b, json!({"t": "chat", "room": room, "phrase": "doubt"})).await;
    let chat = next_where(&mut a, 10, chat_of(room.clone())).await.expect("bob's phrase on alice's node");
    assert_eq!((chat["from"].as_str(), chat["phrase"].as_str()), (Some(bob_id.as_str()), Some("doubt")));
    let chat = next_where(&mut c, 10, chat_of(room.clone())).await.expect("bob's phrase on his own node");
    assert_eq!(chat["phrase"], "doubt");
    // Refusals come back across nodes to the one who asked.
    send(&mut a, json!({"t": "chat", "room": room, "phrase": "doubt"})).await;
    let refused = next_where(&mut a, 10, chat_of(room.clone())).await.expect("a refusal");
    assert_eq!((refused["t"].as_str(), refused["code"].as_str()), (Some("error"), Some("rate_limited")), "{refused}");
    let mut d = connect(elsewhere, &carol).await;
    send(&mut d, json!({"t": "sub", "room": room})).await;
    next_where(&mut d, 10, |v| v["t"] == "sync").await.expect("sync");
    send(&mut d, json!({"t": "chat", "room": room, "phrase": "really"})).await;
    let refused = next_where(&mut d, 10, chat_of(room.clone())).await.expect("a spectator's refusal");
    assert_eq!(refused["code"], "not_seated", "{refused}");
    assert!(next_within(&mut c, Duration::from_millis(300), chat_of(room.clone())).await.is_none());

    // Unlisted: in neither node's lobby, but in a lobby that names its game.
    for n in &nodes {
        let lobby = get_json(&http, format!("{}/api/rooms", n.base), &carol).await;
        assert!(lobby.as_array().unwrap().iter().all(|r| r["roomId"] != room.as_str()), "{}: {lobby}", n.id);
        let named = get_json(&http, format!("{}/api/rooms?game=cockroach-poker", n.base), &carol).await;
        assert!(named.as_array().unwrap().iter().any(|r| r["roomId"] == room.as_str()), "{}: {named}", n.id);
    }
}
