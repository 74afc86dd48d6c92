#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Hostile clients against a real node: half-open sockets, slow readers, bell spam,
//! deeply nested JSON, acting in another player's name, and a property test that throws
//! arbitrary frames at one live socket.

mod support;

use futures_util::{SinkExt, StreamExt};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use support::{start_server, start_server_with, Server, User, WsClient, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

fn bump() -> Value {
    json!({"type": "bump"})
}

/// A started tally room that never ends, with `host` and `others` seated.
async fn tally_room(server: &Server, host: &User, others: &[&User]) -> (String, String) {
    server.started_room("tally", json!({"target": null}), host, others).await
}

/// `roomd_sessions` from `/metrics`.
async fn sessions_gauge(server: &Server) -> i64 {
    let text = server.http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("roomd_sessions "))
        .unwrap_or_else(|| panic!("no roomd_sessions in /metrics:\n{text}"));
    line["roomd_sessions ".len()..].trim().parse::<f64>().unwrap() as i64
}

/// A WebSocket upgrade done by hand on a raw TCP stream; the caller then never reads or
/// writes again, so it never answers a ping (a half-open client).
async fn silent_socket(server: &Server, token: &str) -> TcpStream {
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let req = format!(
        "GET /ws?token={token} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tokio::time::timeout(WAIT, s.read_exact(&mut byte)).await.expect("upgrade answer in time").unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "upgrade accepted: {head}");
    s
}

#[tokio::test]
async fn a_client_that_never_answers_pings_is_closed_after_the_timeout() {
    let server = start_server_with(|s| {
        s.ws.heartbeat_s = 1;
        s.ws.client_timeout_s = 2;
        s.ws.max_sockets_per_user = 1;
    });
    let silent_user = server.guest("침묵").await;
    let live_user = server.guest("수다").await;
    let mut live = server.ws(&live_user).await;
    let _silent = silent_socket(&server, &silent_user.token).await;
    assert_eq!(sessions_gauge(&server).await, 2, "both sockets are open");
    // The cap of one socket per user holds while the silent socket is open.
    assert!(WsClient::connect(server.addr, &silent_user.token).await.is_err(), "second socket refused");

    // Wait for the server to give up on the silent socket, while the live client keeps
    // reading (and so answers every ping).
    let deadline = Instant::now() + WAIT;
    while sessions_gauge(&server).await > 1 {
        assert!(Instant::now() < deadline, "silent socket never closed");
        assert_eq!(live.next_within(Duration::from_millis(200)).await, None, "nothing for the live client");
        assert!(live.closed.is_none(), "a client that answers pings stays open");
    }
    assert_eq!(sessions_gauge(&server).await, 1);
    // The slot is free again, and the live client (silent itself, but answering pings)
    // is still served after more than `client_timeout_s`.
    let mut again = server.ws(&silent_user).await;
    again.send(json!({"t": "sub", "room": "r_nowhere_again"})).await;
    assert_eq!(again.next_of("error").await["code"], "unknown_room");
    live.send(json!({"t": "sub", "room": "r_nowhere"})).await;
    let e = live.next_of("error").await;
    assert_eq!((e["code"].as_str(), e["room"].as_str()), (Some("unknown_room"), Some("r_nowhere")), "{e}");
}

/// How many bumps the slow-reader test makes before it looks at what the silent
/// spectator got. Measured (4 KiB client receive buffer, Linux `tcp_wmem` max 4 MiB):
/// the spectator is dropped after about 13,000 updates of ~150 bytes (the kernel's send
/// buffer, actix's write buffer, then the session's 1,024-message mailbox fill up); with
/// 12,000 bumps it was never dropped. A host with a larger `tcp_wmem` needs more.
const SLOW_READER_BUMPS: u64 = 40_000;

#[tokio::test]
async fn a_spectator_that_never_reads_is_dropped_as_a_slow_consumer_while_play_goes_on() {
    let server = start_server_with(|s| {
        s.ws.rate_per_s = 1_000_000;
        s.ws.burst = 1_000_000;
    });
    let host = server.guest("빠른손").await;
    let watcher = server.guest("안읽음").await;
    let (room, game_pk) = tally_room(&server, &host, &[]).await;

    // The spectator: a small receive buffer, subscribed, then never read again.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(server.addr).await.unwrap();
    let url = format!("ws://{}/ws?token={}", server.addr, watcher.token);
    let (mut slow, _) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    slow.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await.unwrap();
    loop {
        let m = tokio::time::timeout(WAIT, slow.next()).await.expect("sync in time").unwrap().unwrap();
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["t"] == "sync" {
                break;
            }
        }
    }

    // The player bumps as fast as the server answers (batches of pipelined acts); every
    // act is acknowledged.
    let mut player = server.ws(&host).await;
    // (Small batches: a room's mailbox holds 16 messages and a full one answers
    // `room_unavailable`.)
    let batch = 10;
    let mut cs = 0;
    while cs < SLOW_READER_BUMPS {
        let first = cs + 1;
        for _ in 0..batch {
            cs += 1;
            player.send(json!({"t": "act", "room": room, "cs": cs, "a": bump()})).await;
        }
        for want in first..=cs {
            let a = player.next_where(|m| m["cs"] == want).await;
            assert_eq!((a["t"].as_str(), a["seq"].as_u64()), (Some("ack"), Some(want)), "{a}");
        }
    }
    assert_eq!(server.entries(&game_pk).await as u64, SLOW_READER_BUMPS);

    // Now the spectator reads what it got: updates, then `slow_consumer`, then no more
    // updates of this room although the game went on.
    let mut updates = 0u64;
    let mut last_seq = 0;
    let mut dropped_at = None;
    let mut after_drop = Vec::new();
    let mut closed = false;
    loop {
        let frame = match tokio::time::timeout(Duration::from_secs(2), slow.next()).await {
            Ok(Some(Ok(f))) => f,
            Ok(Some(Err(_)) | None) => {
                closed = true;
                break;
            }
            Err(_) => break,
        };
        let Message::Text(t) = frame else { continue };
        let v: Value = serde_json::from_str(t.as_str()).unwrap();
        if dropped_at.is_some() {
            after_drop.push(v);
        } else if v["t"] == "update" {
            updates += 1;
            last_seq = v["seq"].as_u64().unwrap();
        } else if v["t"] == "error" && v["code"] == "slow_consumer" {
            assert_eq!(v["room"], room.as_str(), "{v}");
            dropped_at = Some(last_seq);
        }
    }
    println!(
        "slow spectator: {updates} updates received, dropped after seq {dropped_at:?} of {SLOW_READER_BUMPS}, \
         socket closed: {closed}"
    );
    // The room asks the session to close after `slow_consumer` (`ToClient::close`).
    assert!(closed, "the dropped slow reader's socket is closed, not left open");
    let dropped_at = dropped_at.expect("the slow spectator was dropped with slow_consumer");
    assert!(dropped_at < SLOW_READER_BUMPS, "dropped before the end of the game");
    assert!(
        after_drop.iter().all(|m| m["room"] != room.as_str()),
        "nothing of the room after the drop: {:?}",
        after_drop.first()
    );
    // The player is still served.
    cs += 1;
    player.act_ok(&room, cs, bump()).await;
}

