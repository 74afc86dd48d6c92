#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The embedded node keeps its games across a crash, with real processes: a release-mode
//! `roomd` on the file store in a temporary data directory plays Cockroach Poker (two
//! humans and a bot) and Halli Galli (a human and a bot) over real WebSockets; the test
//! SIGKILLs it mid-game, starts a new process on the same directory, and then:
//!
//! - every room is back: each socket's `sync` is at or after every update it saw before
//!   the kill (nothing broadcast was lost);
//! - a retried `cs` is acknowledged with its original seq, not applied again;
//! - both games play to the end (bots move again, the recovery hold lets humans back);
//! - every acknowledged action is in the stored log at its seq, and no `(player, cs)` is
//!   in it twice (read back by opening the data directory after the second node is gone);
//! - each human's replay has the whole game, and every scene equals the update that
//!   player received for that seq, before and after the restart.

mod support;

use engine::games::cockroach_poker::rules::Kind;
use engine::{Actor, Rng, Seed};
use room_actor::{FileStore, RoomStore};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use support::procs::{Proc, Settings};
use support::{hg_five, WsClient};
use tokio::time::Instant;

/// How long each game may take to finish after the restart (the recovery hold of 30 s
/// delays the server's own deadlines, e.g. a halli-galli ring window).
const FINISH_WITHIN: Duration = Duration::from_secs(150);

/// The embedded node on the file store in `dir` (SIGKILLed by `kill`: no drain, no flush,
/// no goodbye).
fn start_node(dir: &Path) -> Proc {
    let settings = Settings::base()
        .unset("ROOMD__REDIS__URL")
        .set("ROOMD__STORE__KIND", "file")
        .set("ROOMD__STORE__PATH", dir)
        .set("ROOMD__DEV__ALLOW_FIXED_SEED", "true")
        .set("ROOMD__ROOMS__SNAPSHOT_EVERY", "8")
        .set("ROOMD__WS__RATE_PER_S", "10000")
        .set("ROOMD__WS__BURST", "10000")
        .set("ROOMD__WS__CLIENT_TIMEOUT_S", "600");
    let node = Proc::spawn("embedded", settings);
    let line = &node.banner;
    assert!(line.contains(&dir.display().to_string()), "the data directory is printed at start-up: {line:?}");
    node
}

struct Api {
    http: reqwest::Client,
    addr: SocketAddr,
}

impl Api {
    async fn call(&self, method: reqwest::Method, path: &str, token: Option<&str>, body: Option<Value>) -> Value {
        let mut req = self.http.request(method, format!("http://{}{path}", self.addr));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }

    async fn post(&self, path: &str, token: Option<&str>, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, token, Some(body)).await
    }

    async fn get(&self, path: &str, token: &str) -> Value {
        self.call(reqwest::Method::GET, path, Some(token), None).await
    }
}

struct Human {
    id: String,
    token: String,
    ws: Option<WsClient>,
    /// Everything received, over every socket this player had.
    log: Vec<Value>,
    /// (room, cs, seq) of every acknowledged action.
    acks: Vec<(String, u64, u64)>,
    next_cs: u64,
}

impl Human {
    fn ws(&mut self) -> &mut WsClient {
        self.ws.as_mut().unwrap()
    }

    fn view(&self, room: &str) -> Option<(u64, Value)> {
        self.ws.as_ref().unwrap().latest.get(room).cloned()
    }

    /// Sends `a`; the answer (`ack`, `reject` or `error`), recording an ack.
    async fn act(&mut self, room: &str, a: Value) -> Value {
        self.next_cs += 1;
        let cs = self.next_cs;
        let answer = self.ws().act(room, cs, a).await;
        if answer["t"] == "ack" {
            self.acks.push((room.to_owned(), cs, answer["seq"].as_u64().unwrap()));
        }
        answer
    }

    /// Keeps what this socket received and drops it (the node is gone).
    fn lose_socket(&mut self) {
        if let Some(ws) = self.ws.take() {
            self.log.extend(ws.log.iter().cloned());
        }
    }

    fn all_received(&self) -> Vec<Value> {
        let mut all = self.log.clone();
        if let Some(ws) = &self.ws {
            all.extend(ws.log.iter().cloned());
        }
        all
    }
}

