#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The findings of the outside probe (issue 26), one test or more each: no usable default
//! secret and every claim checked (1), limits per client address and per node (2), rooms
//! nobody can squat (3), honest names (4), security headers (5), short error reasons (6),
//! fragmented WebSocket messages (7).

mod support;

use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};
use std::time::Duration;
use support::{start_server, start_server_with, Server, User, WsClient, TEST_SECRET, WAIT};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;

/// The development secret roomd used to compile in.
const OLD_BUILT_IN_SECRET: &str = "roomd-dev-secret-change-me";

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// A token signed with `secret` carrying exactly `claims`.
fn sign(secret: &str, claims: Value) -> String {
    encode(&Header::default(), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
}

/// A valid token of the test secret for `sub`, as another login service would mint it.
fn minted(sub: &str) -> User {
    User { id: sub.into(), token: sign(TEST_SECRET, json!({"sub": sub, "name": "민지", "exp": now() + 3600})) }
}

fn upgrade_status(result: Result<WsClient, tungstenite::Error>) -> u16 {
    match result {
        Err(tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("expected an HTTP refusal, got {e}"),
        Ok(_) => 101,
    }
}

// ---- 1. secrets and claims -----------------------------------------------------------

#[tokio::test]
async fn a_default_embedded_node_refuses_tokens_signed_with_the_old_built_in_secret() {
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("roomd-data");
    let dir = path.to_str().unwrap().to_owned();
    let server = start_server_with(|s| {
        s.auth.secret = None;
        s.store.path = dir.clone();
    });
    let victim = server.guest("도윤").await;
    let forged = sign(OLD_BUILT_IN_SECRET, json!({"sub": victim.id, "name": "도윤", "exp": now() + 3600}));
    let (status, body) = server.get("/api/me/games", Some(&forged)).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")), "{body}");
    assert_eq!(upgrade_status(WsClient::connect(server.addr, &forged).await), 401);
    // The node's own tokens work.
    let (status, _) = server.get("/api/me/games", Some(&victim.token)).await;
    assert_eq!(status, 200);

    // The generated secret is in the data directory, readable by its owner only.
    let file = path.join(gateway::auth::SECRET_FILE);
    let secret = std::fs::read_to_string(&file).unwrap();
    assert!(secret.trim().len() >= 64, "{secret}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    }
    // A restart on the same data directory keeps tokens valid; another directory does not.
    let again = start_server_with(|s| {
        s.auth.secret = None;
        s.store.path = dir.clone();
    });
    assert_eq!(again.get("/api/me/games", Some(&victim.token)).await.0, 200);
    let elsewhere = tempfile::tempdir().unwrap();
    let other_dir = elsewhere.path().to_str().unwrap().to_owned();
    let other = start_server_with(|s| {
        s.auth.secret = None;
        s.store.path = other_dir;
    });
    assert_eq!(other.get("/api/me/games", Some(&victim.token)).await.0, 401);
}

#[test]
fn a_node_configured_with_the_old_public_secret_does_not_start() {
    let mut s = support::test_settings();
    s.auth.secret = Some(OLD_BUILT_IN_SECRET.into());
    assert!(gateway::server::AppState::new(s).is_err());
}

#[tokio::test]
async fn claims_the_server_relies_on_are_checked_over_http_and_websocket() {
    let server = start_server();
    let t = now();
    for (what, claims) in [
        ("no exp", json!({"sub": "u_1", "name": "민지"})),
        ("a year long", json!({"sub": "u_1", "name": "민지", "exp": t + 365 * 24 * 3600})),
        ("not yet valid", json!({"sub": "u_1", "name": "민지", "exp": t + 600, "nbf": t + 300})),
        ("a bot's id", json!({"sub": "bot_r_0123456789ab_1", "name": "민지", "exp": t + 600})),
        ("a 10,000-character name", json!({"sub": "u_1", "name": "x".repeat(10_000), "exp": t + 600})),
        ("a bidi override", json!({"sub": "u_1", "name": "\u{202e}evil", "exp": t + 600})),
        ("a zero-width space", json!({"sub": "u_1", "name": "민지\u{200b}", "exp": t + 600})),
        ("a fullwidth id", json!({"sub": "u_1", "name": "ｕ_0123456789abcdef", "exp": t + 600})),
    ] {
        let token = sign(TEST_SECRET, claims);
        let (status, _) = server.get("/api/rooms", Some(&token)).await;
        assert_eq!(status, 401, "{what} over HTTP");
        assert_eq!(upgrade_status(WsClient::connect(server.addr, &token).await), 401, "{what} over WebSocket");
    }
}

/// Issue 55: a header that lists critical extensions (`crit`) is refused, even with the
/// right signature (roomd understands no extension).
#[tokio::test]
async fn a_token_whose_header_names_crit_is_refused_over_http_and_websocket() {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    let server = start_server();
    let claims = json!({"sub": "u_crit", "name": "민지", "exp": now() + 600});
    let signed = |header: Value| {
        let message =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let key = EncodingKey::from_secret(TEST_SECRET.as_bytes());
        let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256).unwrap();
        format!("{message}.{signature}")
    };
    // The same token by hand without `crit` is good: only `crit` makes the difference.
    let plain = signed(json!({"alg": "HS256", "typ": "JWT"}));
    assert_eq!(server.get("/api/rooms", Some(&plain)).await.0, 200);
    let crit = signed(json!({"alg": "HS256", "typ": "JWT", "crit": ["exp"]}));
    let (status, body) = server.get("/api/rooms", Some(&crit)).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")), "{body}");
    assert_eq!(upgrade_status(WsClient::connect(server.addr, &crit).await), 401);
}

#[tokio::test]
async fn a_socket_is_closed_when_its_token_expires() {
    let server = start_server();
    let token = sign(TEST_SECRET, json!({"sub": "u_short", "name": "민지", "exp": now() + 2}));
    let mut c = WsClient::connect(server.addr, &token).await.unwrap();
    let e = c.next_of("error").await;
    assert_eq!(e["code"], "token_expired", "{e}");
    assert_eq!(c.close_code().await, Some(1008));
}

#[tokio::test]
async fn a_token_that_expires_several_heartbeats_after_the_socket_opened_still_closes_it() {
    // The expiry is armed by the socket's periodic tick once it is due within a tick: a
    // token that outlives the first ticks is closed by a later one, on time.
    let server = start_server_with(|s| s.ws.heartbeat_s = 1);
    let token = sign(TEST_SECRET, json!({"sub": "u_later", "name": "민지", "exp": now() + 4}));
    let opened = std::time::Instant::now();
    let mut c = WsClient::connect(server.addr, &token).await.unwrap();
    let e = c.next_of("error").await;
    assert_eq!(e["code"], "token_expired", "{e}");
    assert!(opened.elapsed() >= Duration::from_secs(2), "not before its exp: {:?}", opened.elapsed());
    assert_eq!(c.close_code().await, Some(1008));
}

// ---- 2. limits per address and per node ----------------------------------------------

async fn session_response(server: &Server, forwarded: Option<&str>) -> reqwest::Response {
    let mut req = server.http.post(server.url("/api/session")).json(&json!({"name": "손님"}));
    if let Some(f) = forwarded {
        req = req.header("x-forwarded-for", f);
    }
    req.send().await.unwrap()
}

async fn assert_limited(resp: reqwest::Response, what: &str) {
    assert_eq!(resp.status().as_u16(), 429, "{what}");
    let retry: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1, "{what}: Retry-After {retry}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited", "{what}: {body}");
    assert!(body["reason"].as_str().unwrap().chars().any(|c| ('가'..='힣').contains(&c)), "{body}");
}

fn slow_limits(s: &mut gateway::config::Settings) {
    s.http.addr_rate_per_min = 1;
    s.http.addr_burst = 3;
}

#[tokio::test]
async fn guest_sessions_rooms_and_upgrades_are_limited_per_address() {
    let server = start_server_with(slow_limits);
    for _ in 0..3 {
        assert_eq!(session_response(&server, None).await.status().as_u16(), 200);
    }
    assert_limited(session_response(&server, None).await, "4th session").await;

    // Room creation: tokens minted elsewhere (not by guest sessions) are limited too.
    for i in 0..3 {
        let host = minted(&format!("u_host{i}"));
        let (status, body) = server.post("/api/rooms", Some(&host.token), json!({"game": "tally"})).await;
        assert_eq!(status, 200, "{body}");
    }
    let resp = server
        .http
        .post(server.url("/api/rooms"))
        .bearer_auth(minted("u_host9").token)
        .json(&json!({"game": "tally"}))
        .send()
        .await
        .unwrap();
    assert_limited(resp, "4th room").await;

    let mut open = Vec::new();
    for i in 0..3 {
        open.push(WsClient::connect(server.addr, &minted(&format!("u_ws{i}")).token).await.unwrap());
    }
    assert_eq!(upgrade_status(WsClient::connect(server.addr, &minted("u_ws9").token).await), 429);
}

#[tokio::test]
async fn forwarded_for_counts_only_behind_a_trusted_proxy() {
    // Not trusted: the header changes nothing, every request is 127.0.0.1's.
    let direct = start_server_with(slow_limits);
    for ip in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
        assert_eq!(session_response(&direct, Some(ip)).await.status().as_u16(), 200);
    }
    assert_limited(session_response(&direct, Some("4.4.4.4")).await, "spoofed header").await;

    // Behind a trusted proxy on 127.0.0.1: each forwarded client has its own budget.
    let proxied = start_server_with(|s| {
        slow_limits(s);
        s.http.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    });
    for _ in 0..3 {
        assert_eq!(session_response(&proxied, Some("1.1.1.1")).await.status().as_u16(), 200);
    }
    assert_limited(session_response(&proxied, Some("1.1.1.1")).await, "1.1.1.1's 4th").await;
    // A client cannot escape by writing its own entries left of the proxy's.
    assert_limited(session_response(&proxied, Some("9.9.9.9, 1.1.1.1")).await, "prepended").await;
    assert_eq!(session_response(&proxied, Some("2.2.2.2")).await.status().as_u16(), 200);
}

