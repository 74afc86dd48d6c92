#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The operators' API on an embedded node: auth, listing and detail, and the verbs (close,
//! kick, drain) with their effects on real WebSocket clients.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::{start_server_with, Server};

const ADMIN: &str = "admin-token-for-tests-0123456789";

/// An admin-enabled node that believes `X-Forwarded-For` from 127.0.0.1, so a test can
/// speak from several client addresses (failed admin attempts are limited per address).
fn admin_server() -> Server {
    start_server_with(|s| {
        s.admin.token = Some(ADMIN.into());
        s.http.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    })
}

/// `GET path` as client `from` (through the trusted proxy): status, `Retry-After`, body.
async fn get_from(server: &Server, path: &str, token: Option<&str>, from: &str) -> (u16, Option<u64>, Value) {
    let mut req = server.http.get(server.url(path)).header("x-forwarded-for", from);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().parse().unwrap());
    (status, retry, resp.json().await.unwrap_or(Value::Null))
}

async fn metrics(server: &Server) -> String {
    server.http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

/// The value of the sample line starting with `prefix` (name and labels), 0 if absent.
fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn without_a_configured_token_the_admin_api_and_console_do_not_exist() {
    let server = support::start_server();
    let player = server.guest("플레이어").await;
    for token in [None, Some(player.token.as_str()), Some(ADMIN), Some("")] {
        assert_eq!(server.get("/admin/api/nodes", token).await.0, 404);
        assert_eq!(server.get("/admin/api/rooms", token).await.0, 404);
        assert_eq!(server.post("/admin/api/rooms/r_x/close", token, json!({})).await.0, 404);
    }
    let console = server.http.get(server.url("/admin")).send().await.unwrap();
    assert_eq!(console.status(), 404);
    let js = server.http.get(server.url("/admin/console.js")).send().await.unwrap();
    assert_eq!(js.status(), 404);
}

#[tokio::test]
async fn no_token_a_player_token_and_a_wrong_token_are_refused_with_401() {
    let server = admin_server();
    let player = server.guest("플레이어").await;
    let room = server.create_room(&player, "tally", json!({"target": 10}), 60).await;
    let wrong = format!("{ADMIN}x");
    let refused: [Option<&str>; 4] = [None, Some(&player.token), Some(&wrong), Some("")];
    // Each from an address of its own: one address is throttled after 10 failures.
    for (i, token) in refused.into_iter().enumerate() {
        let from = format!("198.51.100.{i}");
        for path in ["/admin/api/nodes", "/admin/api/rooms", &format!("/admin/api/rooms/{room}")] {
            let (status, _, body) = get_from(&server, path, token, &from).await;
            assert_eq!(status, 401, "{path} with {token:?}: {body}");
            assert_eq!(body["code"], "unauthorized");
        }
        for (path, body) in [("close", json!({})), ("kick", json!({"user": player.id}))] {
            let mut req = server.http.post(server.url(&format!("/admin/api/rooms/{room}/{path}")));
            req = req.header("x-forwarded-for", &from).json(&body);
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            assert_eq!(req.send().await.unwrap().status(), 401);
        }
    }
    // Nothing happened to the room.
    assert_eq!(server.get(&format!("/api/rooms/{room}"), Some(&player.token)).await.1["status"], "waiting");
    let (status, nodes) = server.get("/admin/api/nodes", Some(ADMIN)).await;
    assert_eq!(status, 200, "{nodes}");
    assert_eq!(nodes["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(nodes["nodes"][0]["rooms"], 1);
    assert_eq!(nodes["nodes"][0]["draining"], false);
    assert!(sample(&metrics(&server).await, "roomd_admin_auth_failures_total") >= 20.0);
    // The console is served once the API is on (its script as a module file, not inline).
    let html = server.http.get(server.url("/admin")).send().await.unwrap().text().await.unwrap();
    assert!(html.contains(r#"<script type="module" src="/admin/console.js"></script>"#));
    let js = server.http.get(server.url("/admin/console.js")).send().await.unwrap();
    assert!(js.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
}

#[tokio::test]
async fn rooms_are_listed_in_pages_with_filters() {
    let server = admin_server();
    let host = server.guest("방장").await;
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(server.create_room(&host, "tally", json!({"target": 10}), 60).await);
    }
    made.push(server.create_room(&host, "halli-galli", json!({}), 60).await);
    let mut seen = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let (status, page) = server.get(&format!("/admin/api/rooms?limit=2&cursor={cursor}"), Some(ADMIN)).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        let rooms = page["rooms"].as_array().unwrap();
        assert!(rooms.len() <= 2);
        seen.extend(rooms.iter().map(|r| r["roomId"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(pages, 3);
    let mut expected = made.clone();
    expected.sort();
    assert_eq!(seen, expected, "every room once, in id order");
    let (_, tally) = server.get("/admin/api/rooms?game=tally", Some(ADMIN)).await;
    assert_eq!(tally["rooms"].as_array().unwrap().len(), 5);
    assert!(tally["next"].is_null());
    let (_, elsewhere) = server.get("/admin/api/rooms?node=n_nowhere", Some(ADMIN)).await;
    assert!(elsewhere["rooms"].as_array().unwrap().is_empty());
    let row = &tally["rooms"][0];
    for field in ["roomId", "game", "status", "node", "players", "ageMs", "createdAt"] {
        assert!(!row[field].is_null(), "{field} missing in {row}");
    }
    let (status, body) = server.get("/admin/api/rooms?limit=x", Some(ADMIN)).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_query")));
}

#[tokio::test]
async fn room_detail_shows_recent_input_kinds_and_times_and_no_hidden_state() {
    let server = admin_server();
    let host = server.guest("방장").await;
    // Cockroach poker with bots: hands and card ids exist, and must not show here.
    let room = server.create_room(&host, "cockroach-poker", json!({}), 60).await;
    server.add_bot(&room, &host).await;
    server.add_bot(&room, &host).await;
    server.start(&room, &host).await;
    let (status, detail) = server.get(&format!("/admin/api/rooms/{room}"), Some(ADMIN)).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["info"]["status"], "playing");
    assert_eq!(detail["active"], true);
    let text = detail.to_string();
    for secret in ["hand", "cardId", "\"card\"", "state"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // A tally game with a few bumps shows them as kinds with times, oldest first.
    let (room, _) = server.started_room("tally", json!({"target": 100}), &host, &[]).await;
    let mut ws = server.ws(&host).await;
    ws.sub(&room).await;
    for _ in 0..3 {
        let cs = ws.cs();
        ws.act_ok(&room, cs, json!({"type": "bump"})).await;
    }
    let (_, detail) = server.get(&format!("/admin/api/rooms/{room}"), Some(ADMIN)).await;
    assert_eq!(detail["seq"], 3);
    assert_eq!(detail["subscribers"], 1);
    let recent = detail["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 3);
    for (i, entry) in recent.iter().enumerate() {
        assert_eq!(entry["seq"], i as u64 + 1);
        assert_eq!(entry["kind"], "client:bump");
        assert_eq!(entry["actor"], format!("player:{}", host.id));
        assert!(entry["at"].as_i64().unwrap() > 0);
        assert_eq!(entry.as_object().unwrap().len(), 5, "only seq, at, actor, kind, auto: {entry}");
    }
    assert_eq!(server.get("/admin/api/rooms/r_nope", Some(ADMIN)).await.0, 404);
}

#[tokio::test]
async fn kick_tells_the_user_why_and_they_may_not_come_back_to_that_room() {
    let server = admin_server();
    let host = server.guest("방장").await;
    let guest = server.guest("손님").await;
    let room = server.create_room(&host, "tally", json!({"target": 10}), 60).await;
    server.seat(&room, &guest).await;
    let mut h = server.ws(&host).await;
    let mut g = server.ws(&guest).await;
    h.sub(&room).await;
    g.sub(&room).await;
    let (status, body) = server
        .post(&format!("/admin/api/rooms/{room}/kick"), Some(ADMIN), json!({"user": guest.id, "reason": "욕설"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let told = g.next_where(|m| m["t"] == "error" && m["code"] == "kicked").await;
    assert_eq!(told["room"], room.as_str());
    assert!(told["reason"].as_str().unwrap().contains("욕설"), "{told}");
    // The seat is free; the kick is part of the room's info.
    let (_, info) = server.get(&format!("/api/rooms/{room}"), Some(&host.token)).await;
    assert_eq!(info["seats"].as_array().unwrap().len(), 1);
    assert_eq!(info["kicked"], json!([guest.id]));
    // No way back into this room: neither a seat nor watching.
    let (status, body) = server.post(&format!("/api/rooms/{room}/seats"), Some(&guest.token), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("kicked")));
    g.send(json!({"t": "sub", "room": room})).await;
    let again = g.next_where(|m| m["t"] == "error" || m["t"] == "sync").await;
    assert_eq!(again["code"], "kicked", "{again}");
    // Another room is fine.
    let other = server.create_room(&host, "tally", json!({"target": 10}), 60).await;
    server.seat(&other, &guest).await;
    // The host's room goes on: they can start alone.
    server.start(&room, &host).await;
    let metrics = metrics(&server).await;
    assert_eq!(sample(&metrics, r#"roomd_admin_actions_total{action="kick",outcome="ok"}"#), 1.0);
    // Kicking someone who is not there is a clear 404 and counted as such.
    let (status, body) =
        server.post(&format!("/admin/api/rooms/{room}/kick"), Some(ADMIN), json!({"user": "u_nobody"})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_in_room")));
    let (status, _) = server.post(&format!("/admin/api/rooms/{room}/kick"), Some(ADMIN), json!({})).await;
    assert_eq!(status, 400);
    let metrics = self::metrics(&server).await;
    assert_eq!(sample(&metrics, r#"roomd_admin_actions_total{action="kick",outcome="not_in_room"}"#), 1.0);
}

/// The demonstration of the one room protocol (issue 58): `Unkick` is a message type, its
/// handler and this route, and nothing else.
#[tokio::test]
async fn an_operator_lifts_a_kick_and_the_user_may_sit_and_watch_again() {
    let server = admin_server();
    let host = server.guest("방장").await;
    let guest = server.guest("손님").await;
    let room = server.create_room(&host, "tally", json!({"target": 10}), 60).await;
    server.seat(&room, &guest).await;
    let (status, _) =
        server.post(&format!("/admin/api/rooms/{room}/kick"), Some(ADMIN), json!({"user": guest.id})).await;
    assert_eq!(status, 200);
    let (status, body) = server.post(&format!("/api/rooms/{room}/seats"), Some(&guest.token), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("kicked")));

    let (status, body) =
        server.post(&format!("/admin/api/rooms/{room}/unkick"), Some(ADMIN), json!({"user": guest.id})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["room"]["kicked"].as_array().map_or(0, Vec::len), 0, "{body}");
    // Back in: a seat, and watching.
    let (status, body) = server.post(&format!("/api/rooms/{room}/seats"), Some(&guest.token), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let mut g = server.ws(&guest).await;
    g.send(json!({"t": "sub", "room": room})).await;
    let synced = g.next_where(|m| m["t"] == "error" || m["t"] == "sync").await;
    assert_eq!(synced["t"], "sync", "{synced}");

    // Lifting a kick nobody had is a clear 404; a body without a user is 400; neither
    // changes the room.
    let (status, body) =
        server.post(&format!("/admin/api/rooms/{room}/unkick"), Some(ADMIN), json!({"user": guest.id})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_kicked")));
    let (status, body) = server.post(&format!("/admin/api/rooms/{room}/unkick"), Some(ADMIN), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_json")));
    let (status, _) = server.post("/admin/api/rooms/r_nope/unkick", Some(ADMIN), json!({"user": guest.id})).await;
    assert_eq!(status, 404);
    let (_, info) = server.get(&format!("/api/rooms/{room}"), Some(&host.token)).await;
    assert_eq!(info["seats"].as_array().unwrap().len(), 2);
    let metrics = metrics(&server).await;
    assert_eq!(sample(&metrics, r#"roomd_admin_actions_total{action="unkick",outcome="ok"}"#), 1.0);
    assert_eq!(sample(&metrics, r#"roomd_admin_actions_total{action="unkick",outcome="not_kicked"}"#), 1.0);
}

#[tokio::test]
async fn kicking_a_player_mid_game_counts_as_leaving_it() {
    let server = admin_server();
    let host = server.guest("방장").await;
    let guest = server.guest("손님").await;
    let (room, _) = server.started_room("tally", json!({"target": 100}), &host, &[&guest]).await;
    let mut g = server.ws(&guest).await;
    g.sub(&room).await;
    let (status, body) =
        server.post(&format!("/admin/api/rooms/{room}/kick"), Some(ADMIN), json!({"user": guest.id})).await;
    assert_eq!(status, 200, "{body}");
    let told = g.next_where(|m| m["t"] == "error" && m["code"] == "kicked").await;
    assert!(told["reason"].as_str().unwrap().contains("운영 정책"), "default reason: {told}");
    g.send(json!({"t": "sub", "room": room})).await;
    assert_eq!(g.next_where(|m| m["t"] == "error" || m["t"] == "sync").await["code"], "kicked");
    let (_, info) = server.get(&format!("/api/rooms/{room}"), Some(&host.token)).await;
    assert_eq!(info["status"], "playing", "the game goes on without them: {info}");
    assert_eq!(info["kicked"], json!([guest.id]));
}

#[tokio::test]
async fn close_ends_a_running_game_with_the_reason_shown_and_recorded() {
    let server = admin_server();
    let host = server.guest("방장").await;
    let guest = server.guest("손님").await;
    let (room, game_pk) = server.started_room("tally", json!({"target": 100}), &host, &[&guest]).await;
    let mut h = server.ws(&host).await;
    let mut g = server.ws(&guest).await;
    h.sub(&room).await;
    g.sub(&room).await;
    let cs = h.cs();
    h.act_ok(&room, cs, json!({"type": "bump"})).await;
    let (status, body) =
        server.post(&format!("/admin/api/rooms/{room}/close"), Some(ADMIN), json!({"reason": "서버 점검"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["room"]["status"], "ended");
    for ws in [&mut h, &mut g] {
        let result = ws.next_of("result").await;
        assert!(result["result"]["summary"].as_str().unwrap().contains("서버 점검"), "{result}");
        let closed = ws.next_where(|m| m["t"] == "error" && m["code"] == "room_closed").await;
        assert!(closed["reason"].as_str().unwrap().contains("서버 점검"), "{closed}");
    }
    // Recorded like any finished game, with the reason.
    let record = server.store.record(&game_pk).await.unwrap().expect("the closed game is recorded");
    assert!(record.result_json.contains("서버 점검"), "{}", record.result_json);
    assert_eq!(record.final_seq, 1);
    // The room is gone from the node and the listings.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.get(&format!("/api/rooms/{room}"), Some(&host.token)).await.0 != 404 {
        assert!(tokio::time::Instant::now() < deadline, "closed room still answers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, list) = server.get("/admin/api/rooms", Some(ADMIN)).await;
    assert!(!list["rooms"].as_array().unwrap().iter().any(|r| r["roomId"] == room.as_str()));
    assert_eq!(server.post(&format!("/admin/api/rooms/{room}/close"), Some(ADMIN), json!({})).await.0, 404);
    let text = metrics(&server).await;
    assert_eq!(sample(&text, r#"roomd_admin_actions_total{action="close",outcome="ok"}"#), 1.0);
}

#[tokio::test]
async fn closing_a_waiting_room_tells_its_watchers_and_removes_it() {
    let server = admin_server();
    let host = server.guest("방장").await;
    let room = server.create_room(&host, "tally", json!({"target": 10}), 60).await;
    let mut h = server.ws(&host).await;
    h.sub(&room).await;
    // An empty body is fine: the reason defaults.
    let (status, body) = server.post_raw(&format!("/admin/api/rooms/{room}/close"), Some(ADMIN), "").await;
    assert_eq!(status, 200, "{body}");
    let closed = h.next_where(|m| m["t"] == "error" && m["code"] == "room_closed").await;
    assert!(closed["reason"].as_str().unwrap().contains("운영 정책"), "{closed}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.get(&format!("/api/rooms/{room}"), Some(&host.token)).await.0 != 404 {
        assert!(tokio::time::Instant::now() < deadline, "closed room still answers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn drain_through_the_admin_api_does_what_sigterm_does() {
    let server = start_server_with(|s| {
        s.admin.token = Some(ADMIN.into());
        s.cluster.drain_grace_s = 2;
    });
    let host = server.guest("방장").await;
    let mut ws = server.ws(&host).await;
    let (_, nodes) = server.get("/admin/api/nodes", Some(ADMIN)).await;
    let me = nodes["nodes"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(nodes["nodes"][0]["sockets"], 1);
    let (status, body) = server.post("/admin/api/nodes/n_elsewhere/drain", Some(ADMIN), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("unknown_node")));
    let (status, body) = server.post(&format!("/admin/api/nodes/{me}/drain"), Some(ADMIN), json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(ws.close_code().await, Some(1012));
    // Not ready any more (or already stopped serving).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match server.http.get(server.url("/readyz")).send().await {
            Ok(r) if r.status() == 503 => break,
            Err(_) => break,
            Ok(_) => {}
        }
        assert!(tokio::time::Instant::now() < deadline, "node still ready after an admin drain");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node refuses to start with an admin token shorter than 32 characters, and says why
/// (without the token); before, `a` was accepted.
#[test]
fn a_short_admin_token_stops_the_node_with_its_reason() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let mut node = std::process::Command::new(env!("CARGO_BIN_EXE_roomd"))
        .current_dir(dir.path())
        .env("ROOMD__HTTP__PORT", "0")
        .env("ROOMD__STORE__KIND", "memory")
        .env("ROOMD__AUTH__SECRET", support::TEST_SECRET)
        .env("ROOMD__ADMIN__TOKEN", "short-tokn")
        .env_remove("ROOMD__REDIS__URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = node.kill();
            let _ = node.wait();
            panic!("roomd is still running with a 10-character admin token");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut said = String::new();
    node.stderr.take().unwrap().read_to_string(&mut said).unwrap();
    assert!(!status.success(), "{said}");
    assert!(said.contains("ROOMD__ADMIN__TOKEN is 10 characters long") && said.contains("at least 32"), "{said}");
    assert!(!said.contains("short-tokn"), "the token was echoed: {said}");
}

/// After 10 failures from one address, that address is answered 429 (`Retry-After`, a
/// Korean reason) whatever it sends, the right token included: a throttle the right token
/// passed would tell a guesser which guess was right. Other addresses are not held up,
/// and once the time it was told has passed, the address is let in again.
#[tokio::test]
async fn an_address_that_fails_too_often_is_throttled_even_with_the_right_token() {
    let server = admin_server();
    let guesser = "203.0.113.7";
    for i in 0..10 {
        let (status, _, body) = get_from(&server, "/admin/api/nodes", Some(&format!("guess-{i}")), guesser).await;
        assert_eq!(status, 401, "guess {i} is within the burst: {body}");
    }
    let (status, retry, body) = get_from(&server, "/admin/api/nodes", Some(ADMIN), guesser).await;
    assert_eq!(status, 429, "the right token from a throttled address: {body}");
    assert_eq!(body["code"], "rate_limited");
    assert!(body["reason"].as_str().unwrap().contains("잠시 후"), "{body}");
    let retry = retry.expect("Retry-After");
    assert!((1..=12).contains(&retry), "one failure comes back every 12 s: Retry-After {retry}");
    let (status, _, _) = get_from(&server, "/admin/api/rooms", Some("still-guessing"), guesser).await;
    assert_eq!(status, 429);
    let (status, _, body) = get_from(&server, "/admin/api/nodes", Some(ADMIN), "203.0.113.8").await;
    assert_eq!(status, 200, "another address is not throttled: {body}");
    tokio::time::sleep(Duration::from_secs(retry) + Duration::from_millis(200)).await;
    let (status, _, body) = get_from(&server, "/admin/api/nodes", Some(ADMIN), guesser).await;
    assert_eq!(status, 200, "let in again after Retry-After: {body}");
    // Refusals all counted (10 wrong, 2 throttled).
    assert_eq!(sample(&metrics(&server).await, "roomd_admin_auth_failures_total"), 12.0);
}

/// Failed admin attempts are logged as one summary line per 10 s (counts and addresses),
/// not one line each: 300 guesses used to write 300 warnings.
#[tokio::test]
async fn many_failed_admin_attempts_write_a_bounded_number_of_log_lines() {
    use support::procs::{Proc, Settings};
    let node = Proc::spawn(
        "admin-log",
        Settings::base()
            .unset("ROOMD__REDIS__URL")
            .set("ROOMD__STORE__KIND", "memory")
            .set("ROOMD__AUTH__SECRET", support::TEST_SECRET)
            .set("ROOMD__ADMIN__TOKEN", ADMIN)
            .set("ROOMD__LOG__FORMAT", "json"),
    );
    let http = reqwest::Client::new();
    let mut statuses = std::collections::BTreeMap::new();
    for i in 0..300 {
        let r = http.get(format!("{}/admin/api/rooms", node.base)).bearer_auth(format!("guess-{i}")).send().await;
        *statuses.entry(r.unwrap().status().as_u16()).or_insert(0) += 1;
    }
    assert_eq!(statuses, [(401, 10), (429, 290)].into_iter().collect(), "10 failures, then throttled");
    // The summary comes within one period (10 s) of the failures (two lines if the
    // failures straddled the end of one).
    let refused = |line: &Value| line["refused"].as_u64().unwrap() + line["throttled"].as_u64().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(25);
    let (summaries, log) = loop {
        let log = node.log.lock().unwrap().clone();
        let summaries: Vec<Value> = log
            .lines()
            .filter(|l| l.contains("admin API requests refused"))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if summaries.iter().map(refused).sum::<u64>() >= 300 {
            break (summaries, log);
        }
        assert!(tokio::time::Instant::now() < deadline, "no summary of all 300 refusals in\n{log}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(summaries.iter().map(refused).sum::<u64>(), 300);
    let warnings = log.lines().filter(|l| l.contains(r#""level":"WARN""#)).count();
    assert!(warnings <= 2, "{warnings} warnings for 300 failures:\n{log}");
    assert!(summaries[0]["addresses"].as_str().unwrap().contains("127.0.0.1"), "{}", summaries[0]);
}