async fn human(api: &Api, name: &str) -> Human {
    let body = api.post("/api/session", None, json!({ "name": name })).await;
    Human {
        id: body["userId"].as_str().unwrap().to_owned(),
        token: body["token"].as_str().unwrap().to_owned(),
        ws: None,
        log: Vec::new(),
        acks: Vec::new(),
        next_cs: 0,
    }
}

fn cp_random_action(rng: &mut Rng, v: &Value, me: &str) -> Value {
    let kinds: Vec<Value> = Kind::ALL.iter().map(|k| serde_json::to_value(k).unwrap()).collect();
    let claim =
        |rng: &mut Rng, truth: &Value| if rng.chance(0.5) { truth.clone() } else { rng.pick(&kinds).unwrap().clone() };
    if v["holder"].is_null() {
        let hand = v["hand"].as_array().unwrap().clone();
        let card = rng.pick(&hand).expect("the starter has cards").clone();
        let others: Vec<Value> = v["order"].as_array().unwrap().iter().filter(|p| *p != me).cloned().collect();
        let to = rng.pick(&others).unwrap().clone();
        return json!({"type": "offer", "cardId": card["id"], "to": to, "claim": claim(rng, &card["kind"])});
    }
    let targets = v["passTargets"].as_array().unwrap().clone();
    if v["peeked"] == false {
        if !targets.is_empty() && rng.chance(0.35) {
            return json!({"type": "peek"});
        }
        let word = if rng.chance(0.5) { "true" } else { "false" };
        return json!({"type": "call", "call": word});
    }
    let to = rng.pick(&targets).expect("a peeker has someone to pass to").clone();
    json!({"type": "pass", "to": to, "claim": claim(rng, &v["card"]["kind"])})
}

fn has_result(h: &Human, room: &str) -> bool {
    h.all_received().iter().any(|m| m["t"] == "result" && m["room"] == room)
}

/// One move in cockroach poker if a human is to play; else waits a little for the bot.
async fn cp_step(rng: &mut Rng, humans: &mut [Human], room: &str) {
    let Some((_, v)) = humans[0].view(room) else { panic!("no view of {room}") };
    let active = if v["holder"].is_null() { v["starter"].clone() } else { v["holder"].clone() };
    if let Some(i) = humans.iter().position(|h| active == h.id.as_str()) {
        let Some((_, own)) = humans[i].view(room) else { return };
        let me = humans[i].id.clone();
        let a = cp_random_action(rng, &own, &me);
        humans[i].act(room, a).await;
    }
    for h in humans.iter_mut() {
        h.ws().next_within(Duration::from_millis(150)).await;
    }
}

/// One move in halli-galli for the human: ring on a five, flip on their turn, else wait.
async fn hg_step(carol: &mut Human, room: &str) {
    let Some((_, v)) = carol.view(room) else { panic!("no view of {room}") };
    if v["phase"] == "playing" && v["ringWindow"].is_null() {
        if hg_five(&v) {
            carol.act(room, json!({"type": "ring", "version": v["tableVersion"]})).await;
        } else if v["turn"] == carol.id.as_str() && v["flipReserved"] != true {
            carol.act(room, json!({"type": "flip"})).await;
        }
    }
    carol.ws().next_within(Duration::from_millis(150)).await;
}

/// The game views a player received per seq, over all their sockets (updates only).
fn updates(log: &[Value], room: &str) -> BTreeMap<u64, Value> {
    let mut out = BTreeMap::new();
    for m in log.iter().filter(|m| m["room"] == room && m["t"] == "update") {
        let seq = m["seq"].as_u64().unwrap();
        if let Some(old) = out.insert(seq, m["view"].clone()) {
            assert_eq!(old, m["view"], "seq {seq} of {room} was sent twice with different views");
        }
    }
    out
}

