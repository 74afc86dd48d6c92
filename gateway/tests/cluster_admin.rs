#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The operators' API in cluster mode with real processes: three `roomd` nodes and the
//! test Redis (`REDIS_URL`, started by ./scripts/test; these fail, never skip, without
//! it). Rooms are listed cluster-wide in pages; close, kick and drain reach the room or
//! node wherever it is, and real WebSocket clients on other nodes see their effects.

mod support;

use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use support::procs::{connect, next_within, redis_url, send, token, until_all_see, Proc, Settings, Ws};
use tokio_tungstenite::tungstenite::Message;

const ADMIN: &str = "cluster-admin-token-0123456789abcdef";

/// A node with a short lease, the admin API on, and its JSON log kept (`Proc::log`).
fn node(id: &str, prefix: &str) -> Proc {
    let settings = Settings::cluster(id, prefix, &redis_url())
        .short_lease()
        .set("ROOMD__ADMIN__TOKEN", ADMIN)
        .set("ROOMD__CLUSTER__DRAIN_GRACE_S", "4")
        .set("ROOMD__LOG__LEVEL", "warn,audit=info")
        .set("ROOMD__LOG__FORMAT", "json");
    Proc::spawn(id, settings)
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn prefix() -> String {
    support::procs::prefix("adm")
}

async fn get(http: &reqwest::Client, url: String, token: Option<&str>) -> (u16, Value) {
    let mut req = http.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn post(http: &reqwest::Client, url: String, token: &str, body: Value) -> (u16, Value) {
    let r = http.post(url).bearer_auth(token).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn next_where(ws: &mut Ws, secs: u64, pred: impl Fn(&Value) -> bool) -> Option<Value> {
    next_within(ws, Duration::from_secs(secs), pred).await
}

/// A waiting tally room created through `via`; `GET`ting it activates it on its owner.
async fn room(http: &reqwest::Client, via: &Proc, host: &str) -> (String, String) {
    let (status, created) =
        post(http, format!("{}/api/rooms", via.base), host, json!({"game": "tally", "options": {"target": null}}))
            .await;
    assert_eq!(status, 200, "{created}");
    let room = created["roomId"].as_str().unwrap().to_owned();
    let (_, info) = get(http, format!("{}/api/rooms/{room}", via.base), Some(host)).await;
    (room, info["node"].as_str().unwrap_or_else(|| panic!("no owner: {info}")).to_owned())
}

#[tokio::test]
async fn rooms_are_paged_cluster_wide_and_close_and_kick_reach_clients_on_other_nodes() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let nodes = [node("ka", &prefix), node("kb", &prefix), node("kc", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1], &nodes[2]], 3).await;
    let http = reqwest::Client::new();
    let (_, host) = token(&http, &nodes[0], "host").await;
    let (guest_id, guest) = token(&http, &nodes[1], "guest").await;

    // Auth is the same on every node: a player token is not an admin token.
    for t in [None, Some(host.as_str()), Some("wrong")] {
        assert_eq!(get(&http, format!("{}/admin/api/rooms", nodes[2].base), t).await.0, 401);
    }

    // At least nine rooms, and until every node owns one (placement is a hash: nine
    // rooms miss one of three nodes 2.6 % of the time).
    let mut owners: BTreeMap<String, String> = BTreeMap::new();
    while owners.len() < 9 || owners.values().collect::<BTreeSet<_>>().len() < 3 {
        assert!(owners.len() < 40, "rooms never landed on all three nodes: {owners:?}");
        let (r, owner) = room(&http, &nodes[0], &host).await;
        owners.insert(r, owner);
    }

    // Pages of 2 through a node that owns only some of them: every room once, with its owner.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let (status, page) =
            get(&http, format!("{}/admin/api/rooms?limit=2&cursor={cursor}", nodes[1].base), Some(ADMIN)).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        assert!(page["rooms"].as_array().unwrap().len() <= 2);
        for r in page["rooms"].as_array().unwrap() {
            let id = r["roomId"].as_str().unwrap().to_owned();
            assert!(seen.insert(id.clone(), r["node"].as_str().unwrap_or("").to_owned()).is_none(), "{id} twice");
            assert_eq!(r["game"], "tally");
        }
        match page["next"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
        assert!(pages <= 10, "pagination does not end");
    }
    assert_eq!(pages, owners.len().div_ceil(2));
    assert_eq!(seen, owners, "listed owners are the rooms' owners");
    // The node filter gives each node's rooms.
    for node in ["ka", "kb", "kc"] {
        let (_, page) = get(&http, format!("{}/admin/api/rooms?node={node}", nodes[0].base), Some(ADMIN)).await;
        let listed: BTreeSet<String> =
            page["rooms"].as_array().unwrap().iter().map(|r| r["roomId"].as_str().unwrap().to_owned()).collect();
        let expected: BTreeSet<String> = owners.iter().filter(|(_, o)| *o == node).map(|(r, _)| r.clone()).collect();
        assert_eq!(listed, expected, "rooms of {node}");
    }
    // Nodes: all three, with the rooms each owns (reported every heartbeat).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = get(&http, format!("{}/admin/api/nodes", nodes[0].base), Some(ADMIN)).await;
        assert_eq!(status, 200, "{body}");
        let list = body["nodes"].as_array().unwrap();
        let ids: Vec<&str> = list.iter().map(|n| n["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["ka", "kb", "kc"]);
        let counts_match = list.iter().all(|n| {
            let id = n["id"].as_str().unwrap();
            n["rooms"].as_u64() == Some(owners.values().filter(|o| *o == id).count() as u64)
                && n["lastHeartbeat"].as_i64().unwrap() > 0
                && n["draining"] == false
                && n["address"].as_str().is_some()
                && n["peer"].as_str().is_some_and(|p| p.starts_with("127.0.0.1:"))
        });
        if counts_match {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "node stats never matched {owners:?}: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Kick: a room owned by kc, the guest watching from kb, the operator on ka.
    let (kicked_room, _) = owners.iter().find(|(_, o)| *o == "kc").unwrap();
    let (status, body) =
        post(&http, format!("{}/api/rooms/{kicked_room}/seats", nodes[1].base), &guest, json!({})).await;
    assert_eq!(status, 200, "{body}");
    let mut g = connect(&nodes[1], &guest).await;
    send(&mut g, json!({"t": "sub", "room": kicked_room})).await;
    next_where(&mut g, 10, |v| v["t"] == "sync").await.expect("guest sync");
    let (status, body) = post(
        &http,
        format!("{}/admin/api/rooms/{kicked_room}/kick", nodes[0].base),
        ADMIN,
        json!({"user": guest_id, "reason": "도배"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let told = next_where(&mut g, 10, |v| v["t"] == "error" && v["code"] == "kicked").await.expect("guest told");
    assert!(told["reason"].as_str().unwrap().contains("도배"), "{told}");
    let (status, body) =
        post(&http, format!("{}/api/rooms/{kicked_room}/seats", nodes[2].base), &guest, json!({})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("kicked")), "{body}");
    // Unkick (the one room protocol's demonstration verb: no bus code of its own) crosses
    // from ka to the owner kc like every verb, and the guest may sit again through kb.
    let (status, body) = post(
        &http,
        format!("{}/admin/api/rooms/{kicked_room}/unkick", nodes[0].base),
        ADMIN,
        json!({"user": guest_id}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["room"]["kicked"].as_array().map_or(0, Vec::len), 0, "{body}");
    let (status, body) =
        post(&http, format!("{}/api/rooms/{kicked_room}/seats", nodes[1].base), &guest, json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        &http,
        format!("{}/admin/api/rooms/{kicked_room}/unkick", nodes[2].base),
        ADMIN,
        json!({"user": guest_id}),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_kicked")), "{body}");

    // Close: a started room owned by another node than the watcher's and the operator's.
    let (closed_room, owner) = owners.iter().find(|(r, o)| *o != "kb" && *r != kicked_room).unwrap();
    let started = post(&http, format!("{}/api/rooms/{closed_room}/start", nodes[0].base), &host, json!({})).await;
    assert_eq!(started.0, 200, "{}", started.1);
    let mut h = connect(&nodes[1], &host).await;
    send(&mut h, json!({"t": "sub", "room": closed_room})).await;
    next_where(&mut h, 10, |v| v["t"] == "sync").await.expect("host sync");
    let via = if owner == "ka" { &nodes[2] } else { &nodes[0] };
    let (status, body) =
        post(&http, format!("{}/admin/api/rooms/{closed_room}/close", via.base), ADMIN, json!({"reason": "점검"}))
            .await;
    assert_eq!(status, 200, "{body}");
    let result = next_where(&mut h, 10, |v| v["t"] == "result").await.expect("result");
    assert!(result["result"]["summary"].as_str().unwrap().contains("점검"), "{result}");
    let closed = next_where(&mut h, 10, |v| v["t"] == "error" && v["code"] == "room_closed").await.expect("closed");
    assert!(closed["reason"].as_str().unwrap().contains("점검"));
    // Gone from the cluster-wide listing.
    let (_, page) = get(&http, format!("{}/admin/api/rooms?limit=200", nodes[1].base), Some(ADMIN)).await;
    let listed: Vec<&str> = page["rooms"].as_array().unwrap().iter().map(|r| r["roomId"].as_str().unwrap()).collect();
    assert!(!listed.contains(&closed_room.as_str()), "{listed:?}");
    assert_eq!(listed.len(), owners.len() - 1);
    // The operator's node wrote audit lines naming the operator by fingerprint, never the token.
    let fp = format!("token:{}", gateway::admin::fingerprint(ADMIN));
    // `via` may be nodes[0] itself: each lock is taken and released on its own (holding
    // both guards in one expression would lock the same mutex twice).
    let mut log = nodes[0].log.lock().unwrap().clone();
    if !std::ptr::eq(via, &nodes[0]) {
        let via_log = via.log.lock().unwrap().clone();
        log.push_str(&via_log);
    }
    let audits: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "audit" && v["action"].is_string())
        .collect();
    assert!(
        audits.iter().any(|a| a["action"] == "kick"
            && a["who"] == fp.as_str()
            && a["subject"] == kicked_room.as_str()
            && a["outcome"] == "ok"),
        "{audits:?}"
    );
    assert!(audits.iter().any(|a| a["action"] == "close" && a["subject"] == closed_room.as_str()), "{audits:?}");
    assert!(!log.contains(ADMIN), "the admin token was logged");
}

#[tokio::test]
async fn an_operator_drains_another_node_remotely_as_sigterm_would() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let mut nodes = [node("qa", &prefix), node("qb", &prefix), node("qc", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1], &nodes[2]], 3).await;
    let http = reqwest::Client::new();
    let (_, host) = token(&http, &nodes[0], "host").await;
    let mut on_drained = connect(&nodes[2], &host).await;
    let (status, body) = post(&http, format!("{}/admin/api/nodes/nope/drain", nodes[0].base), ADMIN, json!({})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("unknown_node")));
    let (status, body) = post(&http, format!("{}/admin/api/nodes/qc/drain", nodes[0].base), ADMIN, json!({})).await;
    assert_eq!(status, 202, "{body}");
    // Its sockets are closed with 1012 and the process exits by itself, as on SIGTERM.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut code = None;
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, on_drained.next()).await {
        if let Ok(Message::Close(Some(frame))) = msg {
            code = Some(u16::from(frame.code));
            break;
        }
    }
    assert_eq!(code, Some(1012));
    let exit_deadline = std::time::Instant::now() + Duration::from_secs(25);
    while !nodes[2].exited() {
        assert!(std::time::Instant::now() < exit_deadline, "drained node did not exit");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // It leaves the membership (at the latest when its last heartbeat expires).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = get(&http, format!("{}/admin/api/nodes", nodes[1].base), Some(ADMIN)).await;
        let ids: Vec<&str> = body["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
        if ids == ["qa", "qb"] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "drained node still listed: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = nodes[0].log.lock().unwrap().clone();
    assert!(
        log.contains(r#""action":"drain""#) && log.contains(r#""subject":"qc""#),
        "no audit line for the drain: {log}"
    );
}

/// HTTP calls (players' and operators') wait out a room between owners: through the node
/// that survives, a read, a seat and an operator's inspection of a room whose owner was
/// just SIGKILLed are answered by its new owner, not `room_unavailable`.
#[tokio::test]
async fn http_calls_on_a_room_whose_owner_was_sigkilled_are_answered_by_its_new_owner() {
    let _serial = SERIAL.lock().await;
    let prefix = prefix();
    let mut nodes = [node("ha", &prefix), node("hb", &prefix)];
    until_all_see(&[&nodes[0], &nodes[1]], 2).await;
    let http = reqwest::Client::new();
    let mut on_hb = None;
    for i in 0..20 {
        let (_, host) = token(&http, &nodes[0], &format!("host{i}")).await;
        let (room, owner) = room(&http, &nodes[0], &host).await;
        if owner == "hb" {
            on_hb = Some((room, host));
            break;
        }
    }
    let (room, host) = on_hb.expect("a room placed on hb in 20 tries");
    let (guest_id, guest) = token(&http, &nodes[0], "guest").await;

    nodes[1].kill();
    // At once: the cluster has not found hb dead yet, and the room is between owners.
    let (status, info) = get(&http, format!("{}/api/rooms/{room}", nodes[0].base), Some(&host)).await;
    assert_eq!((status, info["node"].as_str()), (200, Some("ha")), "{info}");
    let (status, seated) = post(&http, format!("{}/api/rooms/{room}/seats", nodes[0].base), &guest, json!({})).await;
    assert_eq!(status, 200, "{seated}");
    assert!(seated.to_string().contains(&guest_id), "the guest sits: {seated}");
    let (status, view) = get(&http, format!("{}/admin/api/rooms/{room}", nodes[0].base), Some(ADMIN)).await;
    assert_eq!((status, view["node"].as_str(), view["active"].as_bool()), (200, Some("ha"), Some(true)), "{view}");
}