#[tokio::test]
async fn the_node_caps_its_open_sockets_with_503() {
    let server = start_server_with(|s| s.http.max_connections = 2);
    let a = server.ws(&minted("u_a")).await;
    let _b = server.ws(&minted("u_b")).await;
    assert_eq!(upgrade_status(WsClient::connect(server.addr, &minted("u_c").token).await), 503);
    a.drop_connection();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match WsClient::connect(server.addr, &minted("u_c").token).await {
            Ok(_) => break,
            Err(_) if tokio::time::Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("a freed slot is never reusable: {e}"),
        }
    }
}

// ---- 3. rooms nobody can squat -------------------------------------------------------

#[tokio::test]
async fn a_room_that_never_starts_expires_and_its_watchers_are_told() {
    let server = start_server_with(|s| s.rooms.waiting_ttl_s = 1);
    let host = server.guest("방장").await;
    let room = server.create_room(&host, "tally", json!({}), 60).await;
    let mut c = server.ws(&host).await;
    c.sub(&room).await;
    let e = c.next_where(|m| m["t"] == "error").await;
    assert_eq!((e["code"].as_str(), e["room"].as_str()), (Some("room_expired"), Some(room.as_str())), "{e}");
    let (status, _) = server.get(&format!("/api/rooms/{room}"), Some(&host.token)).await;
    assert_eq!(status, 404);
    // A started room does not expire.
    let (started, _) = server.started_room("tally", json!({}), &host, &[]).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(server.get(&format!("/api/rooms/{started}"), Some(&host.token)).await.0, 200);
}

