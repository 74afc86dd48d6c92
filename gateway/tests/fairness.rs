#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The bell across nodes (issue #15): a ring is judged by when it entered the cluster,
//! not by when it reached the room's owner. Real processes: two `roomd` nodes and a Redis
//! of the test's own, each node reaching it through a TCP relay of the test's that can
//! hold what the node sends for a while (a far-away node, on loopback). A player on the
//! slow node rings first; a player on the owner's node rings 15 ms later but reaches the
//! room first. With `latencyComp=light` the first ringer wins, whichever node owns the
//! room. These fail, never skip, without `redis-server`.

mod support;

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::procs::{create_room, get_json, token, until_all_see, OwnRedis, Proc, Settings};
use support::{hg_five, WsClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A relay to `upstream` that holds every byte a client sends for `delay` (what it
/// receives back passes at once). Order is kept: chunks leave in the order they came.
struct SlowLink {
    port: u16,
    delay_ms: Arc<AtomicU64>,
}

impl SlowLink {
    async fn start(upstream: SocketAddr) -> SlowLink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = delay_ms.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let delay = delay.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(upstream).await else { return };
                    let (mut from_client, mut to_client) = inbound.into_split();
                    let (mut from_server, mut to_server) = outbound.into_split();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                    });
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
                    tokio::spawn(async move {
                        while let Some((due, bytes)) = rx.recv().await {
                            tokio::time::sleep_until(due).await;
                            if to_server.write_all(&bytes).await.is_err() {
                                return;
                            }
                        }
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = from_client.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        let due = tokio::time::Instant::now() + Duration::from_millis(delay.load(Ordering::Relaxed));
                        if tx.send((due, buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        SlowLink { port, delay_ms }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn set_delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::Relaxed);
    }
}

const HOP_MS: u64 = 30;
const LATER_MS: u64 = 15;

/// A started two-player Halli Galli room with `latencyComp=light` owned by `owner`
/// (`host` on `nodes[0]`, `guest` seated through `nodes[1]`).
async fn room_owned_by(http: &reqwest::Client, nodes: &[&Proc; 2], host: &str, guest: &str, owner: &str) -> String {
    let options = json!({"latencyComp": "light", "flipSeconds": 8, "timeLimitMin": null, "showRtt": false});
    for _ in 0..24 {
        let room = create_room(http, &nodes[0].base, host, json!({"game": "halli-galli", "options": options})).await;
        let info: Value = get_json(http, format!("{}/api/rooms/{room}", nodes[0].base), host).await;
        if info["node"] != owner {
            continue;
        }
        let r = http.post(format!("{}/api/rooms/{room}/seats", nodes[1].base)).bearer_auth(guest).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        let r = http.post(format!("{}/api/rooms/{room}/start", nodes[0].base)).bearer_auth(host).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        return room;
    }
    panic!("no room landed on {owner}");
}

fn version(view: &Value) -> u64 {
    view["tableVersion"].as_u64().unwrap()
}

/// Flips until both players see five of a fruit at the same table version: that version.
async fn until_five(room: &str, players: &mut [(String, WsClient); 2]) -> u64 {
    for _ in 0..200 {
        let v = players[0].1.view(room);
        assert_eq!(v["phase"], "playing", "the game is still on: {v}");
        let ver = version(&v);
        for (_, c) in players.iter_mut() {
            c.wait_view(room, |_, v| version(v) >= ver).await;
        }
        if hg_five(&v) {
            return ver;
        }
        let turn = players.iter().position(|(id, _)| v["turn"] == id.as_str()).expect("a player's turn");
        let cs = players[turn].1.cs();
        let answer = players[turn].1.act(room, cs, json!({"type": "flip"})).await;
        assert_eq!(answer["t"], "ack", "the turn player flips: {answer}");
        for (_, c) in players.iter_mut() {
            c.wait_view(room, |_, v| version(v) > ver || v["phase"] != "playing").await;
        }
    }
    panic!("no five in 200 flips");
}

/// One race: `slow` (on the node whose link holds its sends) rings first, `fast` (on the
/// owner's node) `LATER_MS` after; the winner's id.
async fn race(room: &str, players: &mut [(String, WsClient); 2], slow: usize) -> String {
    let ver = until_five(room, players).await;
    let fast = 1 - slow;
    let (cs_slow, cs_fast) = (players[slow].1.cs(), players[fast].1.cs());
    let ring = json!({"type": "ring", "version": ver});
    players[slow].1.send(json!({"t": "act", "room": room, "cs": cs_slow, "a": ring})).await;
    tokio::time::sleep(Duration::from_millis(LATER_MS)).await;
    players[fast].1.send(json!({"t": "act", "room": room, "cs": cs_fast, "a": ring})).await;
    for (i, cs) in [(slow, cs_slow), (fast, cs_fast)] {
        let answer = players[i]
            .1
            .next_where(|m| matches!(m["t"].as_str(), Some("ack" | "reject" | "error")) && m["cs"] == cs)
            .await;
        assert_eq!(answer["t"], "ack", "both rings are in the window: {answer}");
    }
    let after = players[0].1.wait_view(room, |_, v| v["lastBell"]["correct"] == true).await;
    after["lastBell"]["player"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_earlier_ring_at_its_gateway_wins_across_nodes_whichever_node_owns_the_room() {
    let redis = OwnRedis::start();
    let upstream: SocketAddr = format!("127.0.0.1:{}", redis.port).parse().unwrap();
    let links = [SlowLink::start(upstream).await, SlowLink::start(upstream).await];
    let prefix = support::procs::prefix("fair");
    // No pings during the test: a test client answers one only when it reads, so its
    // RTT would be noise; with none known, a ring's credit is its bus hop alone.
    let quiet =
        |id: &str, link: &SlowLink| Settings::cluster(id, &prefix, &link.url()).set("ROOMD__WS__HEARTBEAT_S", "600");
    let nodes = [Proc::spawn("fair-1", quiet("fair-1", &links[0])), Proc::spawn("fair-2", quiet("fair-2", &links[1]))];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();

    for (owner, slow_node) in [(0usize, 1usize), (1, 0)] {
        let (alice_id, alice) = token(&http, &nodes[0], "alice").await;
        let (bob_id, bob) = token(&http, &nodes[1], "bob").await;
        let room = room_owned_by(&http, &[&nodes[0], &nodes[1]], &alice, &bob, &format!("fair-{}", owner + 1)).await;
        let mut players = [
            (alice_id, WsClient::connect(nodes[0].addr(), &alice).await.unwrap()),
            (bob_id, WsClient::connect(nodes[1].addr(), &bob).await.unwrap()),
        ];
        for (_, c) in players.iter_mut() {
            c.sub(&room).await;
            c.wait_view(&room, |_, v| v["phase"] == "playing" && v["turn"].is_string()).await;
        }
        links[slow_node].set_delay(HOP_MS);
        // The player on the slow node is `slow_node` (alice on node 1, bob on node 2).
        let winner = race(&room, &mut players, slow_node).await;
        links[slow_node].set_delay(0);
        assert_eq!(
            winner,
            players[slow_node].0,
            "the ring that entered the cluster first wins (owner fair-{}, the first ringer's node {} ms away)",
            owner + 1,
            HOP_MS
        );
    }
}
