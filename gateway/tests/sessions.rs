#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Sessions over real WebSockets: reconnecting, retried actions, and bad input of every
//! kind (socket messages, frames, tokens, the HTTP API, flooding), each answered with its
//! precise error and changing nothing.

mod support;

use gateway::auth::Claims;
use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};
use support::{start_server, start_server_with, test_settings, without_now, Server, User, WsClient};
use tokio_tungstenite::tungstenite;

fn bump() -> Value {
    json!({"type": "bump"})
}

/// A started tally room (never ends) with `host` alone in it.
async fn tally_room(server: &Server, host: &User) -> (String, String) {
    server.started_room("tally", json!({"target": null}), host, &[]).await
}

#[tokio::test]
async fn reconnect_with_the_same_token_syncs_the_current_seq_and_own_view() {
    let server = start_server();
    let users = vec![server.guest("도윤").await, server.guest("서연").await, server.guest("하준").await];
    let (room, _) =
        server.started_room("cockroach-poker", json!({"turnSeconds": 60}), &users[0], &[&users[1], &users[2]]).await;
    let mut clients = Vec::new();
    for u in &users {
        let mut c = server.ws(u).await;
        c.sub(&room).await;
        clients.push(c);
    }
    let idx = |v: &Value| users.iter().position(|u| v == u.id.as_str()).unwrap();
    let v = clients[0].view(&room);
    let s = idx(&v["starter"]);
    let x = (s + 1) % 3;
    let card = clients[s].view(&room)["hand"][0].clone();
    let cs = clients[s].cs();
    let offer = json!({"type": "offer", "cardId": card["id"], "to": users[x].id, "claim": card["kind"]});
    let seq = clients[s].act_ok(&room, cs, offer).await;
    let before = clients[x].wait_seq(&room, seq).await;
    assert_eq!(before["holder"], users[x].id.as_str());

    clients.remove(x).drop_connection();
    let mut again = server.ws(&users[x]).await;
    let sync = again.sub(&room).await;
    assert_eq!(sync["seq"], seq, "the sync carries the current seq");
    assert_eq!(without_now(sync["view"].clone()), without_now(before.clone()), "the player's own view");
    assert_eq!(sync["view"]["hand"], before["hand"], "with the player's own hand");
    assert!(sync["view"]["hand"].as_array().unwrap().len() > 10);

    // The new socket plays on.
    let cs = again.cs();
    let peeked = again.act_ok(&room, cs, json!({"type": "peek"})).await;
    assert_eq!(peeked, seq + 1);
    assert_eq!(again.wait_seq(&room, peeked).await["card"], card, "the peeker sees the card");
}

#[tokio::test]
async fn a_retried_cs_is_acked_with_its_original_seq_and_stored_once() {
    let server = start_server();
    let a = server.guest("도윤").await;
    let (room, game_pk) = tally_room(&server, &a).await;

    // Dropped after reading the ack.
    let mut c = server.ws(&a).await;
    c.sub(&room).await;
    assert_eq!(c.act_ok(&room, 1, bump()).await, 1);
    c.drop_connection();
    let mut c = server.ws(&a).await;
    assert_eq!(c.sub(&room).await["seq"], 1);
    let again = c.act(&room, 1, bump()).await;
    assert_eq!((again["t"].as_str(), again["seq"].as_u64()), (Some("ack"), Some(1)), "{again}");

    // Dropped before reading the ack.
    c.send(json!({"t": "act", "room": room, "cs": 2, "a": bump()})).await;
    c.drop_connection();
    let mut c = server.ws(&a).await;
    c.sub(&room).await;
    let again = c.act(&room, 2, bump()).await;
    assert_eq!((again["t"].as_str(), again["seq"].as_u64()), (Some("ack"), Some(2)), "{again}");
    // And once more on the same socket.
    let again = c.act(&room, 2, bump()).await;
    assert_eq!((again["t"].as_str(), again["seq"].as_u64()), (Some("ack"), Some(2)), "{again}");

    let stored = server.stored(&game_pk).await;
    assert_eq!(stored.entries.len(), 2, "each action stored once");
    for cs in [1, 2] {
        assert_eq!(stored.entries.iter().filter(|e| e.cs == Some(cs)).count(), 1, "cs {cs} stored once");
    }
    // The room agrees: a new action is the third.
    assert_eq!(c.act_ok(&room, 3, bump()).await, 3);
    assert_eq!(c.wait_seq(&room, 3).await["count"], 3);
}

