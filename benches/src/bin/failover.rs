//! `failover`: how long a room is frozen when its node dies. Starts `--nodes` roomd
//! processes (the binary at `--roomd`, default cluster settings unless you export
//! `ROOMD__CLUSTER__*`) on one Redis you run yourself (`--redis`, loopback), creates
//! started tally rooms until `--rooms` of them are owned by the last node, bumps each
//! `--bumps` times from a socket on the first node, SIGKILLs the owner and measures, per
//! room, **kill → the first ack of a new bump from the new owner** (the client resends
//! the bump every `--retry-ms` until it is acknowledged, as a client does on
//! `room_unavailable`). Checks that every acknowledged bump survived and none was applied
//! twice (the new bump's `seq` is `bumps + 1`). Prints median / p90 / max and the load.
//!
//! ```text
//! redis-server --port 6390 --save "" --appendonly no --daemonize yes
//! cargo build --release -p gateway -p benches
//! target/release/failover --roomd target/release/roomd --redis redis://127.0.0.1:6390/ --rooms 5
//! target/release/failover --roomd target/release/roomd --redis redis://127.0.0.1:6390/ --rooms 1000 --nodes 2
//! ```

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

struct Args {
    roomd: String,
    redis: String,
    nodes: usize,
    rooms: usize,
    bumps: u64,
    retry_ms: u64,
    per_socket: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        roomd: "target/release/roomd".into(),
        redis: String::new(),
        nodes: 3,
        rooms: 5,
        bumps: 3,
        retry_ms: 100,
        per_socket: 50,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--roomd" => a.roomd = value()?,
            "--redis" => a.redis = value()?,
            "--nodes" => a.nodes = value()?.parse()?,
            "--rooms" => a.rooms = value()?.parse()?,
            "--bumps" => a.bumps = value()?.parse()?,
            "--retry-ms" => a.retry_ms = value()?.parse()?,
            "--per-socket" => a.per_socket = value()?.parse()?,
            "--help" | "-h" => {
                println!("failover --redis URL [--roomd PATH] [--nodes 3] [--rooms 5] [--bumps 3] [--retry-ms 100] [--per-socket 50]");
                std::process::exit(0);
            }
            other => bail!("unknown flag {other}"),
        }
    }
    if !a.redis.starts_with("redis://127.0.0.1") && !a.redis.starts_with("redis://localhost") {
        bail!("--redis must be a loopback Redis you run yourself (redis://127.0.0.1:PORT/)");
    }
    if a.nodes < 2 {
        bail!("--nodes must be at least 2");
    }
    Ok(a)
}

