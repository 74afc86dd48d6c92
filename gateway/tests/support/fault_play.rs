//! Players that keep playing through faults, and the check of what they were
//! acknowledged against the logs (the fault tests, on one Redis or a Redis Cluster).

use super::procs::{guest, tally_room, Proc, Ws};
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
    /// (room, user) → each `update` or `sync` that player received: when, and its seq.
    pub heard: HashMap<(usize, String), Vec<(Instant, u64)>>,
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

    /// `user` received the room's state at `seq` (an `update` or a `sync`).
    pub fn hear(&mut self, room: usize, user: &str, seq: u64) {
        self.heard.entry((room, user.to_owned())).or_default().push((Instant::now(), seq));
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
                if let Ok(Ok((mut s, _))) =
                    tokio::time::timeout(Duration::from_secs(3), tokio_tungstenite::connect_async(url)).await
                {
                    // Watch the room: its updates reach this socket whoever acts.
                    let sub = json!({"t": "sub", "room": p.room_id});
                    if s.send(Message::text(sub.to_string())).await.is_ok() {
                        ws = Some(s);
                    }
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
                Some("update" | "sync") if msg["room"] == p.room_id.as_str() => {
                    if let Some(seq) = msg["seq"].as_u64() {
                        seen.lock().unwrap().hear(p.room, &p.user, seq);
                    }
                }
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

/// Players on every node in `rooms` tally rooms: room `i` is created through node
/// `i % nodes` and its second player joins through the next node.
pub struct Table {
    pub pks: Vec<String>,
    pub rooms: Vec<String>,
    pub seen: Arc<Mutex<Seen>>,
    pub stop: Arc<AtomicBool>,
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub async fn seat_players(http: &reqwest::Client, nodes: &[&Proc], rooms: usize) -> Table {
    let addrs = Arc::new(Mutex::new(nodes.iter().map(|n| n.base.clone()).collect::<Vec<_>>()));
    let mut players = Vec::new();
    let (mut pks, mut ids) = (Vec::new(), Vec::new());
    for room in 0..rooms {
        let (a_home, b_home) = (room % nodes.len(), (room + 1) % nodes.len());
        let (a_id, a_tok) = guest(http, &nodes[a_home].base, &format!("a{room}")).await;
        let (b_id, b_tok) = guest(http, &nodes[b_home].base, &format!("b{room}")).await;
        let (room_id, pk, _) = tally_room(http, &nodes[a_home].base, &a_tok, &[&b_tok]).await;
        pks.push(pk);
        ids.push(room_id.clone());
        players.push(Player { room, room_id: room_id.clone(), user: a_id, token: a_tok, home: a_home });
        players.push(Player { room, room_id, user: b_id, token: b_tok, home: b_home });
    }
    let seen = Arc::new(Mutex::new(Seen { ack_times: vec![Vec::new(); rooms], ..Seen::default() }));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = players.into_iter().map(|p| tokio::spawn(play(p, addrs.clone(), seen.clone(), stop.clone()))).collect();
    Table { pks, rooms: ids, seen, stop, tasks }
}

impl Table {
    /// Stops the players and checks every log against what they were acknowledged.
    pub async fn finish(self, store: &RedisStore) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
        let problems = check_logs(store, &self.pks, &self.seen).await;
        let seen = self.seen.lock().unwrap();
        assert!(seen.violations.is_empty(), "violations: {:?}", seen.violations);
        assert!(problems.is_empty(), "logs disagree with the acknowledgements: {problems:?}");
        seen.acked
    }

    /// Acknowledged actions per player so far.
    fn acks_by_player(&self) -> std::collections::HashMap<String, usize> {
        let mut counts = std::collections::HashMap::new();
        for (_, user, _) in self.seen.lock().unwrap().acks.keys() {
            *counts.entry(user.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Waits until every player has been acknowledged another action; fails naming the
    /// silent ones after `within`. Every player, not only every room: a node's bus channel
    /// carries what its own players hear from rooms owned elsewhere.
    pub async fn every_player_acked_again(&self, nodes: &[&Proc], within: Duration, after: &str) {
        let before = self.acks_by_player();
        let deadline = Instant::now() + within;
        loop {
            let now = self.acks_by_player();
            let silent: Vec<&String> = before.iter().filter(|(u, n)| now.get(*u) <= Some(n)).map(|(u, _)| u).collect();
            if silent.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let logs: String = nodes.iter().map(|node| node.log_tail(25)).collect();
                panic!("players silent {within:?} after {after}: {silent:?}; the nodes said:\n{logs}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn acks_of(&self, room: usize, from: Instant, to: Instant) -> usize {
        self.seen.lock().unwrap().ack_times[room].iter().filter(|t| **t > from && **t < to).count()
    }
}

impl Table {
    /// Waits until every player has received, after `after`, an `update` for an action
    /// acknowledged to somebody else (the room's news reaches every node, not only each
    /// player's own acknowledgements); fails naming the deaf ones after `within`.
    pub async fn every_player_hears_another_after(
        &self,
        nodes: &[&Proc],
        after: Instant,
        within: Duration,
        what: &str,
    ) {
        let deadline = Instant::now() + within;
        loop {
            let deaf: Vec<(usize, String)> = {
                let seen = self.seen.lock().unwrap();
                let players: HashSet<(usize, String)> = seen.acks.keys().map(|(r, u, _)| (*r, u.clone())).collect();
                players
                    .into_iter()
                    .filter(|(room, user)| {
                        !seen.heard.get(&(*room, user.clone())).is_some_and(|heard| {
                            heard.iter().any(|(at, seq)| {
                                *at > after && seen.by_seq.get(&(*room, *seq)).is_some_and(|(by, _)| by != user)
                            })
                        })
                    })
                    .collect()
            };
            if deaf.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let logs: String = nodes.iter().map(|node| node.log_tail(25)).collect();
                panic!("players deaf {within:?} after {what}: {deaf:?}; the nodes said:\n{logs}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
