//! Server memory per WebSocket connection: opens N authenticated sockets to a running
//! roomd (each subscribed to one room, idle after the `sync`) and reports the server's
//! RSS growth per socket, read from `/proc/PID/status`.
//!
//!     target/release/roomd &              # note the printed address and the pid
//!     cargo run --release -p benches --bin conn_footprint -- --url http://127.0.0.1:PORT --pid PID --sockets 5000
//!
//! Then it closes them and reports the RSS 2 s and 35 s later (memory given back).
//!
//! Rooms are tally rooms, one per 4 sockets, so the figure also carries a quarter of a
//! small room; the open-files limit of this process and the server bound N.

use anyhow::{anyhow, Context};
use benches::loadgen::{post, proc_sample, session, ws_config, ws_url};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

const STEP: Duration = Duration::from_secs(15);

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let base = arg("--url").ok_or_else(|| anyhow!("--url http://HOST:PORT is required"))?;
    let pid: u32 = arg("--pid").ok_or_else(|| anyhow!("--pid is required"))?.parse().context("--pid")?;
    let sockets: usize = arg("--sockets").map(|s| s.parse()).transpose().context("--sockets")?.unwrap_or(2_000);
    let http = reqwest::Client::new();
    // Sessions and rooms first, so their cost is not counted per socket.
    let mut plan = Vec::with_capacity(sockets);
    let mut room = String::new();
    for i in 0..sockets {
        let s = session(&http, &base, format!("f{i}")).await?;
        if i % 4 == 0 {
            let v = post(&http, format!("{base}/api/rooms"), Some(&s.token), json!({"game": "tally"})).await?;
            room = v.get("roomId").and_then(Value::as_str).ok_or_else(|| anyhow!("no roomId"))?.to_owned();
        }
        plan.push((s.token, room.clone()));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, before) = proc_sample(pid).ok_or_else(|| anyhow!("cannot read /proc/{pid}"))?;
    let mut open = Vec::with_capacity(sockets);
    for (token, room) in &plan {
        let url = ws_url(&base, token)?;
        let (mut ws, _) = timeout(STEP, tokio_tungstenite::connect_async_with_config(url, Some(ws_config()), true))
            .await
            .context("connect timed out")??;
        ws.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await?;
        loop {
            let msg = timeout(STEP, ws.next()).await.context("no sync")?.ok_or_else(|| anyhow!("closed"))??;
            if let Message::Text(text) = msg {
                if text.contains("\"t\":\"sync\"") {
                    break;
                }
            }
        }
        open.push(ws);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, after) = proc_sample(pid).ok_or_else(|| anyhow!("cannot read /proc/{pid}"))?;
    let grown = after.saturating_sub(before) as f64;
    println!(
        "{sockets} idle subscribed sockets: server RSS {before} → {after} KiB, {:.1} KiB per socket",
        grown / sockets as f64
    );
    // Memory given back once the sockets are gone (the node trims its allocator after
    // sockets close: `server::trim_after_closes`).
    for mut ws in open {
        let _ = ws.close(None).await;
    }
    for wait in [2u64, 35] {
        tokio::time::sleep(Duration::from_secs(wait)).await;
        let (_, closed) = proc_sample(pid).ok_or_else(|| anyhow!("cannot read /proc/{pid}"))?;
        println!(
            "after closing them (+{wait} s): server RSS {closed} KiB ({:+.1} MiB against before they opened)",
            (closed as f64 - before as f64) / 1024.0
        );
    }
    Ok(())
}
