#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Writing logs never blocks or breaks the node (issue #25): `roomd` with its stdout and
//! stderr piped into a reader that exits after one byte (as a crashed log shipper would:
//! `roomd 2>&1 | head -c 1`) keeps serving, and SIGTERM still stops it within the drain
//! grace. On the old code the first failed log write was reported with `eprintln!` to the
//! same dead pipe, which panicked the task that logs "draining": SIGTERM was ignored.

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_node_whose_log_reader_died_serves_and_stops_on_sigterm() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // The reader: takes one byte and exits, closing the pipe.
    let mut head = Command::new("head").args(["-c", "1"]).stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    let pipe: OwnedFd = head.stdin.take().unwrap().into();
    let pipe_for_stderr = pipe.try_clone().unwrap();
    let mut node = Command::new(env!("CARGO_BIN_EXE_roomd"))
        .env("ROOMD__HTTP__BIND", "127.0.0.1")
        .env("ROOMD__HTTP__PORT", port.to_string())
        .env("ROOMD__HTTP__WORKERS", "1")
        .env("ROOMD__CLUSTER__DRAIN_GRACE_S", "4")
        // Its own secret and memory store (no data directory in the tree), and room for
        // the 50 sessions below from one address.
        .env("ROOMD__AUTH__SECRET", "log-output-test-secret-0123456789abcdef")
        .env("ROOMD__STORE__KIND", "memory")
        .env("ROOMD__HTTP__ADDR_RATE_PER_MIN", "100000")
        .env("ROOMD__HTTP__ADDR_BURST", "100000")
        .env("ROOMD__HTTP__ADDR_MAX_SOCKETS", "100000")
        // Chatty on purpose: every request writes lines to the dead pipe.
        .env("ROOMD__LOG__LEVEL", "debug")
        .env_remove("ROOMD__REDIS__URL")
        .stdout(Stdio::from(pipe))
        .stderr(Stdio::from(pipe_for_stderr))
        .spawn()
        .expect("roomd starts");
    let _ = head.wait();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(node.try_wait().unwrap().is_none(), "roomd exited when its log reader did");
        assert!(Instant::now() < deadline, "roomd never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Requests are served while every log line fails to be written.
    for i in 0..50 {
        let r =
            http.post(format!("{base}/api/session")).json(&serde_json::json!({"name": format!("u{i}")})).send().await;
        assert_eq!(r.expect("served").status(), 200);
    }
    assert!(node.try_wait().unwrap().is_none(), "roomd still runs");
    // SIGTERM stops it within the drain grace (4 s) plus start-up slack.
    let status = Command::new("kill").arg("-TERM").arg(node.id().to_string()).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if node.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = node.kill();
            let _ = node.wait();
            panic!("roomd ignored SIGTERM with a dead log reader");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