#[tokio::test]
async fn bad_socket_messages_get_precise_errors_and_change_nothing() {
    let server = start_server();
    let a = server.guest("도윤").await;
    let b = server.guest("서연").await;
    let (room, game_pk) = tally_room(&server, &a).await;
    let mut c = server.ws(&a).await;
    c.sub(&room).await;

    c.send_text("this is not json".into()).await;
    let e = c.next_of("error").await;
    assert_eq!(e["code"], "bad_message", "{e}");
    c.send(json!({"t": "dance", "room": room})).await;
    let e = c.next_of("error").await;
    assert_eq!(e["code"], "bad_message", "{e}");
    // The reason is short and never quotes the client's frame.
    assert!(!e["reason"].as_str().unwrap().contains("dance"), "{e}");

    let r = c.act("r_nowhere", 5, bump()).await;
    assert_eq!(
        (r["t"].as_str(), r["cs"].as_u64(), r["code"].as_str()),
        (Some("reject"), Some(5), Some("unknown_room"))
    );
    assert_eq!(r["reason"], "없는 방이에요");

    for (cs, bad) in [(6, json!({"type": "bump", "extra": 1})), (7, json!({"type": "dance"})), (8, json!("bump"))] {
        let r = c.act(&room, cs, bad.clone()).await;
        assert_eq!((r["t"].as_str(), r["code"].as_str()), (Some("reject"), Some("bad_action")), "{bad}: {r}");
    }
    c.send(json!({"t": "act", "room": room, "cs": 9})).await;
    let r = c.next_where(|m| m["cs"] == 9).await;
    assert_eq!((r["t"].as_str(), r["code"].as_str()), (Some("reject"), Some("bad_action")), "{r}");

    let mut other = server.ws(&b).await;
    let r = other.act(&room, 1, bump()).await;
    assert_eq!((r["t"].as_str(), r["code"].as_str()), (Some("reject"), Some("not_seated")), "{r}");
    assert_eq!(r["reason"], "이 게임의 플레이어가 아니에요");

    assert_eq!(server.entries(&game_pk).await, 0, "nothing was applied");
    assert!(c.log.iter().all(|m| m["t"] != "update"), "no update was sent");
    // The socket is still open and the room still works; the refused cs are free again.
    assert_eq!(c.act_ok(&room, 6, bump()).await, 1);
    assert_eq!(c.wait_seq(&room, 1).await["count"], 1);
}

#[tokio::test]
async fn a_frame_over_the_limit_closes_the_socket_with_1009() {
    let server = start_server_with(|s| s.ws.max_frame_bytes = 4096);
    let a = server.guest("도윤").await;
    let (room, game_pk) = tally_room(&server, &a).await;
    let mut c = server.ws(&a).await;
    c.sub(&room).await;
    let padding = "x".repeat(5000);
    c.send(json!({"t": "act", "room": room, "cs": 1, "a": {"type": "bump"}, "pad": padding})).await;
    assert_eq!(c.close_code().await, Some(1009));
    assert_eq!(server.entries(&game_pk).await, 0);
}

fn expect_401(result: Result<WsClient, tungstenite::Error>, what: &str) {
    match result {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status().as_u16(), 401, "{what}"),
        Err(e) => panic!("{what}: expected HTTP 401, got {e}"),
        Ok(_) => panic!("{what}: the upgrade must be refused"),
    }
}

