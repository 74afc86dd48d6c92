#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Quick chat (`PROTOCOL.md`, Cockroach Poker `quickChat`, issue 59) on one embedded node,
//! over real WebSockets: a seated player's phrase reaches every subscriber, spectators
//! included; spectators, unknown phrases, a room with the option off, a game without
//! quick chat and a second phrase within 2 s are refused with their codes; nothing of it
//! reaches the game log. Across nodes: `cluster.rs`,
//! `quick_chat_reaches_watchers_on_another_node_and_refusals_come_back`.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::{start_server, WsClient};

/// The next `chat` or `error` frame about `room` (skipping updates and syncs).
async fn next_chat_or_error(ws: &mut WsClient, room: &str) -> Value {
    ws.next_where(|m| matches!(m["t"].as_str(), Some("chat" | "error")) && m["room"] == room).await
}

/// No `chat` frame about `room` arrives within `wait`.
async fn no_chat(ws: &mut WsClient, room: &str, wait: Duration) {
    let deadline = tokio::time::Instant::now() + wait;
    while let Some(left) = deadline.checked_duration_since(tokio::time::Instant::now()) {
        match ws.next_within(left).await {
            Some(m) if m["t"] == "chat" && m["room"] == room => panic!("unexpected chat: {m}"),
            Some(_) => {}
            None => return,
        }
    }
}

#[tokio::test]
async fn a_players_phrase_reaches_every_watcher_and_never_the_log() {
    let server = start_server();
    let (alice, bob, carol) = (server.guest("alice").await, server.guest("bob").await, server.guest("carol").await);
    let (room, game_pk) = server.started_room("cockroach-poker", json!({}), &alice, &[&bob]).await;
    let (mut a, mut b, mut c) = (server.ws(&alice).await, server.ws(&bob).await, server.ws(&carol).await);
    for ws in [&mut a, &mut b, &mut c] {
        ws.sub(&room).await;
    }
    let entries = server.entries(&game_pk).await;

    a.send(json!({"t": "chat", "room": room, "phrase": "really"})).await;
    for ws in [&mut a, &mut b, &mut c] {
        let chat = next_chat_or_error(ws, &room).await;
        assert_eq!(chat, json!({"t": "chat", "room": room, "from": alice.id, "phrase": "really"}));
    }
    b.send(json!({"t": "chat", "room": room, "phrase": "doubt"})).await;
    for ws in [&mut a, &mut b, &mut c] {
        let chat = next_chat_or_error(ws, &room).await;
        assert_eq!((chat["from"].as_str(), chat["phrase"].as_str()), (Some(bob.id.as_str()), Some("doubt")));
    }

    // One phrase per 2 s per player: alice's second is refused, to her only.
    a.send(json!({"t": "chat", "room": room, "phrase": "doubt"})).await;
    let refused = next_chat_or_error(&mut a, &room).await;
    assert_eq!((refused["t"].as_str(), refused["code"].as_str()), (Some("error"), Some("rate_limited")), "{refused}");
    assert!(refused["reason"].as_str().is_some_and(|r| !r.is_empty()));
    // A spectator only watches; an unknown phrase (no free text) is refused.
    c.send(json!({"t": "chat", "room": room, "phrase": "really"})).await;
    assert_eq!(next_chat_or_error(&mut c, &room).await["code"], "not_seated");
    b.send(json!({"t": "chat", "room": room, "phrase": "내 패는 쥐야"})).await;
    assert_eq!(next_chat_or_error(&mut b, &room).await["code"], "bad_message");
    for ws in [&mut a, &mut b, &mut c] {
        no_chat(ws, &room, Duration::from_millis(300)).await;
    }

    // After 2 s alice may speak again.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    a.send(json!({"t": "chat", "room": room, "phrase": "nice"})).await;
    assert_eq!(next_chat_or_error(&mut c, &room).await["phrase"], "nice");

    // Chat is not an input: the game's log, seq and views are as they were.
    assert_eq!(server.entries(&game_pk).await, entries);
    assert_eq!(c.seq(&room), entries as u64);
}

#[tokio::test]
async fn chat_is_refused_where_it_is_off() {
    let server = start_server();
    let (alice, bob) = (server.guest("alice").await, server.guest("bob").await);
    // The room's option is off.
    let off = server.create_room(&alice, "cockroach-poker", json!({"quickChat": false}), 60).await;
    server.seat(&off, &bob).await;
    // Halli Galli has no quick chat at all (no `chatPhrases` in the catalog).
    let halli = server.create_room(&alice, "halli-galli", json!({}), 60).await;
    // A waiting room with the option on: seated players may talk before the start.
    let waiting = server.create_room(&alice, "cockroach-poker", json!({}), 60).await;
    let (mut a, mut b) = (server.ws(&alice).await, server.ws(&bob).await);
    for room in [&off, &halli, &waiting] {
        a.sub(room).await;
    }
    b.sub(&off).await;
    for room in [&off, &halli] {
        a.send(json!({"t": "chat", "room": room, "phrase": "really"})).await;
        let refused = next_chat_or_error(&mut a, room).await;
        assert_eq!((refused["t"].as_str(), refused["code"].as_str()), (Some("error"), Some("chat_off")), "{refused}");
    }
    no_chat(&mut b, &off, Duration::from_millis(300)).await;
    a.send(json!({"t": "chat", "room": waiting, "phrase": "trust"})).await;
    assert_eq!(next_chat_or_error(&mut a, &waiting).await["t"], "chat");

    // The catalog names the phrases of the game that has quick chat, and only there.
    let (status, games) = server.get("/api/games", Some(&alice.token)).await;
    assert_eq!(status, 200);
    let game = |id: &str| games.as_array().unwrap().iter().find(|g| g["id"] == id).unwrap().clone();
    let phrases = game("cockroach-poker")["chatPhrases"].as_array().unwrap().clone();
    let keys: Vec<&str> = phrases.iter().map(|p| p["key"].as_str().unwrap()).collect();
    assert!(keys.contains(&"really") && keys.contains(&"doubt"), "{keys:?}");
    assert!(phrases.iter().all(|p| p["label"].as_str().is_some_and(|l| !l.is_empty())));
    assert!(game("halli-galli").get("chatPhrases").is_none());

    // An unknown room is said so.
    a.send(json!({"t": "chat", "room": "r_nosuchroom1", "phrase": "really"})).await;
    let unknown = a.next_where(|m| m["room"] == "r_nosuchroom1").await;
    assert_eq!(unknown["code"], "unknown_room", "{unknown}");
}