/// The player's replay: the whole game, every scene equal to the update they received.
async fn check_replay(api: &Api, h: &Human, room: &str, pk: &str, final_seq: u64) -> usize {
    let replay = api.get(&format!("/api/replays/{pk}"), &h.token).await;
    let steps = replay["steps"].as_array().unwrap();
    let patches = replay["patches"].as_array().unwrap();
    assert_eq!(steps.last().unwrap()["seq"], final_seq, "{}'s replay covers the whole game", h.id);
    let got = updates(&h.all_received(), room);
    let mut scene = replay["first"].clone();
    let mut compared = 0;
    for (k, patch) in patches.iter().enumerate() {
        let seq = steps[k + 1]["seq"].as_u64().unwrap();
        let patch: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
        json_patch::patch(&mut scene, &patch).unwrap();
        if let Some(view) = got.get(&seq) {
            assert_eq!(&scene, view, "{}: scene for seq {seq} of {room} differs from what they received", h.id);
            compared += 1;
        }
    }
    compared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_embedded_node_resumes_every_game_from_its_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::from_seed(Seed(0x005e_ed19));
    let mut node = start_node(dir.path());
    let api = Api { http: reqwest::Client::new(), addr: node.addr() };
    let mut humans = vec![human(&api, "앨리스").await, human(&api, "밥").await];
    let mut carol = human(&api, "캐럴").await;

    // Cockroach poker: alice (host), bob and a bot. Halli galli: carol and a bot.
    let seed = "000000000000000000000000000c0c0a";
    let body = json!({"game": "cockroach-poker", "options": {"loseCount": 3, "turnSeconds": 15}, "seed": seed});
    let cp = api.post("/api/rooms", Some(&humans[0].token), body).await["roomId"].as_str().unwrap().to_owned();
    api.post(&format!("/api/rooms/{cp}/seats"), Some(&humans[1].token), json!({})).await;
    api.post(&format!("/api/rooms/{cp}/seats"), Some(&humans[0].token), json!({"bot": true})).await;
    let hg_options = json!({"endMode": "official", "flipSeconds": 2, "flipGuardMs": 400, "wrongRingLockoutMs": 0});
    let body = json!({"game": "halli-galli", "options": hg_options, "seed": seed});
    let hg = api.post("/api/rooms", Some(&carol.token), body).await["roomId"].as_str().unwrap().to_owned();
    api.post(&format!("/api/rooms/{hg}/seats"), Some(&carol.token), json!({"bot": true})).await;
    for h in humans.iter_mut() {
        h.ws = Some(WsClient::connect(node.addr(), &h.token).await.unwrap());
        h.ws().sub(&cp).await;
    }
    carol.ws = Some(WsClient::connect(node.addr(), &carol.token).await.unwrap());
    carol.ws().sub(&hg).await;
    let cp_pk = api.post(&format!("/api/rooms/{cp}/start"), Some(&humans[0].token), json!({})).await["gamePk"]
        .as_str()
        .unwrap()
        .to_owned();
    let hg_pk = api.post(&format!("/api/rooms/{hg}/start"), Some(&carol.token), json!({})).await["gamePk"]
        .as_str()
        .unwrap()
        .to_owned();
    for h in humans.iter_mut() {
        h.ws().wait_seq(&cp, 0).await;
    }
    carol.ws().wait_seq(&hg, 0).await;

    // Mid-game: a few acknowledged human actions in each game, then SIGKILL.
    let deadline = Instant::now() + Duration::from_secs(60);
    while humans.iter().map(|h| h.acks.len()).sum::<usize>() < 4 || carol.acks.len() < 3 {
        assert!(Instant::now() < deadline, "no progress before the kill");
        if humans.iter().map(|h| h.acks.len()).sum::<usize>() < 4 {
            cp_step(&mut rng, &mut humans, &cp).await;
        }
        if carol.acks.len() < 3 {
            hg_step(&mut carol, &hg).await;
        }
    }
    assert!(!has_result(&humans[0], &cp) && !has_result(&carol, &hg), "both games are still running at the kill");
    node.kill();
    let seen_cp = humans.iter().map(|h| h.view(&cp).unwrap().0).max().unwrap();
    let seen_hg = carol.view(&hg).unwrap().0;
    for h in humans.iter_mut() {
        h.lose_socket();
    }
    carol.lose_socket();
    eprintln!("killed at cockroach-poker seq {seen_cp}, halli-galli seq {seen_hg}");

    // A new process on the same directory: every room is back where it was.
    let node = start_node(dir.path());
    let api = Api { http: reqwest::Client::new(), addr: node.addr() };
    for h in humans.iter_mut() {
        h.ws = Some(WsClient::connect(node.addr(), &h.token).await.unwrap());
        let sync = h.ws().sub(&cp).await;
        assert!(sync["seq"].as_u64().unwrap() >= seen_cp, "{}: nothing seen before the kill is lost: {sync}", h.id);
    }
    carol.ws = Some(WsClient::connect(node.addr(), &carol.token).await.unwrap());
    let sync = carol.ws().sub(&hg).await;
    assert!(sync["seq"].as_u64().unwrap() >= seen_hg, "carol's game is where it was: {sync}");

    // A retry of an action acknowledged before the kill: its original seq, not again.
    let (room, cs, seq) = humans[0].acks.last().cloned().or_else(|| humans[1].acks.last().cloned()).unwrap();
    let who = if humans[0].acks.iter().any(|a| a.1 == cs && a.0 == room) { 0 } else { 1 };
    let again = humans[who].ws().act(&room, cs, json!({"type": "call", "call": "true"})).await;
    assert_eq!((again["t"].as_str(), again["seq"].as_u64()), (Some("ack"), Some(seq)), "retried cs {cs}: {again}");

    // Both games play to the end.
    let deadline = Instant::now() + FINISH_WITHIN;
    while !has_result(&humans[0], &cp) || !has_result(&carol, &hg) {
        assert!(Instant::now() < deadline, "the games did not finish after the restart");
        if !has_result(&humans[0], &cp) {
            cp_step(&mut rng, &mut humans, &cp).await;
        }
        if !has_result(&carol, &hg) {
            hg_step(&mut carol, &hg).await;
        }
    }

    // The finished games are listed for their players.
    for (token, pk) in [(&humans[0].token, &cp_pk), (&carol.token, &hg_pk)] {
        let games = api.get("/api/me/games?limit=5", token).await;
        assert!(games.as_array().unwrap().iter().any(|g| g["gamePk"] == pk.as_str()), "{pk} listed: {games}");
    }
    drop(node); // SIGKILL again: the log is read back from the directory below.

    let store = reopen(dir.path()).await;
    for (room, pk, players) in [(&cp, &cp_pk, vec![&humans[0], &humans[1]]), (&hg, &hg_pk, vec![&carol])] {
        let stored = store.load(pk).await.unwrap().expect("the game is stored");
        let record = store.record(pk).await.unwrap().expect("the game is recorded");
        assert_eq!(stored.entries.len() as u64, record.final_seq);
        let mut applied = HashSet::new();
        for e in &stored.entries {
            if let (Actor::Player(p), Some(cs)) = (&e.actor, e.cs) {
                assert!(applied.insert((p.clone(), cs)), "({p}, {cs}) applied twice in {room}");
            }
        }
        for h in &players {
            let mine: BTreeSet<(u64, u64)> = h.acks.iter().filter(|a| &a.0 == room).map(|a| (a.1, a.2)).collect();
            assert!(!mine.is_empty(), "{} acted in {room}", h.id);
            for (cs, seq) in mine {
                let e = &stored.entries[(seq - 1) as usize];
                assert_eq!((&e.actor, e.cs), (&Actor::Player(h.id.as_str().into()), Some(cs)), "ack {cs} → {seq}");
            }
        }
    }
    drop(store);
    // The store's thread lets go of the directory's lock as it ends, not at the drop.
    wait_unlocked(dir.path()).await;

    // The replays (from a third process on the same directory).
    let node = start_node(dir.path());
    let api = Api { http: reqwest::Client::new(), addr: node.addr() };
    for (room, pk, who) in [(&cp, &cp_pk, vec![0usize, 1]), (&hg, &hg_pk, vec![2])] {
        for i in who {
            let h = if i == 2 { &carol } else { &humans[i] };
            let final_seq = updates(&h.all_received(), room).keys().next_back().copied().unwrap();
            let compared = check_replay(&api, h, room, pk, final_seq).await;
            assert!(compared >= 3, "{}: {compared} scenes compared in {room}", h.id);
        }
    }
}