#[tokio::test]
async fn bad_tokens_are_refused_with_401_before_the_upgrade() {
    let server = start_server();
    let a = server.guest("도윤").await;
    let secret = test_settings().auth.secret.unwrap();
    let now = jsonwebtoken::get_current_timestamp();
    let claims = |exp| Claims { sub: a.id.clone(), name: "도윤".into(), exp, nbf: None };
    let expired =
        encode(&Header::default(), &claims(now - 3600), &EncodingKey::from_secret(secret.as_bytes())).unwrap();
    let foreign =
        encode(&Header::default(), &claims(now + 3600), &EncodingKey::from_secret(b"another secret")).unwrap();
    // Change the first character of the signature (it carries six whole bits).
    let sig = a.token.rfind('.').unwrap() + 1;
    let first = if a.token[sig..].starts_with('A') { "B" } else { "A" };
    let tampered = format!("{}{first}{}", &a.token[..sig], &a.token[sig + 1..]);

    for (token, what) in
        [("garbage", "garbage"), (expired.as_str(), "expired"), (foreign.as_str(), "foreign"), (&tampered, "tampered")]
    {
        expect_401(WsClient::connect(server.addr, token).await, what);
        let (status, body) = server.get("/api/rooms", Some(token)).await;
        assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")), "{what} over HTTP");
    }
    let no_token = tokio_tungstenite::connect_async(format!("ws://{}/ws", server.addr)).await;
    match no_token {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status().as_u16(), 401),
        other => panic!("missing token: expected 401, got {:?}", other.map(|_| ())),
    }
    // The genuine token still works.
    assert!(WsClient::connect(server.addr, &a.token).await.is_ok());
}

#[tokio::test]
async fn http_api_bad_input_gets_400_with_its_code_and_creates_nothing() {
    let server = start_server();
    let a = server.guest("도윤").await;
    let (status, body) = server.post_raw("/api/rooms", Some(&a.token), "{\"game\": \"tally\",").await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_json")), "{body}");
    let (status, body) = server.post("/api/rooms", Some(&a.token), json!({"game": "chess"})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("unknown_game")), "{body}");
    let (status, body) = server.post("/api/rooms", Some(&a.token), json!({"game": "tally", "seed": "xyz"})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_seed")), "{body}");
    let (status, body) = server.get("/api/rooms", Some(&a.token)).await;
    assert_eq!((status, body), (200, json!([])), "no room was created");

    let strict = start_server_with(|s| s.dev.allow_fixed_seed = false);
    let b = strict.guest("서연").await;
    let body = json!({"game": "tally", "seed": support::SEED});
    let (status, body) = strict.post("/api/rooms", Some(&b.token), body).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("seed_not_allowed")), "{body}");
    assert!(body["reason"].as_str().is_some_and(|r| !r.is_empty()));
    let (status, body) = strict.get("/api/rooms", Some(&b.token)).await;
    assert_eq!((status, body), (200, json!([])), "no room was created");
    // Without a seed the same request is fine.
    let (status, _) = strict.post("/api/rooms", Some(&b.token), json!({"game": "tally"})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_flooding_socket_is_rate_limited_then_closed_with_1008() {
    let server = start_server_with(|s| {
        s.ws.rate_per_s = 1;
        s.ws.burst = 1;
        s.ws.flood_limit = 3;
    });
    let a = server.guest("도윤").await;
    let mut c = server.ws(&a).await;
    for _ in 0..10 {
        c.send(json!({"t": "unsub", "room": "r_none"})).await;
    }
    let mut limited = 0;
    while let Some(m) = c.next_within(support::WAIT).await {
        assert_eq!((m["t"].as_str(), m["code"].as_str()), (Some("error"), Some("rate_limited")), "{m}");
        limited += 1;
    }
    assert_eq!(limited, 3, "one rate_limited error per message over the limit, up to flood_limit");
    assert_eq!(c.close_code().await, Some(1008));
}