#[tokio::test]
async fn one_user_sits_in_a_bounded_number_of_waiting_rooms() {
    let server = start_server_with(|s| s.rooms.max_waiting_seats_per_user = 2);
    let squatter = server.guest("자리").await;
    let mut rooms = Vec::new();
    for i in 0..3 {
        let host = server.guest(&format!("방장{i}")).await;
        rooms.push(server.create_room(&host, "tally", json!({}), 60).await);
    }
    server.seat(&rooms[0], &squatter).await;
    server.seat(&rooms[1], &squatter).await;
    let (status, body) = server.post(&format!("/api/rooms/{}/seats", rooms[2]), Some(&squatter.token), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (429, Some("too_many_waiting_seats")), "{body}");
    // Sitting again where one already sits is fine; so is creating once a seat is freed.
    server.seat(&rooms[0], &squatter).await;
    let (status, _) = server.post("/api/rooms", Some(&squatter.token), json!({"game": "tally"})).await;
    assert_eq!(status, 429);
    let resp = server
        .http
        .delete(server.url(&format!("/api/rooms/{}/seats/me", rooms[0])))
        .bearer_auth(&squatter.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    server.seat(&rooms[2], &squatter).await;
}

async fn delete(server: &Server, path: &str, token: &str) -> (u16, Value) {
    let resp = server.http.delete(server.url(path)).bearer_auth(token).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_host_removes_a_seated_player_who_is_told_why() {
    let server = start_server();
    let host = server.guest("방장").await;
    let guest = server.guest("손님").await;
    let other = server.guest("구경꾼").await;
    let room = server.create_room(&host, "tally", json!({}), 60).await;
    server.seat(&room, &guest).await;
    server.seat(&room, &other).await;
    let mut g = server.ws(&guest).await;
    g.sub(&room).await;

    let (status, body) = delete(&server, &format!("/api/rooms/{room}/seats/{}", host.id), &guest.token).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("not_host")), "{body}");
    let (status, body) = delete(&server, &format!("/api/rooms/{room}/seats/{}", host.id), &host.token).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("cannot_remove_host")), "{body}");
    let (status, body) = delete(&server, &format!("/api/rooms/{room}/seats/u_nobody"), &host.token).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_seated")), "{body}");

    let (status, info) = delete(&server, &format!("/api/rooms/{room}/seats/{}", guest.id), &host.token).await;
    assert_eq!(status, 200, "{info}");
    let seated: Vec<&str> = info["seats"].as_array().unwrap().iter().map(|s| s["userId"].as_str().unwrap()).collect();
    assert_eq!(seated, [host.id.as_str(), other.id.as_str()]);
    let e = g.next_where(|m| m["t"] == "error").await;
    assert_eq!((e["code"].as_str(), e["room"].as_str()), (Some("removed_from_seat"), Some(room.as_str())), "{e}");
    assert!(e["reason"].as_str().unwrap().contains("방장"), "{e}");

    // Issue 55: they may watch, but not sit in that room again (like a kick); others may.
    let (status, body) = server.post(&format!("/api/rooms/{room}/seats"), Some(&guest.token), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("removed_from_seat")), "{body}");
    assert_eq!(body["reason"].as_str(), Some("방장이 자리에서 내보냈어요. 이 방에는 다시 앉을 수 없어요"), "{body}");
    let sync = g.sub(&room).await;
    assert_eq!(sync["room"].as_str(), Some(room.as_str()), "{sync}");
    let newcomer = server.guest("새손님").await;
    server.seat(&room, &newcomer).await;

    // Once the game runs, nobody is removed.
    server.start(&room, &host).await;
    let (status, body) = delete(&server, &format!("/api/rooms/{room}/seats/{}", other.id), &host.token).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("already_started")), "{body}");
}

