#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! A cluster node never says ready while it cannot serve: real `roomd` processes on the
//! test Redis (`REDIS_URL`, or the Redis Cluster of `ROOMD_TEST_REDIS_CLUSTER_URLS`) whose
//! bus subscription is taken from them. A node hears the frames other nodes send it (its
//! players' acks and updates, requests for its rooms) only through that subscription
//! when peer links are off, so these tests turn them off: a deaf node is then deaf to
//! everything, and must either say so (`/readyz` 503) or hear again.

mod support;

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::procs::{
    bus_publish_verb, connect, next_within, on_test_redis, redis_cli_target, redis_url, resend_until_acked, room_on,
    send, token, until_all_see, Proc, Settings, Ws,
};
use support::tcp_proxy::{holds, Proxy};

/// These tests start several processes each: one at a time, so timing stays honest.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `/readyz` of `node`: its status code and body (`None` when it does not answer).
async fn readyz(http: &reqwest::Client, node: &Proc) -> Option<(u16, Value)> {
    let r = http.get(format!("{}/readyz", node.base)).timeout(Duration::from_secs(5)).send().await.ok()?;
    let status = r.status().as_u16();
    Some((status, r.json().await.unwrap_or_default()))
}

/// Subscribes `ws` to `room` and plays `bumps` acknowledged bumps from `cs` on.
async fn bump(ws: &mut Ws, room: &str, cs: u64, bumps: u64) {
    send(ws, json!({"t": "sub", "room": room})).await;
    next_within(ws, Duration::from_secs(10), |v| v["t"] == "sync" && v["room"] == room).await.expect("sync");
    for cs in cs..cs + bumps {
        send(ws, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        let ack = next_within(ws, Duration::from_secs(10), |v| v["t"] == "ack" && v["room"] == room).await;
        assert_eq!(ack.expect("ack")["cs"], cs);
    }
}

/// Polls `node`'s `/readyz` until `want` holds of its answer, for at most `within`.
async fn until_ready_is(
    http: &reqwest::Client,
    node: &Proc,
    within: Duration,
    what: &str,
    want: impl Fn(u16, &Value) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        if let Some((status, body)) = readyz(http, node).await {
            if want(status, &body) {
                return;
            }
            last = Some((status, body));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{}: /readyz never {what} within {within:?} (last answer {last:?})\n{}", node.id, node.log_tail(30));
}

/// Redis ends a node's subscription (`CLIENT KILL … TYPE pubsub`), and the node cannot
/// subscribe again: what it opens to subscribe is never answered. The node hears nothing
/// through Redis: `/readyz` says so (`bus_unverified`) within a few seconds instead of
/// answering 200 while its players' actions go unanswered, as finding 2 saw. Once it can
/// subscribe again it is ready again and its players are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_bus_subscription_is_killed_and_cannot_come_back_is_not_ready_until_it_does() {
    let _serial = SERIAL.lock().await;
    let prefix = support::procs::prefix("ready");
    let url = redis_url();
    let redis_at = url.trim_start_matches("redis://").split('/').next().unwrap().to_owned();
    let proxy = Proxy::start(redis_at).await;
    // Peer links off: every frame between the nodes goes through Redis pub/sub. nb reaches
    // Redis through the proxy.
    let settings = |id: &str, url: &str| {
        Settings::cluster(id, &prefix, url).short_lease().set("ROOMD__CLUSTER__PEER_LISTEN", "off")
    };
    // (The proxy runs on this test's runtime: a node starting through it must not block it.)
    let nodes = tokio::task::block_in_place(|| {
        [
            Proc::spawn("na", settings("na", &url)),
            Proc::spawn("nb", settings("nb", &format!("redis://{}/", proxy.addr))),
        ]
    });
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let room = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "na", json!(null), 40).await;
    // Bob on nb plays na's room: his acks come back through nb's subscription.
    let mut b = connect(&nodes[1], &bob).await;
    bump(&mut b, &room, 1, 3).await;
    assert_eq!(readyz(&http, &nodes[1]).await.map(|(s, _)| s), Some(200));

    // Subscriptions nb opens from now on are never answered; then Redis kills the one it has.
    let subscription = |opening: &[u8]| holds(opening, "SUBSCRIBE");
    let killed = proxy.upstream_where(subscription);
    assert_eq!(killed.len(), 1, "nb has one subscription: {killed:?}");
    proxy.black_hole_new_where(subscription);
    let out = Command::new("redis-cli")
        .args(["-u", &url, "CLIENT", "KILL", "ADDR", &killed[0].to_string(), "TYPE", "pubsub"])
        .output()
        .expect("redis-cli is installed with redis-server");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{out:?}");

    // nb no longer hears its bus, and says so: not ready, and why.
    until_ready_is(&http, &nodes[1], Duration::from_secs(6), "said bus_unverified", |status, body| {
        status == 503 && body["status"] == "bus_unverified"
    })
    .await;
    // na, which subscribed again at once, stays ready.
    assert_eq!(readyz(&http, &nodes[0]).await.map(|(s, b)| (s, b["status"].clone())), Some((200, json!("ready"))));

    // nb can subscribe again: it is ready again, and Bob's resent action is answered.
    proxy.pass_new();
    until_ready_is(&http, &nodes[1], Duration::from_secs(15), "came back", |status, _| status == 200).await;
    let cs = 4;
    let ack = resend_until_acked(&mut b, &room, cs, Duration::from_secs(2), Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("no ack once nb subscribed again\n{}", nodes[1].log_tail(30)));
    assert_eq!((ack["cs"].as_u64(), ack["seq"].as_u64()), (Some(cs), Some(cs)), "{ack}");
    bump(&mut b, &room, cs + 1, 2).await;
}

