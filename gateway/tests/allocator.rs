#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! A default `roomd` runs on jemalloc (docs/bench-history-2026-12.md, "The allocator") and says so in
//! its startup log line, so an operator can tell which allocator a build runs on. It runs
//! no jemalloc background thread: on a saturated node that thread cost a fifth of its
//! Halli Galli throughput; the memory of closed sockets goes back after enough closes
//! instead (`server::trim_after_closes`).
#![cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

#[test]
fn a_default_node_names_jemalloc_as_its_allocator_and_runs_no_background_purge_thread() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut node = Command::new(env!("CARGO_BIN_EXE_roomd"))
        .env("ROOMD__HTTP__BIND", "127.0.0.1")
        .env("ROOMD__HTTP__PORT", port.to_string())
        .env("ROOMD__HTTP__WORKERS", "1")
        .env("ROOMD__AUTH__SECRET", "allocator-test-secret-0123456789abcdef")
        .env("ROOMD__STORE__KIND", "memory")
        .env("ROOMD__LOG__FORMAT", "json")
        .env_remove("ROOMD__REDIS__URL")
        .env_remove("_RJEM_MALLOC_CONF")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("roomd starts");
    // The "roomd listening" log line (JSON on stdout) names the allocator.
    let stdout = node.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if event["message"] == "roomd listening" {
                let _ = tx.send(event);
            }
        }
    });
    let listening = rx.recv_timeout(Duration::from_secs(30));
    // The log line can come before the HTTP workers' threads are spawned: wait for them
    // (a jemalloc background thread, when enabled, starts with the first arena, before).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut names = thread_names(node.id());
    while !names.iter().any(|n| n.starts_with("actix-rt")) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        names = thread_names(node.id());
    }
    let _ = node.kill();
    let _ = node.wait();
    let listening = listening.expect("roomd logged that it listens");
    assert_eq!(listening["allocator"], "jemalloc", "{listening}");
    assert!(names.iter().any(|n| n.starts_with("actix-rt")), "the node's threads were read: {names:?}");
    assert!(!names.iter().any(|n| n == "jemalloc_bg_thd"), "a jemalloc background thread runs: {names:?}");
}
