#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! `/metrics` during a small game: the metrics operators alert on exist and move.

mod support;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use support::procs::{create_room, guest};
use tokio_tungstenite::tungstenite::Message;

fn start_server() -> std::net::SocketAddr {
    support::start_server().addr
}

/// The value of the first sample line starting with `name` (labels included).
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

#[tokio::test]
async fn metrics_show_rooms_sessions_actions_rejects_and_latencies() {
    let addr = start_server();
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let (_, token) = guest(&http, &base, "alice").await;
    let room = create_room(&http, &base, &token, json!({"game": "tally", "options": {"target": 10}})).await;
    http.post(format!("{base}/api/rooms/{room}/start")).bearer_auth(&token).send().await.unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws?token={token}")).await.unwrap();
    ws.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await.unwrap();
    ws.send(Message::text(json!({"t": "act", "room": room, "cs": 99, "a": {"type": "nope"}}).to_string()))
        .await
        .unwrap();
    for cs in 1..=5 {
        ws.send(Message::text(json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}}).to_string()))
            .await
            .unwrap();
    }
    let mut acks = 0;
    while acks < 5 {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.unwrap().unwrap().unwrap();
        if let Message::Text(t) = msg {
            if serde_json::from_str::<Value>(&t).unwrap()["t"] == "ack" {
                acks += 1;
            }
        }
    }
    let text = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(sample(&text, "roomd_rooms"), 1.0);
    assert_eq!(sample(&text, "roomd_sessions"), 1.0);
    assert_eq!(sample(&text, "roomd_games_started_total"), 1.0);
    assert_eq!(sample(&text, "roomd_actions_applied_total"), 5.0);
    assert_eq!(sample(&text, "roomd_actions_rejected_total{code=\"bad_action\"}"), 1.0);
    assert_eq!(sample(&text, "roomd_action_latency_seconds_count"), 5.0);
    assert!(sample(&text, "roomd_action_latency_seconds_sum") > 0.0);
    assert_eq!(sample(&text, "roomd_store_append_seconds_count"), 5.0);
    // Cluster-level counters exist (and stay at zero on an embedded node).
    for name in [
        "roomd_rooms_restored_total",
        "roomd_fenced_appends_total",
        "roomd_store_errors_total",
        "roomd_drains_total",
        "roomd_bus_dropped_total",
        "roomd_bus_lag_seconds_count",
        "roomd_bus_backlog_rooms",
    ] {
        assert_eq!(sample(&text, name), 0.0, "{name}");
    }
}

/// With `ROOMD__METRICS__PORT` set, `/metrics` is served on that port only (and nothing
/// else is): the player port answers 404 for it, as for a path that does not exist. Without
/// it, `/metrics` stays on the player port (the test above).
#[tokio::test]
async fn metrics_on_a_listener_of_their_own_are_not_served_on_the_player_port() {
    use support::procs::{free_port, Proc, Settings};
    let port = free_port();
    let node = Proc::spawn(
        "metrics-port",
        Settings::base()
            .unset("ROOMD__REDIS__URL")
            .set("ROOMD__STORE__KIND", "memory")
            .set("ROOMD__AUTH__SECRET", support::TEST_SECRET)
            .set("ROOMD__METRICS__BIND", "127.0.0.1")
            .set("ROOMD__METRICS__PORT", port.to_string()),
    );
    let http = reqwest::Client::new();
    let (_, token) = guest(&http, &node.base, "alice").await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/ws?token={token}", node.ws())).await.unwrap();
    let on_player_port = http.get(format!("{}/metrics", node.base)).send().await.unwrap();
    assert_eq!(on_player_port.status(), 404);
    let body: Value = on_player_port.json().await.unwrap();
    assert_eq!(body["code"], "not_found");
    let metrics = format!("http://127.0.0.1:{port}");
    let scraped = http.get(format!("{metrics}/metrics")).send().await.unwrap();
    assert_eq!(scraped.status(), 200);
    let text = scraped.text().await.unwrap();
    assert_eq!(sample(&text, "roomd_sessions"), 1.0, "the node's own metrics");
    assert!(text.contains("roomd_build_info{"), "{text}");
    assert!(node.banner.contains(&format!("metrics on http://127.0.0.1:{port}/metrics")), "{}", node.banner);
    for path in ["/healthz", "/api/games", "/admin/api/nodes", "/"] {
        assert_eq!(http.get(format!("{metrics}{path}")).send().await.unwrap().status(), 404, "{path}");
    }
    ws.close(None).await.unwrap();
}