/// Opens the data directory once the killed process let go of it.
async fn reopen(dir: &Path) -> FileStore {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match FileStore::open(dir, 90) {
            Ok(store) => return store,
            Err(e) if Instant::now() < deadline => {
                eprintln!("reopen: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("reopen: {e}"),
        }
    }
}

/// Waits until nothing holds the data directory's lock: a store this test opened and
/// dropped lets go of it on its own thread, a moment after the drop.
async fn wait_unlocked(dir: &Path) {
    let path = dir.join(room_actor::store::file::LOCK_FILE);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // The probe's own lock goes with its file, at the end of this statement.
        let free = std::fs::OpenOptions::new().write(true).open(&path).is_ok_and(|f| f.try_lock().is_ok());
        if free {
            return;
        }
        assert!(Instant::now() < deadline, "{} is still locked", path.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What `GET /api/rooms/{room}` says of a waiting room that must survive a restart: its
/// game, host, seats (bots included), options, status and creation time (the waiting
/// room's expiry clock runs from it).
async fn waiting_room(api: &Api, room: &str, token: &str) -> Value {
    let info = api.get(&format!("/api/rooms/{room}"), token).await;
    let keep = ["game", "host", "seats", "options", "status", "createdAt", "graceSec"];
    let kept: serde_json::Map<String, Value> =
        keep.iter().filter_map(|k| info.get(*k).map(|v| ((*k).to_owned(), v.clone()))).collect();
    assert_eq!(kept.len(), keep.len(), "the room's info has every field the test compares: {info}");
    Value::Object(kept)
}

/// Issue 57: creating a room and taking or giving up a seat are acknowledged only once
/// they are on disk. Waiting rooms come back after a SIGKILL (right after the last
/// acknowledgement, no flush) and after a SIGTERM (which tells sockets 1012), with their
/// host, seats, bots, options and expiry clock, and the game can then be started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_rooms_survive_a_sigkill_and_a_sigterm_of_the_embedded_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = start_node(dir.path());
    let api = Api { http: reqwest::Client::new(), addr: node.addr() };
    let alice = human(&api, "앨리스").await;
    let bob = human(&api, "밥").await;
    let carol = human(&api, "캐럴").await;
    // Only its host has sat in it.
    let hg_options = json!({"endMode": "official", "flipSeconds": 3});
    let body = json!({"game": "halli-galli", "options": hg_options});
    let alone = api.post("/api/rooms", Some(&alice.token), body).await["roomId"].as_str().unwrap().to_owned();
    // The host, a player and a bot; a third player sat and left again.
    let body = json!({"game": "cockroach-poker", "options": {"loseCount": 3, "turnSeconds": 30}});
    let full = api.post("/api/rooms", Some(&bob.token), body).await["roomId"].as_str().unwrap().to_owned();
    api.post(&format!("/api/rooms/{full}/seats"), Some(&alice.token), json!({})).await;
    api.post(&format!("/api/rooms/{full}/seats"), Some(&bob.token), json!({"bot": true})).await;
    api.post(&format!("/api/rooms/{full}/seats"), Some(&carol.token), json!({})).await;
    api.call(reqwest::Method::DELETE, &format!("/api/rooms/{full}/seats/me"), Some(&carol.token), None).await;
    let before = [waiting_room(&api, &alone, &alice.token).await, waiting_room(&api, &full, &bob.token).await];
    assert_eq!(before[0]["seats"].as_array().map(Vec::len), Some(1), "{}", before[0]);
    assert_eq!(before[1]["seats"].as_array().map(Vec::len), Some(3), "{}", before[1]);

    // SIGKILL straight after the last acknowledgement.
    node.kill();
    let mut node = start_node(dir.path());
    let api = Api { http: reqwest::Client::new(), addr: node.addr() };
    let after_kill = [waiting_room(&api, &alone, &alice.token).await, waiting_room(&api, &full, &bob.token).await];
    assert_eq!(after_kill, before, "waiting rooms as they were acknowledged, after a SIGKILL");

    // SIGTERM: sockets are told 1012, and the rooms come back again.
    let mut ws = WsClient::connect(node.addr(), &alice.token).await.unwrap();
    ws.sub(&alone).await;
    node.signal("TERM");
    assert_eq!(ws.close_code().await, Some(1012), "a stopping node tells its sockets to come back");
    assert!(tokio::task::block_in_place(|| node.wait_exit(Duration::from_secs(30))), "the node exits after SIGTERM");
    let node = start_node(dir.path());
    let api = Api { http: reqwest::Client::new(), addr: node.addr() };
    let after_term = [waiting_room(&api, &alone, &alice.token).await, waiting_room(&api, &full, &bob.token).await];
    assert_eq!(after_term, before, "waiting rooms as they were acknowledged, after a SIGTERM");

    // The restored room plays: its host starts it with the seats it had.
    let started = api.post(&format!("/api/rooms/{full}/start"), Some(&bob.token), json!({})).await;
    assert!(started["gamePk"].is_string(), "{started}");
}
