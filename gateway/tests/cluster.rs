#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Cluster mode with real processes: three `roomd` nodes and the test Redis
//! (`REDIS_URL`, started by ./scripts/test; these fail, never skip, without it), all on
//! 127.0.0.1. Each test uses its own key prefix, so tests never see each other's rooms.

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const SECRET: &str = "cluster-test-secret";

struct Node {
    child: Child,
    base: String,
}

impl Node {
    fn start(id: &str, prefix: &str) -> Node {
        let url = std::env::var("REDIS_URL").expect("REDIS_URL is not set: run the tests with ./scripts/test");
        let mut child = Command::new(env!("CARGO_BIN_EXE_roomd"))
            .env("ROOMD__HTTP__PORT", "0")
            .env("ROOMD__HTTP__WORKERS", "1")
            .env("ROOMD__NODE__ID", id)
            .env("ROOMD__REDIS__URL", &url)
            .env("ROOMD__REDIS__PREFIX", prefix)
            .env("ROOMD__AUTH__SECRET", SECRET)
            .env("ROOMD__CLUSTER__LEASE_MS", "1500")
            .env("ROOMD__CLUSTER__HEARTBEAT_MS", "300")
            .env("ROOMD__LOG__LEVEL", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("roomd starts");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Node { child, base: format!("http://{addr}") }
    }

    fn ws(&self) -> String {
        self.base.replace("http://", "ws://")
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn prefix() -> String {
    format!("roomd-it-{}", engine::Seed::from_os().unwrap().to_hex())
}

async fn token(http: &reqwest::Client, node: &Node, name: &str) -> (String, String) {
    let v: Value = http
        .post(format!("{}/api/session", node.base))
        .json(&json!({"name": name}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (v["userId"].as_str().unwrap().into(), v["token"].as_str().unwrap().into())
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn connect(node: &Node, token: &str) -> Ws {
    tokio_tungstenite::connect_async(format!("{}/ws?token={token}", node.ws())).await.unwrap().0
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

/// The next message matching `pred`, within `secs`.
async fn next_where(ws: &mut Ws, secs: u64, pred: impl Fn(&Value) -> bool) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if pred(&v) {
                    return Some(v);
                }
            }
            Ok(Some(Ok(_))) => {}
            _ => return None,
        }
    }
}

/// Creates a tally room through `via`, seats `others`, starts it; returns (room, owner).
async fn tally_room(
    http: &reqwest::Client,
    via: &Node,
    host: &str,
    others: &[(&Node, &str)],
    target: Value,
) -> (String, String) {
    let created: Value = http
        .post(format!("{}/api/rooms", via.base))
        .bearer_auth(host)
        .json(&json!({"game": "tally", "options": {"target": target}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let room = created["roomId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    for (node, token) in others {
        let r = http.post(format!("{}/api/rooms/{room}/seats", node.base)).bearer_auth(token).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    let started = http.post(format!("{}/api/rooms/{room}/start", via.base)).bearer_auth(host).send().await.unwrap();
    assert_eq!(started.status(), 200, "{}", started.text().await.unwrap());
    let info: Value = http
        .get(format!("{}/api/rooms/{room}", via.base))
        .bearer_auth(host)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (room, info["node"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn clients_on_two_nodes_play_a_room_owned_by_a_third() {
    let prefix = prefix();
    let nodes = [Node::start("na", &prefix), Node::start("nb", &prefix), Node::start("nc", &prefix)];
    tokio::time::sleep(Duration::from_millis(700)).await; // a heartbeat or two: everyone sees everyone
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    // Find a room whose owner is neither of the two nodes the players use.
    let mut found = None;
    for _ in 0..12 {
        let (room, owner) = tally_room(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], json!(10)).await;
        if owner == "nc" {
            found = Some(room);
            break;
        }
    }
    let room = found.expect("some room lands on nc");
    let mut a = connect(&nodes[0], &alice).await;
    let mut b = connect(&nodes[1], &bob).await;
    for ws in [&mut a, &mut b] {
        send(ws, json!({"t": "sub", "room": room})).await;
        let sync = next_where(ws, 10, |v| v["t"] == "sync").await.expect("sync through the owner");
        assert_eq!(sync["seq"], 0);
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
}

#[tokio::test]
async fn sigkill_of_the_owner_loses_no_acknowledged_action() {
    let prefix = prefix();
    let mut nodes = [Node::start("fa", &prefix), Node::start("fb", &prefix), Node::start("fc", &prefix)];
    tokio::time::sleep(Duration::from_millis(700)).await;
    let http = reqwest::Client::new();
    let (_, alice) = token(&http, &nodes[0], "alice").await;
    let (_, bob) = token(&http, &nodes[1], "bob").await;
    let mut found = None;
    for _ in 0..12 {
        let (room, owner) = tally_room(&http, &nodes[0], &alice, &[(&nodes[1], &bob)], json!(null)).await;
        if owner == "fc" {
            found = Some(room);
            break;
        }
    }
    let room = found.expect("some room lands on fc");
    let mut a = connect(&nodes[0], &alice).await;
    send(&mut a, json!({"t": "sub", "room": room})).await;
    next_where(&mut a, 10, |v| v["t"] == "sync").await.expect("sync");
    let mut acked = Vec::new();
    for cs in 1..=5u64 {
        send(&mut a, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        let ack = next_where(&mut a, 10, |v| v["t"] == "ack").await.expect("ack");
        acked.push(ack["seq"].as_u64().unwrap());
    }
    // The owner dies mid-game; alice's gateway (fa) lives.
    let killed_at = tokio::time::Instant::now();
    nodes[2].kill();
    // Alice keeps resending cs 6 until the room answers from its new owner.
    let mut resumed = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while resumed.is_none() && tokio::time::Instant::now() < deadline {
        send(&mut a, json!({"t": "act", "room": room, "cs": 6, "a": {"type": "bump"}})).await;
        resumed = next_where(&mut a, 1, |v| v["t"] == "ack" && v["cs"] == 6).await;
    }
    let ack = resumed.expect("the room resumed on a live node");
    eprintln!("failover: first ack {:?} after the kill", killed_at.elapsed());
    assert_eq!(ack["seq"], 6, "the five acknowledged actions survived, none applied twice");
    // A retry of an old cs is deduplicated from the log.
    send(&mut a, json!({"t": "act", "room": room, "cs": 3, "a": {"type": "bump"}})).await;
    let again = next_where(&mut a, 10, |v| v["t"] == "ack" && v["cs"] == 3).await.expect("ack for retried cs");
    assert_eq!(again["seq"], acked[2]);
    let info: Value = http
        .get(format!("{}/api/rooms/{room}", nodes[1].base))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(info["node"], "fc");
}
