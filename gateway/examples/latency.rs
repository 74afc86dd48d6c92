//! Action → own-update latency over real WebSockets against an in-process node.
//!
//! Opens `ROOMS` tally rooms (target `null`: never ends) with two players each; every
//! player bumps in a loop, waiting for the answer before the next bump, `ACTIONS` times.
//! For each bump it records the time from sending the `act` to receiving the `update`
//! that shows the player's own bump (`last` = the player), and to its `ack`; then it
//! prints p50/p99/max of both and the actions per second over the whole run.
//!
//! ```text
//! cargo run --release -p gateway --example latency -- [ROOMS] [ACTIONS] [memory|file]
//! ```
//!
//! `file` runs the node on the durable file store in a fresh temporary data directory
//! (every ack waits for an fsync'd group commit); the default is the in-memory store.

use anyhow::{anyhow, bail, Context as _};
use futures_util::{SinkExt, StreamExt};
use gateway::config::{Settings, StoreKind};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// No single answer may take longer than this.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

fn start_node(kind: StoreKind, dir: &std::path::Path) -> anyhow::Result<SocketAddr> {
    let mut settings = Settings::load(None)?;
    settings.store.kind = kind;
    settings.store.path = dir.display().to_string();
    settings.http.bind = "127.0.0.1".into();
    settings.http.port = 0;
    settings.ws.rate_per_s = 100_000;
    settings.ws.burst = 100_000;
    settings.ws.client_timeout_s = 600;
    settings.rooms.max_open_per_user = 10_000;
    // All the load comes from 127.0.0.1: lift the per-address limits (as benches/run.sh does).
    settings.http.addr_rate_per_min = 100_000_000;
    settings.http.addr_burst = 100_000_000;
    settings.http.addr_max_sockets = 1_000_000;
    settings.http.max_connections = 1_000_000;
    settings.rooms.max_waiting_seats_per_user = 1_000_000;
    settings.log.level = "warn".into();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            match gateway::server::start(settings) {
                Ok(running) => {
                    let _ = tx.send(Ok(running.addr));
                    let _ = running.server.await;
                }
                Err(e) => {
                    let _ = tx.send(Err(anyhow!("server did not start: {e}")));
                }
            }
        });
    });
    rx.recv_timeout(Duration::from_secs(30))?
}

struct Api {
    http: reqwest::Client,
    addr: SocketAddr,
}

impl Api {
    async fn post(&self, path: &str, token: Option<&str>, body: Value) -> anyhow::Result<Value> {
        let mut req = self.http.post(format!("http://{}{path}", self.addr)).json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let body: Value = resp.json().await?;
        if !status.is_success() {
            bail!("{path}: {status} {body}");
        }
        Ok(body)
    }

    async fn guest(&self, name: &str) -> anyhow::Result<(String, String)> {
        let body = self.post("/api/session", None, json!({ "name": name })).await?;
        let field = |k: &str| body[k].as_str().map(str::to_owned).ok_or_else(|| anyhow!("no {k} in {body}"));
        Ok((field("userId")?, field("token")?))
    }
}

/// Latencies (µs) to the own update and to the ack, one pair per action.
async fn player(
    addr: SocketAddr,
    room: String,
    me: String,
    token: String,
    actions: u64,
) -> anyhow::Result<Vec<(u64, u64)>> {
    // Nagle off, as a latency-sensitive client would have it.
    let url = format!("ws://{addr}/ws?token={token}");
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true).await?;
    ws.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await?;
    let mut out = Vec::with_capacity(actions as usize);
    let mut synced = false;
    for cs in 1..=actions {
        let sent = Instant::now();
        let act = json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}});
        ws.send(Message::text(act.to_string())).await?;
        let mut own_update = None;
        loop {
            let frame = tokio::time::timeout(ANSWER_TIMEOUT, ws.next()).await.context("no answer in time")?;
            let text = match frame {
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
                None => bail!("socket closed"),
            };
            let msg: Value = serde_json::from_str(text.as_str())?;
            match msg["t"].as_str() {
                Some("sync") => synced = true,
                Some("update") if synced && own_update.is_none() && msg["view"]["last"] == me.as_str() => {
                    own_update = Some(sent.elapsed());
                }
                Some("ack") if msg["cs"] == cs => {
                    let ack = sent.elapsed();
                    let update = own_update.unwrap_or(ack);
                    out.push((update.as_micros() as u64, ack.as_micros() as u64));
                    break;
                }
                Some("reject" | "error") => bail!("refused: {msg}"),
                _ => {}
            }
        }
    }
    Ok(out)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

fn report(name: &str, mut v: Vec<u64>) {
    v.sort_unstable();
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "{name:<12} p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>7.3} ms",
        ms(percentile(&v, 0.50)),
        ms(percentile(&v, 0.99)),
        ms(v.last().copied().unwrap_or(0))
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let rooms: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20);
    let actions: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(500);
    let kind = match args.next().as_deref() {
        None | Some("memory") => StoreKind::Memory,
        Some("file") => StoreKind::File,
        Some(other) => bail!("store {other:?}: memory or file"),
    };
    let dir = tempfile::tempdir()?;
    let addr = start_node(kind, dir.path())?;
    println!("store: {kind:?}");
    let api = Api { http: reqwest::Client::new(), addr };

    let mut players = Vec::new();
    for r in 0..rooms {
        let (host, host_token) = api.guest(&format!("호스트{r}")).await?;
        let (guest, guest_token) = api.guest(&format!("손님{r}")).await?;
        let room =
            api.post("/api/rooms", Some(&host_token), json!({"game": "tally", "options": {"target": null}})).await?;
        let room = room["roomId"].as_str().ok_or_else(|| anyhow!("no roomId"))?.to_owned();
        api.post(&format!("/api/rooms/{room}/seats"), Some(&guest_token), json!({})).await?;
        api.post(&format!("/api/rooms/{room}/start"), Some(&host_token), json!({})).await?;
        players.push((room.clone(), host, host_token));
        players.push((room, guest, guest_token));
    }

    let started = Instant::now();
    let tasks: Vec<_> =
        players.into_iter().map(|(room, me, token)| tokio::spawn(player(addr, room, me, token, actions))).collect();
    let (mut updates, mut acks) = (Vec::new(), Vec::new());
    for t in tasks {
        for (u, a) in t.await?? {
            updates.push(u);
            acks.push(a);
        }
    }
    let elapsed = started.elapsed();
    println!("{rooms} rooms x 2 players x {actions} bumps = {} actions in {:.2} s", acks.len(), elapsed.as_secs_f64());
    report("own update", updates);
    report("ack", acks.clone());
    println!("throughput   {:.0} actions/s", acks.len() as f64 / elapsed.as_secs_f64());
    Ok(())
}