// ---- 4. names ------------------------------------------------------------------------

#[tokio::test]
async fn invisible_bidi_overlong_and_id_like_names_are_refused() {
    let server = start_server();
    let someone = server.guest("누군가").await;
    for bad in [
        "\u{200b}".to_owned(),
        "\u{3164}".to_owned(),
        "\u{202e}evil".to_owned(),
        "a\u{2067}b".to_owned(),
        "가".repeat(21),
        "x".repeat(10_000),
        someone.id.clone(),
        "bot_r_0123456789ab_1".to_owned(),
    ] {
        let (status, body) = server.post("/api/session", None, json!({ "name": bad })).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("bad_name")), "{bad:?}: {body}");
    }
    let (status, body) = server.post("/api/session", None, json!({"name": "  도윤  "})).await;
    assert_eq!((status, body["name"].as_str()), (200, Some("도윤")), "{body}");
    // 8 flags are 8 characters to a person in 64 bytes; a ninth is one byte too many.
    let (status, _) = server.post("/api/session", None, json!({"name": "🇰🇷".repeat(8)})).await;
    assert_eq!(status, 200);
    let (status, _) = server.post("/api/session", None, json!({"name": "🇰🇷".repeat(9)})).await;
    assert_eq!(status, 400);
}

/// Issue 55, finding 6 and the look-alikes of 7: a 64 KB name of one letter under 32,000
/// accents, a zero-width space after a name, a fullwidth id, a line separator inside.
#[tokio::test]
async fn heavy_zero_width_fullwidth_id_and_multiline_names_are_refused() {
    let server = start_server();
    let reason = "이름은 보이는 글자 1~20자로 정해 주세요";
    for bad in [
        format!("a{}", "\u{0301}".repeat(32_000)),
        "Alice\u{200b}".to_owned(),
        "ｕ_0123456789abcdef".to_owned(),
        "ｕ＿０１２３４５６７８９ａｂｃｄｅｆ".to_owned(),
        "Ali\u{2028}ce".to_owned(),
    ] {
        let shown: String = bad.chars().take(12).collect();
        let (status, body) = server.post("/api/session", None, json!({ "name": bad })).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("bad_name")), "{shown:?}: {body}");
        assert_eq!(body["reason"].as_str(), Some(reason), "{shown:?}");
    }
    // A name is stored in NFC: the decomposed and the composed spelling are one name.
    let (status, body) = server.post("/api/session", None, json!({"name": "Jose\u{0301}"})).await;
    assert_eq!((status, body["name"].as_str()), (200, Some("Jos\u{e9}")), "{body}");
}

