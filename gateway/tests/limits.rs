#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Per-user limits that protect a node: sockets per user and open rooms per user.

mod support;

use futures_util::SinkExt;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self, Message};

fn start_server(tune: impl FnOnce(&mut gateway::config::Settings)) -> SocketAddr {
    support::start_server_with(tune).addr
}

async fn token(addr: SocketAddr, name: &str) -> String {
    support::procs::guest(&reqwest::Client::new(), &format!("http://{addr}"), name).await.1
}

#[tokio::test]
async fn sockets_per_user_are_capped_and_freed_on_close() {
    let addr = start_server(|s| s.ws.max_sockets_per_user = 2);
    let alice = token(addr, "alice").await;
    let bob = token(addr, "bob").await;
    let url = |t: &str| format!("ws://{addr}/ws?token={t}");
    let (mut first, _) = tokio_tungstenite::connect_async(url(&alice)).await.unwrap();
    let (_second, _) = tokio_tungstenite::connect_async(url(&alice)).await.unwrap();
    match tokio_tungstenite::connect_async(url(&alice)).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 429),
        other => panic!("third socket should be refused, got {:?}", other.map(|_| ())),
    }
    // Other users are not affected.
    tokio_tungstenite::connect_async(url(&bob)).await.unwrap();
    // Closing a socket frees its slot (the server notices the close asynchronously).
    first.send(Message::Close(None)).await.unwrap();
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if tokio_tungstenite::connect_async(url(&alice)).await.is_ok() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "slot never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn room_creation_is_capped_per_user() {
    let addr = start_server(|s| s.rooms.max_open_per_user = 2);
    let alice = token(addr, "alice").await;
    let http = reqwest::Client::new();
    let create =
        || http.post(format!("http://{addr}/api/rooms")).bearer_auth(&alice).json(&json!({"game": "tally"})).send();
    assert_eq!(create().await.unwrap().status(), 200);
    assert_eq!(create().await.unwrap().status(), 200);
    let refused = create().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.json::<Value>().await.unwrap()["code"], "too_many_rooms");
    let bob = token(addr, "bob").await;
    let other = http
        .post(format!("http://{addr}/api/rooms"))
        .bearer_auth(&bob)
        .json(&json!({"game": "tally"}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
}