struct Node {
    id: String,
    child: Child,
    base: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(a: &Args, id: &str, prefix: &str) -> Result<Node> {
    let mut child = Command::new(&a.roomd)
        .env("ROOMD__HTTP__PORT", "0")
        .env("ROOMD__NODE__ID", id)
        .env("ROOMD__REDIS__URL", &a.redis)
        .env("ROOMD__REDIS__PREFIX", prefix)
        .env("ROOMD__AUTH__SECRET", "failover-bench-secret")
        .env("ROOMD__LOG__LEVEL", "warn")
        .env("ROOMD__ROOMS__MAX_OPEN_PER_USER", "1000000")
        // One socket drives `--per-socket` rooms: no per-socket rate limit in the way.
        .env("ROOMD__WS__RATE_PER_S", "1000000")
        .env("ROOMD__WS__BURST", "1000000")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", a.roomd))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .ok_or_else(|| anyhow!("no address in {line:?}"))?;
    Ok(Node { id: id.to_owned(), child, base: format!("http://{addr}") })
}

/// POST with up to 5 tries on 503 (a room being activated while the node is busy).
async fn post(http: &reqwest::Client, url: String, token: &str, body: Value) -> Result<Value> {
    let mut tries = 0;
    loop {
        let r = http.post(&url).bearer_auth(token).json(&body).send().await?;
        let status = r.status();
        let v: Value = r.json().await.unwrap_or_default();
        if status.is_success() {
            return Ok(v);
        }
        tries += 1;
        if status != reqwest::StatusCode::SERVICE_UNAVAILABLE || tries == 5 {
            bail!("{url}: {status}: {v}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// GET (JSON) with up to 5 tries on 503.
async fn get(http: &reqwest::Client, url: String, token: &str) -> Result<Value> {
    let mut tries = 0;
    loop {
        let r = http.get(&url).bearer_auth(token).send().await?;
        let status = r.status();
        let v: Value = r.json().await.unwrap_or_default();
        if status.is_success() {
            return Ok(v);
        }
        tries += 1;
        if status != reqwest::StatusCode::SERVICE_UNAVAILABLE || tries == 5 {
            bail!("{url}: {status}: {v}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn next_text(ws: &mut Ws, until: Instant) -> Option<Value> {
    loop {
        match tokio::time::timeout_at(until, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return serde_json::from_str(&t).ok(),
            Ok(Some(Ok(_))) => {}
            _ => return None,
        }
    }
}

async fn act(ws: &mut Ws, room: &str, cs: u64) -> Result<()> {
    ws.send(Message::text(json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}}).to_string())).await?;
    Ok(())
}

/// Subscribes to `rooms` and bumps each `bumps` times; acknowledged in order.
async fn prepare(ws: &mut Ws, rooms: &[String], bumps: u64) -> Result<()> {
    for room in rooms {
        ws.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await?;
    }
    let until = Instant::now() + Duration::from_secs(60);
    let mut synced = 0;
    while synced < rooms.len() {
        let v = next_text(ws, until).await.ok_or_else(|| anyhow!("no sync"))?;
        if v["t"] == "sync" {
            synced += 1;
        }
    }
    for cs in 1..=bumps {
        for room in rooms {
            act(ws, room, cs).await?;
        }
        let mut acked = 0;
        while acked < rooms.len() {
            let v = next_text(ws, until).await.ok_or_else(|| anyhow!("no ack for cs {cs}"))?;
            if v["t"] == "ack" && v["cs"] == cs {
                acked += 1;
            }
        }
    }
    Ok(())
}

/// After the kill: resends bump `cs` to every room until each is acknowledged; per room
/// (ms since `killed`, seq).
async fn resume(
    ws: &mut Ws,
    rooms: &[String],
    cs: u64,
    retry: Duration,
    killed: Instant,
) -> HashMap<String, (u128, u64)> {
    let mut done: HashMap<String, (u128, u64)> = HashMap::new();
    let give_up = killed + Duration::from_secs(60);
    while done.len() < rooms.len() && Instant::now() < give_up {
        for room in rooms.iter().filter(|r| !done.contains_key(*r)) {
            if act(ws, room, cs).await.is_err() {
                return done;
            }
        }
        let until = Instant::now() + retry;
        while let Some(v) = next_text(ws, until).await {
            if v["t"] == "ack" && v["cs"] == cs {
                if let Some(room) = v["room"].as_str() {
                    done.entry(room.to_owned())
                        .or_insert((killed.elapsed().as_millis(), v["seq"].as_u64().unwrap_or(0)));
                }
            }
        }
    }
    done
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = args()?;
    let prefix = format!("roomd-failover-{}", std::process::id());
    let mut nodes = Vec::new();
    for i in 0..a.nodes {
        nodes.push(start(&a, &format!("n{}", i + 1), &prefix)?);
    }
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        loop {
            let ready: Value = match http.get(format!("{}/readyz", node.base)).send().await {
                Ok(r) => r.json().await.unwrap_or_default(),
                Err(_) => Value::Null,
            };
            if ready["liveNodes"].as_u64() == Some(a.nodes as u64) {
                break;
            }
            if Instant::now() > deadline {
                bail!("the nodes never saw each other");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let victim = nodes.len() - 1;
    let victim_id = nodes[victim].id.clone();
    let front = nodes[0].base.clone();
    // Rooms owned by the victim, in groups of `per_socket` per host user (one socket each).
    let groups = a.rooms.div_ceil(a.per_socket);
    let mut hosts = Vec::new();
    for g in 0..groups {
        let s = post(&http, format!("{front}/api/session"), "", json!({"name": format!("host{g}")})).await?;
        hosts.push(s["token"].as_str().ok_or_else(|| anyhow!("no token"))?.to_owned());
    }
    let mut rooms: Vec<Vec<String>> = vec![Vec::new(); groups];
    let mut owned = 0;
    let mut created = 0;
    let setup_started = Instant::now();
    while owned < a.rooms {
        let batch = (a.rooms - owned) * a.nodes + 8;
        let made = futures_util::stream::iter(0..batch)
            .map(|i| {
                let (http, front, token) = (http.clone(), front.clone(), hosts[(owned + i) % groups].clone());
                async move {
                    let room = post(
                        &http,
                        format!("{front}/api/rooms"),
                        &token,
                        json!({"game": "tally", "options": {"target": null}}),
                    )
                    .await?["roomId"]
                        .as_str()
                        .ok_or_else(|| anyhow!("no roomId"))?
                        .to_owned();
                    post(&http, format!("{front}/api/rooms/{room}/start"), &token, json!({})).await?;
                    let info = get(&http, format!("{front}/api/rooms/{room}"), &token).await?;
                    Ok::<_, anyhow::Error>((room, info["node"].as_str().unwrap_or_default().to_owned(), token))
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        for made in made {
            let (room, node, token) = made?;
            created += 1;
            if node == victim_id && owned < a.rooms {
                let g = hosts.iter().position(|h| *h == token).unwrap_or(0);
                if rooms[g].len() < a.per_socket {
                    rooms[g].push(room);
                    owned += 1;
                }
            }
        }
    }
    eprintln!("{created} rooms created, {owned} on {victim_id}, in {:.1} s", setup_started.elapsed().as_secs_f64());
    let mut sockets = Vec::new();
    for (g, token) in hosts.iter().enumerate() {
        if rooms[g].is_empty() {
            continue;
        }
        let url = format!("{}/ws?token={token}", front.replace("http://", "ws://"));
        let mut ws = tokio_tungstenite::connect_async(url).await?.0;
        prepare(&mut ws, &rooms[g], a.bumps).await?;
        sockets.push((ws, rooms[g].clone()));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let load_before = load();
    let killed = Instant::now();
    nodes[victim].child.kill()?;
    let retry = Duration::from_millis(a.retry_ms);
    let cs = a.bumps + 1;
    let results = futures_util::future::join_all(
        sockets.iter_mut().map(|(ws, rooms)| async move { resume(ws, rooms, cs, retry, killed).await }),
    )
    .await;
    let mut ms: Vec<u128> = Vec::new();
    let mut wrong = 0;
    for r in &results {
        for (t, seq) in r.values() {
            ms.push(*t);
            if *seq != cs {
                wrong += 1;
            }
        }
    }
    ms.sort_unstable();
    if ms.is_empty() {
        bail!("no room resumed");
    }
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    println!(
        "failover nodes={} rooms={} resumed={} kill->first-ack ms: median {} p90 {} max {} | seq wrong (lost or doubled) {} | load before {} after {}",
        a.nodes,
        a.rooms,
        ms.len(),
        at(0.5),
        at(0.9),
        ms[ms.len() - 1],
        wrong,
        load_before,
        load()
    );
    if ms.len() < a.rooms || wrong > 0 {
        bail!("{} of {} rooms resumed, {wrong} with a wrong seq", ms.len(), a.rooms);
    }
    Ok(())
}