// ---- 5. headers ----------------------------------------------------------------------

#[tokio::test]
async fn responses_carry_security_headers_and_tokens_are_not_cached() {
    let server = start_server();
    let page = server.http.get(server.url("/")).send().await.unwrap();
    let h = page.headers().clone();
    let csp = h["content-security-policy"].to_str().unwrap().to_owned();
    for part in ["script-src 'self'", "frame-ancestors 'none'", "default-src 'none'", "connect-src 'self'"] {
        assert!(csp.contains(part), "{csp} lacks {part}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["referrer-policy"], "no-referrer");
    // The page itself has no inline script, style or handler the CSP would block.
    let html = page.text().await.unwrap();
    for tag in html.split("<script").skip(1) {
        let open = tag.split('>').next().unwrap();
        assert!(open.contains("src="), "inline script: <script{open}>");
    }
    assert!(!html.contains("<style") && !html.contains(" style="), "inline style in index.html");
    assert!(!html.contains(" onclick=") && !html.contains(" onload="), "inline handler in index.html");

    let session = session_response(&server, None).await;
    assert_eq!(session.headers()["cache-control"], "no-store");
    let user = server.guest("도윤").await;
    let rooms = server.http.get(server.url("/api/rooms")).bearer_auth(&user.token).send().await.unwrap();
    assert_eq!(rooms.headers()["cache-control"], "no-store");
    assert_eq!(rooms.headers()["x-content-type-options"], "nosniff");
    let asset = server.http.get(server.url("/static/app.js")).send().await.unwrap();
    assert_eq!(asset.headers()["cache-control"], "no-cache");
    assert!(asset.headers().contains_key("content-security-policy"));
}

/// Issue 60: a node with a public URL lets its page connect to the other nodes of its
/// deployment (the SDK opens a room's socket at its owner's `nodeUrl`), and nowhere else.
#[tokio::test]
async fn a_node_with_a_public_url_lets_its_page_reach_the_other_nodes_sockets() {
    let server = start_server_with(|s| s.node.public_url = Some("https://roomd-0.rooms.example.com".into()));
    let page = server.http.get(server.url("/")).send().await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("connect-src 'self' https://*.rooms.example.com wss://*.rooms.example.com;"), "{csp}");
    assert!(csp.contains("script-src 'self';") && !csp.contains("unsafe-inline"), "{csp}");
}

// ---- 6. error reasons ----------------------------------------------------------------

#[tokio::test]
async fn errors_never_echo_input_or_parser_internals() {
    let server = start_server();
    let (status, body) = server.post_raw("/api/session", None, r#"{"name":"x","admin":true}"#).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_json")), "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(!reason.contains("admin") && !reason.contains("line") && !reason.contains("expected"), "{reason}");

    let user = server.guest("도윤").await;
    let long = "A".repeat(5000);
    let (status, body) = server.post("/api/rooms", Some(&user.token), json!({ "game": long })).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("unknown_game")), "{body}");
    assert!(body["reason"].as_str().unwrap().len() < 100, "{body}");
    let (status, body) =
        server.post("/api/rooms", Some(&user.token), json!({"game": "tally", "options": { long.clone(): 1 }})).await;
    assert_eq!(status, 400);
    assert!(body["reason"].as_str().unwrap().len() < 100, "{body}");
    let (status, body) = server.get(&format!("/api/rooms?{long}=1"), Some(&user.token)).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_query")));
    assert!(!body["reason"].as_str().unwrap().contains("AAA"), "{body}");

    let (room, _) = server.started_room("tally", json!({}), &user, &[]).await;
    let mut c = server.ws(&user).await;
    c.sub(&room).await;
    c.send(json!({ "t": long })).await;
    let e = c.next_of("error").await;
    assert!(e["reason"].as_str().unwrap().len() < 100, "{e}");
    c.send_text(format!("{{\"t\":\"sub\",\"room\":{long}")).await;
    let e = c.next_of("error").await;
    assert!(!e["reason"].as_str().unwrap().contains("line"), "{e}");
    let r = c.act(&room, 1, json!({"type": long})).await;
    assert_eq!((r["t"].as_str(), r["code"].as_str()), (Some("reject"), Some("bad_action")), "{r}");
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.len() < 100 && !reason.contains("variant"), "{reason}");
}

