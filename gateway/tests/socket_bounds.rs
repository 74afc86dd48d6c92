#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! What one WebSocket, or one client address, can make a node hold (second security
//! review, findings 1, 4, 5 and the close codes of 7): frames over the limit are refused
//! from their header, control frames count against the message rate, an address holds a
//! bounded number of sockets, and every per-address limit groups IPv6 by /64 and reads
//! IPv4-mapped IPv6 as IPv4.

mod support;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use std::time::{Duration, Instant};
use support::procs::{Proc, Settings};
use support::{start_server_with, WsClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::{self, Message};

/// The resident set of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// A raw socket upgraded to a WebSocket by hand, so the test can write any bytes.
async fn raw_socket(addr: std::net::SocketAddr, token: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /ws?token={token} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(tcp.read(&mut byte).await.unwrap(), 1, "the upgrade's answer ended early: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    tcp
}

/// The close code of the first close frame the server sends on `tcp` within `within`
/// (server frames are unmasked; anything before the close is skipped).
async fn close_code_within(tcp: &mut tokio::net::tcp::OwnedReadHalf, within: Duration) -> Option<u16> {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = Vec::new();
    loop {
        // Parse whole frames off the front.
        while buf.len() >= 2 {
            let len = usize::from(buf[1] & 0x7F);
            let (header, len) = match len {
                126 if buf.len() >= 4 => (4, usize::from(u16::from_be_bytes([buf[2], buf[3]]))),
                126 => break,
                127 => panic!("the server sent a huge frame"),
                n => (2, n),
            };
            if buf.len() < header + len {
                break;
            }
            if buf[0] & 0x0F == 0x8 {
                return (len >= 2).then(|| u16::from_be_bytes([buf[header], buf[header + 1]]));
            }
            buf.drain(..header + len);
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, tcp.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

#[tokio::test]
async fn a_frame_announcing_2_to_the_40_bytes_closes_with_1009_from_its_header_and_the_node_holds_none_of_it() {
    let node = Proc::spawn(
        "bounds",
        Settings::base()
            .unset("ROOMD__REDIS__URL")
            .set("ROOMD__STORE__KIND", "memory")
            .set("ROOMD__AUTH__SECRET", "socket-bounds-test-secret-0123456789abcdef"),
    );
    let pid = node.pid().expect("the node runs");
    let http = reqwest::Client::new();
    let (_, token) = support::procs::guest(&http, &node.base, "도윤").await;
    // Warm the node up with one ordinary socket, so what it allocates once is not counted.
    drop(raw_socket(node.addr(), &token).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss(pid);

    let (mut read, mut write) = raw_socket(node.addr(), &token).await.into_split();
    // A masked binary frame announcing 2^40 bytes.
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(1u64 << 40).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    write.write_all(&header).await.unwrap();
    let sent_header = Instant::now();
    // Keep sending, as the attacker did, while the close is awaited: 64 MiB, or until the
    // node stops taking bytes.
    let sender = tokio::spawn(async move {
        let chunk = vec![0x55u8; 64 * 1024];
        let mut sent = 0usize;
        while sent < 64 << 20 {
            match tokio::time::timeout(Duration::from_secs(5), write.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                _ => break,
            }
        }
        sent
    });
    let code = close_code_within(&mut read, Duration::from_secs(5)).await;
    let closed_after = sent_header.elapsed();
    assert_eq!(code, Some(1009), "the frame is refused with 1009");
    assert!(closed_after < Duration::from_secs(1), "closed {closed_after:?} after the header");
    let sent = sender.await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown = rss(pid).saturating_sub(before);
    assert!(grown < 8 << 20, "the node's RSS grew by {grown} bytes after {sent} bytes were sent");
    // The node goes on serving.
    let mut c = support::procs::connect(&node, &token).await;
    support::procs::send(&mut c, serde_json::json!({"t": "sub", "room": "r_nothing"})).await;
    let answer = support::procs::next_within(&mut c, Duration::from_secs(5), |m| m["t"] == "error").await;
    assert!(answer.is_some(), "the node still answers");
}

#[tokio::test]
async fn a_ping_flood_is_closed_with_1008_and_only_pings_within_the_rate_are_answered() {
    let server = start_server_with(|s| {
        s.ws.rate_per_s = 10;
        s.ws.burst = 10;
        s.ws.flood_limit = 20;
    });
    let user = server.guest("도윤").await;
    let (ws, _) = tokio_tungstenite::connect_async(server.url("/ws").replace("http", "ws") + "?token=" + &user.token)
        .await
        .unwrap();
    let (mut sink, mut stream) = ws.split();
    // Pings go out while the answers are read (a sender that only wrote would stall once
    // the node's answers filled the socket).
    let flood = tokio::spawn(async move {
        for _ in 0..2_000 {
            if sink.send(Message::Ping(b"x".to_vec().into())).await.is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut pongs = 0;
    let mut close = None;
    while let Ok(Some(message)) = tokio::time::timeout_at(deadline, stream.next()).await {
        match message {
            Ok(Message::Pong(_)) => pongs += 1,
            Ok(Message::Close(frame)) => {
                close = frame.map(|f| u16::from(f.code));
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    flood.abort();
    assert_eq!(close, Some(1008), "a ping flood is closed as a policy violation");
    assert!(pongs <= 10 + 10 * (started.elapsed().as_secs() as usize + 1), "{pongs} pongs: the flood was answered");
}

#[tokio::test]
async fn a_text_frame_that_is_not_utf8_closes_with_1007() {
    let server = start_server_with(|_| {});
    let user = server.guest("도윤").await;
    let mut c = server.ws(&user).await;
    let bad = Frame::message(vec![b'{', 0xC3, 0x28, b'}'], OpCode::Data(Data::Text), true);
    c.send_frame(bad).await;
    assert_eq!(c.close_code().await, Some(1007));
}

async fn upgrade_status(addr: std::net::SocketAddr, token: &str, forwarded: &str) -> (u16, Option<WsClientOrBody>) {
    let mut request =
        tungstenite::client::IntoClientRequest::into_client_request(format!("ws://{addr}/ws?token={token}")).unwrap();
    request.headers_mut().insert("x-forwarded-for", forwarded.parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => (101, Some(WsClientOrBody::Socket(Box::new(ws)))),
        Err(tungstenite::Error::Http(resp)) => {
            let status = resp.status().as_u16();
            let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
            let body = resp.body().as_ref().map(|b| serde_json::from_slice::<Value>(b).unwrap());
            (status, Some(WsClientOrBody::Refused(body, retry)))
        }
        Err(e) => panic!("upgrade failed: {e}"),
    }
}

enum WsClientOrBody {
    /// Held open while the test needs it.
    Socket(#[allow(dead_code)] Box<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>>),
    Refused(Option<Value>, Option<String>),
}

#[tokio::test]
async fn an_address_holds_a_bounded_number_of_sockets_counted_by_ipv4_or_ipv6_64() {
    let server = start_server_with(|s| {
        s.http.addr_max_sockets = 2;
        // The test client is the trusted proxy: each request names its client.
        s.http.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    });
    let mut users = Vec::new();
    for i in 0..8 {
        users.push(server.guest(&format!("손님{i}")).await);
    }
    let addr = server.addr;
    // Two sockets of one /64 (different users, different last 64 bits); the third from
    // that /64 is refused with a reason, another /64 is not.
    let (s1, first) = upgrade_status(addr, &users[0].token, "2001:db8:7:1::10").await;
    let (s2, _second) = upgrade_status(addr, &users[1].token, "2001:db8:7:1:ffff::20").await;
    assert_eq!((s1, s2), (101, 101));
    let (s3, refused) = upgrade_status(addr, &users[2].token, "2001:db8:7:1::30").await;
    assert_eq!(s3, 429);
    let Some(WsClientOrBody::Refused(Some(body), retry)) = refused else { panic!("no body") };
    assert_eq!(body["code"], "too_many_sockets", "{body}");
    assert!(body["reason"].as_str().unwrap().chars().any(|c| ('가'..='힣').contains(&c)), "{body}");
    assert!(retry.is_some(), "a 429 says when to retry");
    let other_64 = upgrade_status(addr, &users[3].token, "2001:db8:7:2::30").await;
    assert_eq!(other_64.0, 101);
    // An IPv4-mapped address is its IPv4 address (the sockets are kept open).
    let v4 = upgrade_status(addr, &users[4].token, "198.51.100.7").await;
    let mapped = upgrade_status(addr, &users[5].token, "::ffff:198.51.100.7").await;
    assert_eq!((v4.0, mapped.0), (101, 101));
    assert_eq!(upgrade_status(addr, &users[6].token, "198.51.100.7").await.0, 429);
    // A closed socket gives its place back.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    while upgrade_status(addr, &users[7].token, "2001:db8:7:1::40").await.0 != 101 {
        assert!(Instant::now() < deadline, "the closed socket's place was never given back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn rate_limits_count_an_ipv6_64_as_one_address_and_retry_after_is_when_a_request_passes() {
    let server = start_server_with(|s| {
        // One guest session every 2 s after a burst of one.
        s.http.addr_rate_per_min = 30;
        s.http.addr_burst = 1;
        s.http.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    });
    let http = reqwest::Client::new();
    let session = |from: &'static str| {
        http.post(server.url("/api/session"))
            .header("x-forwarded-for", from)
            .json(&serde_json::json!({"name": "도윤"}))
            .send()
    };
    assert_eq!(session("2001:db8:9:1::1").await.unwrap().status(), 200);
    // Another address of the same /64 shares the budget; the mapped form of an IPv4
    // address shares that address's.
    let refused = session("2001:db8:9:1::2").await.unwrap();
    assert_eq!(refused.status(), 429);
    let retry: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert_eq!(session("203.0.113.9").await.unwrap().status(), 200);
    assert_eq!(session("::ffff:203.0.113.9").await.unwrap().status(), 429);
    // The bucket refills one every 2 s: a wait said as 1 s would be refused again.
    assert_eq!(retry, 2, "Retry-After rounds the wait up");
    tokio::time::sleep(Duration::from_secs(retry)).await;
    assert_eq!(session("2001:db8:9:1::3").await.unwrap().status(), 200, "a client that waited Retry-After passes");
}

#[tokio::test]
async fn the_frame_limit_still_closes_an_ordinary_oversized_message_with_1009() {
    let server = start_server_with(|s| s.ws.max_frame_bytes = 1024);
    let user = server.guest("도윤").await;
    let mut c = WsClient::connect(server.addr, &user.token).await.unwrap();
    c.send_text(format!("{{\"t\":\"{}\"}}", "x".repeat(2000))).await;
    assert_eq!(c.close_code().await, Some(1009));
}
