#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! `GET /api/replays/{gamePk}` over real HTTP: participants get their replay (private,
//! no-store), spectators and strangers 403, no token 401, and a game that cannot be
//! rebuilt 410.

mod support;

use engine::Seed;
use futures_util::{SinkExt, StreamExt};
use room_actor::log::{GameRecord, StartEntry};
use room_actor::RoomStore;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use support::procs::{create_room, guest};
use tokio_tungstenite::tungstenite::Message;

fn start_server() -> (SocketAddr, Arc<dyn RoomStore>) {
    let server = support::start_server();
    (server.addr, server.store)
}

/// Plays a 10-bump tally game between alice (over the socket) and a bot, watched by
/// carol; returns the game's pk.
async fn finished_tally(http: &reqwest::Client, addr: SocketAddr, alice: &str, carol: &str) -> String {
    let base = format!("http://{addr}");
    let room = create_room(http, &base, alice, json!({"game": "tally", "options": {"target": 10}})).await;
    http.post(format!("{base}/api/rooms/{room}/seats"))
        .bearer_auth(alice)
        .json(&json!({"bot": true}))
        .send()
        .await
        .unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws?token={alice}")).await.unwrap();
    let (mut watcher, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws?token={carol}")).await.unwrap();
    let start: Value = http
        .post(format!("{base}/api/rooms/{room}/start"))
        .bearer_auth(alice)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pk = start["gamePk"].as_str().unwrap().to_owned();
    for socket in [&mut ws, &mut watcher] {
        socket.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await.unwrap();
    }
    let mut cs = 0;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, ws.next()).await {
        let Message::Text(text) = msg else { continue };
        let v: Value = serde_json::from_str(&text).unwrap();
        match v["t"].as_str() {
            Some("result") => return pk,
            Some("sync") | Some("ack") => {
                cs += 1;
                ws.send(Message::text(json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}}).to_string()))
                    .await
                    .unwrap();
            }
            _ => {}
        }
    }
    panic!("game did not finish");
}

#[tokio::test]
async fn replay_permissions_and_headers() {
    let (addr, _) = start_server();
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let (_, alice) = guest(&http, &base, "alice").await;
    let (_, carol) = guest(&http, &base, "carol").await;
    let (_, dave) = guest(&http, &base, "dave").await;
    let pk = finished_tally(&http, addr, &alice, &carol).await;

    let ok = http.get(format!("{base}/api/replays/{pk}")).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let cache = ok.headers().get("cache-control").unwrap().to_str().unwrap().to_owned();
    assert!(cache.contains("private") && cache.contains("no-store"), "{cache}");
    let body: Value = ok.json().await.unwrap();
    assert_eq!(body["scenes"].as_u64().unwrap() as usize, body["patches"].as_array().unwrap().len() + 1);
    assert_eq!(body["first"]["count"], 0);
    assert!(body.get("seed").is_none() && !body.to_string().contains("inputJson"), "no seed or raw log");
    // Applying every patch gives the final count.
    let mut scene = body["first"].clone();
    for patch in body["patches"].as_array().unwrap() {
        let patch: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
        json_patch::patch(&mut scene, &patch).unwrap();
    }
    assert_eq!(scene["count"], 10);
    // Served again from the cache: the same document.
    let again: Value =
        http.get(format!("{base}/api/replays/{pk}")).bearer_auth(&alice).send().await.unwrap().json().await.unwrap();
    assert_eq!(again, body);

    for (who, token) in [("spectator", &carol), ("stranger", &dave)] {
        let r = http.get(format!("{base}/api/replays/{pk}")).bearer_auth(token).send().await.unwrap();
        assert_eq!(r.status(), 403, "{who}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"], "not_participant");
    }
    assert_eq!(http.get(format!("{base}/api/replays/{pk}")).send().await.unwrap().status(), 401);
    assert_eq!(
        http.get(format!("{base}/api/replays/{pk}")).bearer_auth("forged.token.here").send().await.unwrap().status(),
        401
    );
    assert_eq!(http.get(format!("{base}/api/replays/g_nope")).bearer_auth(&alice).send().await.unwrap().status(), 404);
    // The finished game is in alice's list, newest first.
    let games: Value = http
        .get(format!("{base}/api/me/games?limit=5"))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(games[0]["gamePk"], pk.as_str());
    assert!(http
        .get(format!("{base}/api/me/games"))
        .bearer_auth(&carol)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .is_empty());
}

/// Stores a finished tally game directly, with one thing wrong.
async fn stored_game(store: &Arc<dyn RoomStore>, pk: &str, player: &str, state_version: u32, final_state_json: &str) {
    let start = StartEntry {
        game_pk: pk.into(),
        room_id: "r_x".into(),
        game: "tally".into(),
        seed: Seed(1),
        players: vec![player.into()],
        bots: vec![],
        names: vec!["x".into()],
        options_json: r#"{"target":10}"#.into(),
        state_version,
        started_at: 1_700_000_000_000,
        rtt: Default::default(),
    };
    store.begin(start).await.unwrap();
    let record = GameRecord {
        game_pk: pk.into(),
        room_id: "r_x".into(),
        game: "tally".into(),
        players: vec![player.into()],
        names: vec!["x".into()],
        started_at: 1_700_000_000_000,
        ended_at: 1_700_000_001_000,
        state_version,
        final_seq: 0,
        result_json: "null".into(),
        final_state_json: final_state_json.into(),
    };
    store.finish(record).await.unwrap();
}

#[tokio::test]
async fn replays_that_cannot_be_rebuilt_answer_410_in_korean() {
    let (addr, store) = start_server();
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let (alice_id, alice) = guest(&http, &base, "alice").await;
    stored_game(&store, "g_outdated", &alice_id, 999, "{}").await;
    stored_game(&store, "g_mismatch", &alice_id, 1, r#"{"different":true}"#).await;
    for (pk, code) in [("g_outdated", "replay_outdated"), ("g_mismatch", "replay_mismatch")] {
        let r = http.get(format!("{base}/api/replays/{pk}")).bearer_auth(&alice).send().await.unwrap();
        assert_eq!(r.status(), 410, "{pk}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"], code);
        assert!(v["reason"].as_str().unwrap().chars().any(|c| ('가'..='힣').contains(&c)), "Korean reason: {v}");
    }
}