fn decks(view: &Value) -> BTreeMap<String, u64> {
    view["players"].as_object().unwrap().iter().map(|(k, p)| (k.clone(), p["deck"].as_u64().unwrap())).collect()
}

/// Whether the public tops show exactly five of one fruit (a ring is right).
fn five(view: &Value) -> bool {
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    for p in view["players"].as_object().unwrap().values() {
        if let Some(top) = p["top"].as_object() {
            *sums.entry(top["fruit"].as_str().unwrap().to_owned()).or_default() += top["count"].as_u64().unwrap();
        }
    }
    sums.values().any(|s| *s == 5)
}

fn ring(view: &Value) -> Value {
    json!({"type": "ring", "version": view["tableVersion"].as_u64().unwrap()})
}

#[tokio::test]
async fn bell_spam_during_the_lockout_is_refused_as_locked_without_further_penalty() {
    let server = start_server();
    let a = server.guest("도윤").await;
    let b = server.guest("종쟁이").await;
    let options = json!({
        "flipSeconds": 8,
        "flipGuardMs": 400,
        "wrongRingLockoutMs": 2000,
        "timeLimitMin": null,
        "leftoverCards": "remove",
        "showRtt": false,
    });
    let (room, game_pk) = server.started_room("halli-galli", options, &a, &[&b]).await;
    let mut ca = server.ws(&a).await;
    ca.sub(&room).await;
    let mut cb = server.ws(&b).await;
    cb.sub(&room).await;
    let v = cb.wait_view(&room, |_, v| v["phase"] == "playing").await;
    assert!(!five(&v), "no five on the table: a ring now is wrong: {v}");
    let before = decks(&v);

    // One wrong ring: penalised once, and the bell locks for B.
    let cs = cb.cs();
    let seq = cb.act_ok(&room, cs, ring(&v)).await;
    let locked = cb.wait_view(&room, |s, v| s >= seq && v["players"][&b.id]["locked"] == true).await;
    assert!(decks(&locked)[&b.id] < before[&b.id], "the wrong ring is penalised: {before:?} → {locked:?}");
    let locked_until = locked["players"][&b.id]["lockedUntil"].as_i64().unwrap();
    let penalised = decks(&locked);
    let entries = server.entries(&game_pk).await;

    // A flood of rings (pipelined, on the current table) while locked: every one that
    // the room handles before `lockedUntil` is refused as `locked`.
    let mut refused = 0;
    for _ in 0..5 {
        // Chunks of ten: a room's mailbox holds 16 messages.
        let flood: Vec<u64> = (0..10).map(|_| cb.cs()).collect();
        for cs in &flood {
            cb.send(json!({"t": "act", "room": room, "cs": cs, "a": ring(&locked)})).await;
        }
        for cs in &flood {
            let r = cb.next_where(|m| m["cs"] == *cs && m["room"] == room.as_str()).await;
            assert_eq!((r["t"].as_str(), r["code"].as_str()), (Some("reject"), Some("locked")), "{r}");
            refused += 1;
        }
    }
    assert_eq!(refused, 50);
    assert_eq!(server.entries(&game_pk).await, entries, "a locked ring logs nothing");
    let fresh = cb.sub(&room).await["view"].clone();
    assert_eq!(decks(&fresh), penalised, "no penalty for the flood");

    // Ringing on until the lock ends: only `locked` until then, and the first ring that
    // is not refused as locked is handled at or after `lockedUntil` (server time).
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "the lock never ended");
        let v = cb.view(&room);
        let cs = cb.cs();
        let r = cb.act(&room, cs, ring(&v)).await;
        if r["code"] == "locked" {
            assert_eq!(decks(&cb.sub(&room).await["view"]), penalised, "still no penalty");
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let now = cb.sub(&room).await["view"]["now"].as_i64().unwrap();
        assert!(now >= locked_until, "unlocked at {now}, locked until {locked_until}: {r}");
        break;
    }
}

