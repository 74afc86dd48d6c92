//! Players that keep playing through faults, and the check of what they were
//! acknowledged against the logs (the fault tests, on one Redis or a Redis Cluster).

use super::procs::Ws;
use futures_util::{SinkExt, StreamExt};
use room_actor::{RedisStore, RoomStore};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// What the players saw, checked against the logs.
#[derive(Default)]
pub struct Seen {
    /// (room, user, cs) → acknowledged seq.
    pub acks: HashMap<(usize, String, u64), u64>,
    /// (room, seq) → (user, cs) it was acknowledged for.
    pub by_seq: HashMap<(usize, u64), (String, u64)>,
    /// Per room, when each acknowledgement arrived.
    pub ack_times: Vec<Vec<Instant>>,
    pub violations: Vec<String>,
    pub acked: u64,
}

impl Seen {
    pub fn ack(&mut self, room: usize, user: &str, cs: u64, seq: u64) {
        if let Some(before) = self.acks.insert((room, user.to_owned(), cs), seq) {
            if before != seq {
                self.violations.push(format!("room {room}: {user} cs {cs} acknowledged with seq {before} and {seq}"));
            }
            return;
        }
        if let Some(other) = self.by_seq.insert((room, seq), (user.to_owned(), cs)) {
            if other != (user.to_owned(), cs) {
                self.violations.push(format!("room {room}: seq {seq} acknowledged for {other:?} and ({user}, {cs})"));
            }
        }
        self.ack_times[room].push(Instant::now());
        self.acked += 1;
    }
}

pub struct Player {
    pub room: usize,
    pub room_id: String,
    pub user: String,
    pub token: String,
    pub home: usize,
}

/// Plays one seat: bumps with a fresh cs once the previous one is acknowledged, resends
/// the same cs on `room_unavailable`/`room_moved`/silence, reconnects (to another node if
/// its own is down) when the socket closes. Any reject or `unknown_room` is a violation.
pub async fn play(p: Player, addrs: Arc<Mutex<Vec<String>>>, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) {
    let mut cs = 1u64;
    let mut ws: Option<Ws> = None;
    let mut attempt = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let Some(sock) = ws.as_mut() else {
            let bases = addrs.lock().unwrap().clone();
            let base = &bases[(p.home + attempt) % bases.len()];
            attempt += 1;
            if !base.is_empty() {
                let url = format!("{}/ws?token={}", base.replace("http://", "ws://"), p.token);
                if let Ok(Ok((s, _))) =
                    tokio::time::timeout(Duration::from_secs(3), tokio_tungstenite::connect_async(url)).await
                {
                    ws = Some(s);
                    continue;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let act = json!({"t": "act", "room": p.room_id, "cs": cs, "a": {"type": "bump"}});
        if sock.send(Message::text(act.to_string())).await.is_err() {
            ws = None;
            continue;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
        let mut retry = false;
        while !retry {
            let frame = match tokio::time::timeout_at(deadline, sock.next()).await {
                Err(_) => break, // silence: resend the same cs
                Ok(Some(Ok(Message::Text(t)))) => t,
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => {
                    ws = None;
                    break;
                }
                Ok(Some(Ok(_))) => continue,
            };
            let Ok(msg) = serde_json::from_str::<Value>(&frame) else { continue };
            let code = msg["code"].as_str().unwrap_or_default();
            match msg["t"].as_str() {
                Some("ack") => {
                    let (Some(acked_cs), Some(seq)) = (msg["cs"].as_u64(), msg["seq"].as_u64()) else { continue };
                    seen.lock().unwrap().ack(p.room, &p.user, acked_cs, seq);
                    if acked_cs == cs {
                        cs += 1;
                        retry = true;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                Some("reject") => {
                    seen.lock().unwrap().violations.push(format!("room {}: definite reject {msg}", p.room_id));
                    retry = true;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Some("error") if code == "unknown_room" => {
                    seen.lock().unwrap().violations.push(format!("room {}: {msg}", p.room_id));
                    retry = true;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Some("error") if msg["cs"] == cs || msg["cs"].is_null() => {
                    retry = true;
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                _ => {}
            }
        }
        if ws.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Reads every room's log and checks it against what was acknowledged.
pub async fn check_logs(store: &RedisStore, pks: &[String], seen: &Arc<Mutex<Seen>>) -> Vec<String> {
    let acks: Vec<((usize, String, u64), u64)> =
        seen.lock().unwrap().acks.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let mut problems = Vec::new();
    for (room, pk) in pks.iter().enumerate() {
        let mut stored = None;
        for _ in 0..50 {
            match store.load(pk).await {
                Ok(Some(s)) => {
                    stored = Some(s);
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        let Some(stored) = stored else {
            problems.push(format!("room {room}: log of {pk} not readable"));
            continue;
        };
        let mut once = HashSet::new();
        for (i, e) in stored.entries.iter().enumerate() {
            if e.seq != i as u64 + 1 {
                problems.push(format!("room {room}: entry {i} has seq {}", e.seq));
            }
            if let (engine::Actor::Player(user), Some(cs)) = (&e.actor, e.cs) {
                if !once.insert((user.to_string(), cs)) {
                    problems.push(format!("room {room}: ({user}, cs {cs}) logged twice"));
                }
            }
        }
        for ((r, user, cs), seq) in acks.iter().filter(|((r, _, _), _)| *r == room) {
            let entry = stored.entries.get((*seq as usize).wrapping_sub(1));
            let ok = entry.is_some_and(|e| {
                e.seq == *seq && e.cs == Some(*cs) && matches!(&e.actor, engine::Actor::Player(u) if u.as_str() == user)
            });
            if !ok {
                problems.push(format!("room {r}: ack ({user}, cs {cs}) → seq {seq} is not that entry: {entry:?}"));
            }
        }
    }
    problems
}

/// Waits until every room has an acknowledgement after `after`; the rooms still silent
/// when `within` is over.
pub async fn wait_all_ack_after(seen: &Arc<Mutex<Seen>>, after: Instant, within: Duration) -> Result<(), Vec<usize>> {
    let deadline = Instant::now() + within;
    loop {
        let silent: Vec<usize> = {
            let seen = seen.lock().unwrap();
            (0..seen.ack_times.len()).filter(|r| seen.ack_times[*r].last().is_none_or(|t| *t <= after)).collect()
        };
        if silent.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(silent);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The longest time any room went without an acknowledgement, over gaps that end after
/// `since` (the fault's start), and that room.
pub fn longest_gap(seen: &Arc<Mutex<Seen>>, since: Instant) -> (Duration, usize) {
    let seen = seen.lock().unwrap();
    let mut longest = (Duration::ZERO, 0);
    for (room, times) in seen.ack_times.iter().enumerate() {
        for pair in times.windows(2) {
            if pair[1] > since && pair[1] - pair[0] > longest.0 {
                longest = (pair[1] - pair[0], room);
            }
        }
    }
    longest
}