/// A frame like finding 2's: version 4, a timestamp, one envelope (`Room`) whose first
/// string announces 2^64 − 1 bytes (`fd ff…`, bincode's varint), 20 bytes in all.
/// Published on a node's channel it panicked the task that read the node's subscription
/// ("capacity overflow"), and the node stayed ready and deaf. Whatever the decoder does
/// with it now, the node is never ready and deaf: it hears its bus again (its players are
/// served, `/readyz` 200).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_bus_frame_never_leaves_a_node_ready_and_deaf() {
    let _serial = SERIAL.lock().await;
    let prefix = support::procs::prefix("ready");
    let node =
        |id: &str| Proc::spawn(id, on_test_redis(id, &prefix).short_lease().set("ROOMD__CLUSTER__PEER_LISTEN", "off"));
    let nodes = [node("fa"), node("fb")];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let room = room_on(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], "fa", json!(null), 40).await;
    let mut b = connect(&nodes[1], &bob).await;
    bump(&mut b, &room, 1, 2).await;

    let mut frame = vec![room_actor::cluster::bus::FRAME_VERSION];
    frame.extend_from_slice(&1_700_000_000_000_000u64.to_le_bytes());
    frame.extend_from_slice(&[1, 0, 0xfd]);
    frame.extend_from_slice(&[0xff; 8]);
    assert_eq!(frame.len(), 20);
    let mut cli = Command::new("redis-cli")
        .args(redis_cli_target())
        .args(["-x", bus_publish_verb(), &format!("{prefix}:bus:fb")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli is installed with redis-server");
    cli.stdin.take().unwrap().write_all(&frame).unwrap();
    let out = cli.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "fb's subscription took the frame");

    // Bob on fb resends his action until it is answered: through fb's subscription.
    let cs = 3;
    let ack = resend_until_acked(&mut b, &room, cs, Duration::from_secs(2), Duration::from_secs(20)).await;
    let ready = readyz(&http, &nodes[1]).await;
    let ack = ack.unwrap_or_else(|| panic!("fb is deaf (readyz {ready:?})\n{}", nodes[1].log_tail(30)));
    assert_eq!((ack["cs"].as_u64(), ack["seq"].as_u64()), (Some(cs), Some(cs)), "{ack}");
    until_ready_is(&http, &nodes[1], Duration::from_secs(10), "answered 200", |status, _| status == 200).await;
    bump(&mut b, &room, cs + 1, 2).await;
}