// ---- 7. fragmented messages ----------------------------------------------------------

#[tokio::test]
async fn a_fragmented_message_is_reassembled() {
    let server = start_server();
    let user = server.guest("도윤").await;
    let room = server.create_room(&user, "tally", json!({}), 60).await;
    let mut c = server.ws(&user).await;
    let text = json!({"t": "sub", "room": room}).to_string();
    let (a, b) = text.split_at(7);
    c.send_frame(Frame::message(a.to_owned(), OpCode::Data(Data::Text), false)).await;
    c.send_frame(Frame::message(b.to_owned(), OpCode::Data(Data::Continue), true)).await;
    let sync = c.next_where(|m| m["t"] == "sync" || m["t"] == "error").await;
    assert_eq!((sync["t"].as_str(), sync["room"].as_str()), (Some("sync"), Some(room.as_str())), "{sync}");
}

#[tokio::test]
async fn fragments_beyond_the_frame_limit_close_with_1009() {
    let server = start_server_with(|s| s.ws.max_frame_bytes = 1024);
    let user = server.guest("도윤").await;
    let mut c = server.ws(&user).await;
    let chunk = "x".repeat(600);
    c.send_frame(Frame::message(format!("{{\"t\":\"{chunk}"), OpCode::Data(Data::Text), false)).await;
    c.send_frame(Frame::message(chunk.clone(), OpCode::Data(Data::Continue), false)).await;
    c.send_frame(Frame::message(chunk, OpCode::Data(Data::Continue), true)).await;
    assert_eq!(c.close_code().await, Some(1009));
}

#[tokio::test]
async fn a_continuation_without_a_start_closes_with_1002() {
    let server = start_server();
    let user = server.guest("도윤").await;
    let mut c = server.ws(&user).await;
    c.send_frame(Frame::message("stray".to_owned(), OpCode::Data(Data::Continue), true)).await;
    assert_eq!(c.close_code().await, Some(1002));
}