/// `depth` nested arrays around `inner`.
fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

#[tokio::test]
async fn deeply_nested_json_is_refused_and_the_socket_and_room_keep_working() {
    let server = start_server();
    let a = server.guest("도윤").await;
    let (room, game_pk) = tally_room(&server, &a, &[]).await;
    let mut c = server.ws(&a).await;
    c.sub(&room).await;

    // As a whole frame, as the action, and as a nested object.
    let deep_action = format!(r#"{{"t":"act","room":"{room}","cs":1,"a":{}}}"#, nested(10_000, "1"));
    let deep_object = format!("{}1{}", r#"{"a":"#.repeat(10_000), "}".repeat(10_000));
    for frame in [nested(10_000, ""), deep_action, deep_object] {
        c.send_text(frame).await;
        let e = c.next_where(|m| matches!(m["t"].as_str(), Some("error" | "reject"))).await;
        assert_eq!(e["code"], "bad_message", "{e}");
    }
    // Deep but within the parser's limit: it reaches the room, which refuses the shape.
    let r = c.act(&room, 2, serde_json::from_str(&nested(100, r#"{"type":"bump"}"#)).unwrap()).await;
    assert_eq!((r["t"].as_str(), r["code"].as_str()), (Some("reject"), Some("bad_action")), "{r}");

    assert!(c.closed.is_none(), "the socket stays open");
    let seq = c.act_ok(&room, 3, bump()).await;
    assert_eq!(seq, 1, "only the valid act was applied");
    assert_eq!(server.entries(&game_pk).await, 1);
    assert_eq!(c.wait_seq(&room, 1).await["count"], 1);
}

#[tokio::test]
async fn an_act_cannot_name_another_actor_and_applies_as_the_token_user() {
    let server = start_server();
    let a = server.guest("도윤").await;
    let b = server.guest("서연").await;
    let (room, game_pk) = tally_room(&server, &a, &[&b]).await;
    let mut ca = server.ws(&a).await;
    ca.sub(&room).await;
    let mut cb = server.ws(&b).await;
    cb.sub(&room).await;

    for field in ["player", "actor", "by", "user", "userId", "as"] {
        for who in [json!(b.id), json!(a.id), json!({"userId": b.id})] {
            let a_for_b = json!({"type": "bump", field: who});
            let cs = ca.cs();
            let r = ca.act(&room, cs, a_for_b.clone()).await;
            assert_eq!((r["t"].as_str(), r["code"].as_str()), (Some("reject"), Some("bad_action")), "{a_for_b}: {r}");
        }
    }
    assert_eq!(server.entries(&game_pk).await, 0, "nothing applied");

    let cs = ca.cs();
    let seq = ca.act_ok(&room, cs, bump()).await;
    for c in [&mut ca, &mut cb] {
        let v = c.wait_seq(&room, seq).await;
        assert_eq!((v["count"].as_u64(), v["last"].as_str()), (Some(1), Some(a.id.as_str())), "{v}");
    }
    let cs = cb.cs();
    let seq = cb.act_ok(&room, cs, bump()).await;
    let v = ca.wait_seq(&room, seq).await;
    assert_eq!((v["count"].as_u64(), v["last"].as_str()), (Some(2), Some(b.id.as_str())), "{v}");
}

/// Arbitrary JSON, with the protocol's own words mixed in so that some values come
/// close to real messages.
fn arb_json() -> impl Strategy<Value = Value> {
    let word = prop_oneof![
        Just("sub"),
        Just("unsub"),
        Just("act"),
        Just("bump"),
        Just("ring"),
        Just("flip"),
        Just("t"),
        Just("room"),
        Just("cs"),
        Just("a"),
        Just("type"),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        word.clone().prop_map(Value::from),
    ];
    let key = prop_oneof![word.prop_map(str::to_owned), "\\PC{0,8}"];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Objects shaped like client messages: each of `t`, `room`, `cs`, `a` present or not,
/// right or wrong.
fn arb_message(room: String) -> impl Strategy<Value = Value> {
    let t = prop_oneof![Just(json!("sub")), Just(json!("unsub")), Just(json!("act")), arb_json()];
    let r = prop_oneof![Just(json!(room)), Just(json!("r_nowhere")), arb_json()];
    let cs = prop_oneof![any::<u64>().prop_map(Value::from), arb_json()];
    let a = prop_oneof![Just(json!({"type": "bump"})), arb_json()];
    (t, r, cs, a, any::<u8>()).prop_map(|(t, r, cs, a, present)| {
        let mut o = serde_json::Map::new();
        for (i, (k, v)) in [("t", t), ("room", r), ("cs", cs), ("a", a)].into_iter().enumerate() {
            if present & (1 << i) != 0 {
                o.insert(k.to_owned(), v);
            }
        }
        Value::Object(o)
    })
}

/// What a frame may be answered with: `error`/`reject` for anything, and the normal
/// traffic of the one real room (a fuzzed frame can be a valid `sub` or `act`).
fn allowed_answer(m: &Value, room: &str) -> bool {
    match m["t"].as_str() {
        Some("error" | "reject") => true,
        Some("sync" | "update" | "ack" | "room" | "result") => m["room"] == room,
        _ => false,
    }
}

#[test]
fn arbitrary_frames_on_one_socket_get_errors_or_nothing_and_the_socket_keeps_working() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let server = start_server();
    let (a, room) = rt.block_on(async {
        let a = server.guest("퍼저").await;
        let (room, _) = tally_room(&server, &a, &[]).await;
        (a, room)
    });
    let client = tokio::sync::Mutex::new(rt.block_on(server.ws(&a)));
    let sentinel = std::cell::Cell::new(0u64);
    let frames = prop_oneof![
        any::<String>(),
        arb_json().prop_map(|v| v.to_string()),
        arb_message(room.clone()).prop_map(|v| v.to_string()),
    ];
    let config = Config { cases: 200, failure_persistence: None, max_shrink_iters: 64, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&frames, |frame| {
        rt.block_on(async {
            let mut c = client.lock().await;
            c.send_text(frame.clone()).await;
            // A marker frame after it: everything before the marker's answer is the
            // answer to the fuzzed frame.
            sentinel.set(sentinel.get() + 1);
            let marker = format!("r_marker_{}", sentinel.get());
            c.send(json!({"t": "sub", "room": marker})).await;
            loop {
                let Some(m) = c.next_within(WAIT).await else {
                    return Err(TestCaseError::fail(format!("no answer, closed: {:?}", c.closed)));
                };
                if m["t"] == "error" && m["room"] == marker.as_str() {
                    prop_assert_eq!(&m["code"], "unknown_room");
                    return Ok(());
                }
                prop_assert!(allowed_answer(&m, &room), "{} answered with {}", frame, m);
            }
        })
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    rt.block_on(async {
        let mut c = client.lock().await;
        assert!(c.closed.is_none());
        let cs = u64::MAX - 1;
        c.act_ok(&room, cs, bump()).await;
    });
}
