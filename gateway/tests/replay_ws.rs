#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Replays against what the players really saw (`game-engine.md` §8): Halli Galli and
//! Cockroach Poker played to the end on a real node over real WebSockets — random legal
//! actions from a seeded RNG, turns left to the server's timers, one player leaving
//! mid-game — then every participant fetches their own replay over HTTP with their own
//! token, and:
//!
//! - scene 0 (`first`) equals the game view that player received in the `sync` at seq 0
//!   (every socket subscribes before `start`);
//! - scene k, after applying the patches, equals exactly the view of the `update` that
//!   player received for seq `steps[k].seq` (every seq is a scene in these games);
//! - the replay covers the whole game (last step = the record's final seq), also for the
//!   player who left, who must have received every scene up to leaving;
//! - the last scene is the player's view of the state rebuilt from seed and log, which
//!   equals the recorded final state and result (the result also as sent on the socket);
//! - the steps marked `player` for a player are exactly the seqs acknowledged to them.
//!
//! The node pings every second (`ws.heartbeat_s` = 1), so halli-galli views carry live
//! RTTs (`showRtt`); the log records the room's RTT table whenever it changed, and the
//! replay's scenes must show exactly the RTTs the players saw.

mod support;

use engine::games::cockroach_poker::rules::Kind;
use engine::games::cockroach_poker::CockroachPoker;
use engine::games::halli_galli::HalliGalli;
use engine::{Game, Rng, Seed, ViewCtx};
use room_actor::rebuild;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use support::{hg_five, start_server_with, Server, User, WsClient};
use tokio::time::Instant;

/// How long the server may take to make a move of its own (a tick, a timeout of a player
/// who left, a 2 s halli-galli turn deadline).
const SERVER_MOVE: Duration = Duration::from_secs(10);
/// How long a cockroach-poker turn may be left to run out (`turnSeconds` = 15).
const TURN_RUNS_OUT: Duration = Duration::from_secs(25);

/// How the player who leaves does it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Leave {
    /// `DELETE …/seats/me` and keep watching: the socket still gets their player view.
    KeepWatching,
    /// Stop watching (`unsub`), `DELETE …/seats/me`, then close the socket.
    StopWatching,
}

struct Player {
    user: User,
    /// `None` once the socket is closed.
    ws: Option<WsClient>,
    /// What the socket received, kept when it is closed.
    log: Vec<Value>,
}

/// Three players, each on their own socket, subscribed before the start.
struct Table {
    server: Server,
    room: String,
    game_pk: String,
    players: Vec<Player>,
    /// The test's own choices (actions, timing of the leave); seeded, so a failure
    /// replays the same decisions.
    rng: Rng,
    /// Who left and the seq they had seen when they did.
    left: Option<(usize, u64)>,
    /// Actions refused because the server moved between the decision and the action.
    raced: usize,
    started: Instant,
}

impl Table {
    async fn open(game: &str, options: Value, game_seed: &str, test_seed: u128) -> Table {
        let started = Instant::now();
        let server = start_server_with(|s| s.ws.heartbeat_s = 1);
        let users = vec![server.guest("도윤").await, server.guest("서연").await, server.guest("하준").await];
        let body = json!({"game": game, "options": options, "graceSec": 60, "seed": game_seed});
        let (status, body) = server.post("/api/rooms", Some(&users[0].token), body).await;
        assert_eq!(status, 200, "create room: {body}");
        let room = body["roomId"].as_str().unwrap().to_owned();
        for u in &users[1..] {
            server.seat(&room, u).await;
        }
        let mut players = Vec::new();
        for u in &users {
            let mut ws = server.ws(u).await;
            let sync = ws.sub(&room).await;
            assert_eq!((sync["seq"].as_u64(), sync["view"]["status"].as_str()), (Some(0), Some("waiting")), "{sync}");
            players.push(Player { user: u.clone(), ws: Some(ws), log: Vec::new() });
        }
        let game_pk = server.start(&room, &users[0]).await;
        for p in &mut players {
            let ws = p.ws.as_mut().unwrap();
            let sync = ws
                .next_where(|m| m["t"] == "sync" && m["room"] == room.as_str() && m["view"]["order"].is_array())
                .await;
            assert_eq!(sync["seq"], 0, "watchers get the game's first view at seq 0: {sync}");
        }
        Table { server, room, game_pk, players, rng: Rng::from_seed(Seed(test_seed)), left: None, raced: 0, started }
    }

    fn id(&self, i: usize) -> &str {
        &self.players[i].user.id
    }

    fn idx(&self, id: &Value) -> usize {
        let id = id.as_str().unwrap_or_else(|| panic!("a user id, got {id}"));
        self.players.iter().position(|p| p.user.id == id).unwrap_or_else(|| panic!("{id} is not seated"))
    }

    fn has_left(&self, i: usize) -> bool {
        self.left.is_some_and(|(l, _)| l == i)
    }

    fn ws(&mut self, i: usize) -> &mut WsClient {
        self.players[i].ws.as_mut().expect("a connected player")
    }

    fn connected(&self) -> Vec<usize> {
        (0..self.players.len()).filter(|i| self.players[*i].ws.is_some()).collect()
    }

    /// Player `i`'s latest view.
    fn view_of(&self, i: usize) -> Value {
        self.players[i].ws.as_ref().expect("a connected player").view(&self.room)
    }

    /// The latest view of the first connected player.
    fn view(&self) -> Value {
        self.view_of(self.connected()[0])
    }

    /// Every connected socket has read up to `seq` (each stops at the first update at or
    /// after it, so they all end on the same one when `seq` was already sent).
    async fn catch_up(&mut self, seq: u64) {
        let room = self.room.clone();
        for i in self.connected() {
            self.ws(i).wait_seq(&room, seq).await;
        }
    }

    /// Brings every connected socket to the newest seq any of them has read; that seq.
    async fn level(&mut self) -> u64 {
        let room = self.room.clone();
        let newest = self.connected().iter().map(|i| self.players[*i].ws.as_ref().unwrap().seq(&room)).max().unwrap();
        self.catch_up(newest).await;
        newest
    }

    /// Nobody acts: waits (at most `limit`) for the server's own next input after `seq`;
    /// everyone has seen it. The update for `seq + 1`.
    async fn server_moves(&mut self, seq: u64, limit: Duration) -> Value {
        let room = self.room.clone();
        let o = self.connected()[0];
        let deadline = Instant::now() + limit;
        let ws = self.ws(o);
        while ws.seq(&room) <= seq {
            let now = Instant::now();
            assert!(now < deadline, "the server made no move after seq {seq} within {limit:?}");
            ws.next_within(deadline - now).await;
        }
        let next = ws
            .log
            .iter()
            .find(|m| m["t"] == "update" && m["room"] == room.as_str() && m["seq"] == seq + 1)
            .cloned()
            .expect("the update right after the wait");
        let newest = ws.seq(&room);
        self.catch_up(newest).await;
        next
    }

    /// Player `i` sends `a`, chosen on the view at the current seq. `Some(seq)` once applied
    /// (everyone has seen it); `None` when refused, which is allowed only when the server
    /// had moved in between (its update reaches the socket before the refusal).
    async fn act(&mut self, i: usize, a: Value) -> Option<u64> {
        let room = self.room.clone();
        let ws = self.ws(i);
        let before = ws.seq(&room);
        let cs = ws.cs();
        let answer = ws.act(&room, cs, a.clone()).await;
        let after = ws.seq(&room);
        match answer["t"].as_str() {
            Some("ack") => {
                let seq = answer["seq"].as_u64().unwrap();
                assert!(seq > before, "{a} acknowledged at an old seq: {answer}");
                self.catch_up(seq).await;
                Some(seq)
            }
            Some("reject") => {
                assert!(after > before, "{a} by {} refused at seq {before} with no race: {answer}", self.id(i));
                self.raced += 1;
                self.catch_up(after).await;
                None
            }
            _ => panic!("{a}: {answer}"),
        }
    }

    /// Player `i` sends `a`, which must be refused with `code` (or for a race, as in [`act`]).
    async fn act_refused(&mut self, i: usize, a: Value, code: &str) {
        let room = self.room.clone();
        let ws = self.ws(i);
        let before = ws.seq(&room);
        let cs = ws.cs();
        let answer = ws.act(&room, cs, a.clone()).await;
        let after = ws.seq(&room);
        assert_eq!(answer["t"], "reject", "{a} must be refused: {answer}");
        if answer["code"] != code {
            assert!(after > before, "{a} refused with another code than {code} and no race: {answer}");
            self.raced += 1;
        }
        self.catch_up(after).await;
    }

    /// Player `i` leaves their seat mid-game (`DELETE /api/rooms/{room}/seats/me`).
    async fn leave(&mut self, i: usize, how: Leave) {
        let seq = self.level().await;
        let room = self.room.clone();
        if how == Leave::StopWatching {
            let ws = self.ws(i);
            ws.send(json!({"t": "unsub", "room": room})).await;
            // The room reads its mailbox in order: once it has refused this malformed
            // action, the subscription is gone.
            let cs = ws.cs();
            let answer = ws.act(&room, cs, json!({"type": "nope"})).await;
            assert_eq!(
                (answer["t"].as_str(), answer["code"].as_str()),
                (Some("reject"), Some("bad_action")),
                "{answer}"
            );
        }
        let resp = self
            .server
            .http
            .delete(self.server.url(&format!("/api/rooms/{room}/seats/me")))
            .bearer_auth(&self.players[i].user.token)
            .send()
            .await
            .expect("http request");
        let status = resp.status().as_u16();
        let info: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 200, "leave: {info}");
        assert_eq!(info["status"], "playing", "{info}");
        assert!(
            info["seats"].as_array().unwrap().iter().any(|s| s["userId"] == self.id(i)),
            "a player who leaves a running game keeps the seat (their turns time out): {info}"
        );
        if how == Leave::StopWatching {
            let ws = self.players[i].ws.take().unwrap();
            self.players[i].log = ws.log.clone();
            ws.drop_connection();
        }
        self.left = Some((i, seq));
    }

    /// The `result` message connected player `i` received.
    async fn result_of(&mut self, i: usize) -> Value {
        let room = self.room.clone();
        let ws = self.ws(i);
        let is_result = |m: &Value| m["t"] == "result" && m["room"] == room.as_str();
        match ws.log.iter().find(|m| is_result(m)) {
            Some(r) => r.clone(),
            None => ws.next_where(is_result).await,
        }
    }

    /// Every check of the module docs, for every participant. The steps of the replay
    /// (the same for everyone) and the number of scenes compared per player.
    async fn check_replays<G: Game>(&mut self) -> (Vec<Value>, Vec<usize>) {
        let stored = self.server.stored(&self.game_pk).await;
        let record = self.server.store.record(&self.game_pk).await.unwrap().expect("finished game recorded");
        let rebuilt = rebuild::rebuild::<G>(&stored, rebuild::From::Seed).expect("rebuild from the seed");
        let final_state: Value = serde_json::from_str(&record.final_state_json).unwrap();
        assert_eq!(serde_json::to_value(&rebuilt.state).unwrap(), final_state, "rebuilt final state");
        assert_eq!(rebuilt.seq, record.final_seq);
        assert_eq!(stored.entries.len() as u64, record.final_seq);
        let mut result = serde_json::to_value(G::result(&rebuilt.state).expect("the rebuilt game is over")).unwrap();
        assert_eq!(result, serde_json::from_str::<Value>(&record.result_json).unwrap(), "rebuilt result");
        // On the socket the summary shows seat names where the game wrote player ids.
        let mut summary = result["summary"].as_str().unwrap().to_owned();
        for (player, name) in stored.start.players.iter().zip(&stored.start.names) {
            summary = summary.replace(player.as_str(), name);
        }
        result["summary"] = json!(summary);
        for i in self.connected() {
            let sent = self.result_of(i).await;
            assert_eq!(sent["gamePk"], self.game_pk.as_str());
            assert_eq!(sent["result"], result, "the result {} received", self.id(i));
        }
        let last_at = stored.entries.last().map_or(stored.start.started_at, |e| e.at);
        let last_rtt = stored.entries.iter().rev().find_map(|e| e.rtt.clone()).unwrap_or(stored.start.rtt.clone());
        let mut steps = None;
        let mut compared = Vec::new();
        for i in 0..self.players.len() {
            let (s, n) = self.check_replay::<G>(i, &rebuilt.state, (last_at, &last_rtt), record.final_seq).await;
            if let Some(first) = &steps {
                assert_eq!(first, &s, "every participant's replay has the same steps");
            }
            steps = Some(s);
            compared.push(n);
        }
        (steps.unwrap(), compared)
    }

    async fn check_replay<G: Game>(
        &self,
        i: usize,
        final_state: &G::State,
        (last_at, last_rtt): (i64, &BTreeMap<engine::PlayerId, u32>),
        final_seq: u64,
    ) -> (Vec<Value>, usize) {
        let p = &self.players[i];
        let who = p.user.id.as_str();
        let got = received(p.ws.as_ref().map_or(&p.log, |ws| &ws.log), &self.room, who);
        let (status, replay) = self.server.get(&format!("/api/replays/{}", self.game_pk), Some(&p.user.token)).await;
        assert_eq!(status, 200, "{who}'s replay: {replay}");
        let steps = replay["steps"].as_array().unwrap().clone();
        let patches = replay["patches"].as_array().unwrap();
        assert_eq!(replay["scenes"].as_u64(), Some(steps.len() as u64));
        assert_eq!(steps.len(), patches.len() + 1);
        assert_eq!(steps[0]["kind"], "start");
        // No stream actions in these games: every seq is a scene, the start included.
        for (k, step) in steps.iter().enumerate() {
            assert_eq!(step["seq"], k as u64, "{who}: step {k} is {step}");
        }
        assert_eq!(steps.last().unwrap()["seq"], final_seq, "{who}'s replay covers the whole game");
        assert_eq!(replay["first"], got.first, "{who}: scene 0 differs from the view received at seq 0");

        let last_received = got.updates.keys().next_back().copied().unwrap_or(0);
        match self.left {
            Some((l, at)) if l == i => {
                assert!(last_received >= at, "{who} received every scene up to leaving at {at} (got {last_received})")
            }
            _ => assert_eq!(last_received, final_seq, "{who} received every update"),
        }
        let mut scene = replay["first"].clone();
        let mut compared = 1;
        for (k, patch) in patches.iter().enumerate() {
            let seq = steps[k + 1]["seq"].as_u64().unwrap();
            let patch: json_patch::Patch = serde_json::from_value(patch.clone()).expect("an RFC 6902 patch");
            json_patch::patch(&mut scene, &patch).unwrap_or_else(|e| panic!("{who}: patch {k} does not apply: {e}"));
            if seq <= last_received {
                let view = &got.updates[&seq];
                assert_eq!(&scene, view, "{who}: scene {} differs from the update received for seq {seq}", k + 1);
                compared += 1;
            }
        }
        let pid = p.user.pid();
        let ctx = ViewCtx { now: last_at, rtt: Some(last_rtt) };
        let last = serde_json::to_value(G::view(final_state, Some(&pid), &ctx)).unwrap();
        assert_eq!(scene, last, "{who}'s last scene is their view of the rebuilt final state");

        let own: BTreeSet<u64> = steps
            .iter()
            .filter(|s| s["kind"] == "player" && s["actor"] == who)
            .map(|s| s["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(own, got.acks, "{who}'s own steps are exactly their acknowledged actions");
        (steps, compared)
    }

    /// Who did what after the leave: `(seq, actor, kind)` of every step by the leaver.
    fn leaver_steps(&self, steps: &[Value]) -> Vec<(u64, String)> {
        let (l, at) = self.left.expect("someone left");
        steps
            .iter()
            .filter(|s| s["seq"].as_u64().unwrap() > at && s["actor"] == self.id(l))
            .map(|s| (s["seq"].as_u64().unwrap(), s["kind"].as_str().unwrap().to_owned()))
            .collect()
    }
}

/// What one player received in `room`, checked for shape on the way.
struct Received {
    /// The game view of the `sync` sent at the start.
    first: Value,
    updates: BTreeMap<u64, Value>,
    acks: BTreeSet<u64>,
}

fn received(log: &[Value], room: &str, who: &str) -> Received {
    let mut first = None;
    let mut updates = BTreeMap::new();
    let mut acks = BTreeSet::new();
    for m in log.iter().filter(|m| m["room"] == room) {
        match m["t"].as_str() {
            Some("sync") if m["view"]["order"].is_array() => {
                assert_eq!(m["seq"], 0, "{who}'s game sync is the one at the start: {m}");
                assert!(first.is_none(), "{who} got a second game sync: {m}");
                first = Some(m["view"].clone());
            }
            Some("sync") => assert!(first.is_none() && m["seq"] == 0, "{who}: a waiting-room sync in the game: {m}"),
            Some("update") => {
                assert!(first.is_some(), "{who}: an update before the game's sync: {m}");
                let seq = m["seq"].as_u64().unwrap();
                assert_eq!(seq, updates.len() as u64 + 1, "{who} receives the updates in order, each once");
                updates.insert(seq, m["view"].clone());
            }
            Some("ack") => {
                acks.insert(m["seq"].as_u64().unwrap());
            }
            _ => {}
        }
    }
    let first = first.unwrap_or_else(|| panic!("{who} never got the game's sync"));
    Received { first, updates, acks }
}

/// The update right after a wait shows `event` (by `type`) for `player`.
fn assert_event(update: &Value, kind: &str, field: &str, player: &str, extra: Option<(&str, Value)>) {
    let found = update["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == kind && e[field] == player && extra.as_ref().is_none_or(|(k, v)| &e[*k] == v));
    assert!(found, "expected a {kind} event for {player}: {update}");
}

// ---------------------------------------------------------------------------------------
// Halli Galli
// ---------------------------------------------------------------------------------------

/// Short and sure to end: 2 s turns, no bell lock, penalties under the bell (so the
/// player who left only ever loses cards), leftovers out of the game. The 5-minute time
/// limit is only a backstop.
fn hg_options() -> Value {
    json!({
        "endMode": "lastStanding",
        "timeLimitMin": 5,
        "flipSeconds": 2,
        "flipGuardMs": 400,
        "wrongRingLockoutMs": 0,
        "leftoverCards": "remove",
        "wrongToPot": true,
    })
}

fn hg_active(v: &Value, id: &str) -> bool {
    v["players"][id]["active"] == true
}

fn hg_deck(v: &Value, id: &str) -> u64 {
    v["players"][id]["deck"].as_u64().unwrap()
}

fn hg_held(v: &Value, id: &str) -> u64 {
    hg_deck(v, id) + v["players"][id]["faceUpCount"].as_u64().unwrap()
}

fn ring(version: u64) -> Value {
    json!({"type": "ring", "version": version})
}

/// A whole game: flips on turn, right and wrong rings at random, stale rings (`late`),
/// turns left to the 2 s deadline, and a player who sheds cards by wrong rings, leaves and
/// keeps watching while the server flips for them (1 s into each of their turns) until
/// they are out; one of the other two then rings wrongly until they are out too.
async fn play_halli_galli(test_seed: u128) -> Table {
    let mut t = Table::open("halli-galli", hg_options(), "000000000000000000000000000ba11a", test_seed).await;
    let leaver = 1 + t.rng.index(2);
    let leave_at_step = 6 + t.rng.index(6);
    let keep = 2 + t.rng.int(4) as u64;
    let mut loser: Option<usize> = None;
    let (mut step, mut deadline_flips, mut leaver_timeouts) = (0, 0, 0);
    loop {
        let seq = t.level().await;
        let v = t.view();
        if v["phase"] == "ended" {
            break;
        }
        step += 1;
        assert!(step < 500, "the game should be over by now: {v}");
        if v["phase"] != "playing" || v["flipReserved"] == true || !v["ringWindow"].is_null() {
            // The countdown or a reserved flip: the server moves next.
            t.server_moves(seq, SERVER_MOVE).await;
            continue;
        }
        let ver = v["tableVersion"].as_u64().unwrap();
        let turn = t.idx(&v["turn"]);
        let here: Vec<usize> = (0..3).filter(|i| !t.has_left(*i) && hg_active(&v, t.id(*i))).collect();
        if t.left.is_none() && step >= leave_at_step {
            if hg_active(&v, t.id(leaver)) && hg_deck(&v, t.id(leaver)) > keep && !hg_five(&v) {
                t.act(leaver, ring(ver)).await;
            } else {
                assert!(hg_active(&v, t.id(leaver)), "the leaver is still in the game: {v}");
                t.leave(leaver, Leave::KeepWatching).await;
                loser = here.iter().copied().filter(|i| *i != leaver).min_by_key(|i| hg_held(&v, t.id(*i)));
            }
            continue;
        }
        let r = t.rng.int(100);
        if hg_five(&v) && r < 60 {
            if let Some(&ringer) = t.rng.pick(&here) {
                t.act(ringer, ring(ver)).await;
                continue;
            }
        }
        if let Some(l) = loser.filter(|l| here.contains(l) && r < 70 && !hg_five(&v)) {
            t.act(l, ring(ver)).await;
            continue;
        }
        if t.left.is_none() && r < 20 {
            let ringer = *t.rng.pick(&here).unwrap();
            t.act(ringer, ring(ver)).await;
            continue;
        }
        if (20..25).contains(&r) && ver > 0 {
            let ringer = *t.rng.pick(&here).unwrap();
            t.act_refused(ringer, ring(ver - 1), "late").await;
            continue;
        }
        if t.has_left(turn) {
            // Their turn: the server flips for them 1 s in.
            let next = t.server_moves(seq, SERVER_MOVE).await;
            if !next["events"].as_array().unwrap().iter().any(|e| e["type"] == "flipReserved") {
                assert_event(&next, "flipped", "player", t.id(turn), Some(("auto", json!(false))));
            }
            leaver_timeouts += 1;
        } else if (deadline_flips == 0 && step >= 3) || (deadline_flips < 3 && r >= 93) {
            // The turn player does nothing: the 2 s deadline flips for them.
            let next = t.server_moves(seq, SERVER_MOVE).await;
            assert_event(&next, "flipped", "player", t.id(turn), Some(("auto", json!(true))));
            deadline_flips += 1;
        } else {
            t.act(turn, json!({"type": "flip"})).await;
        }
    }
    assert!(t.left.is_some(), "a player left mid-game");
    assert!(deadline_flips >= 1 && leaver_timeouts >= 1, "{deadline_flips} deadline flips, {leaver_timeouts}");
    t
}

#[tokio::test]
async fn halli_galli_replay_scenes_equal_what_each_player_received_over_the_websocket() {
    let mut t = play_halli_galli(0x5eed_0001).await;
    let (steps, compared) = t.check_replays::<HalliGalli>().await;
    let (leaver, at) = t.left.unwrap();
    // After leaving, the leaver only ever acts through the server's timeouts.
    let after = t.leaver_steps(&steps);
    assert!(!after.is_empty() && after.iter().all(|(_, kind)| kind == "auto"), "{after:?}");
    // Watching on, the leaver saw every scene to the end.
    assert_eq!(compared[leaver], steps.len(), "the leaver kept receiving their views");
    // The game had right and wrong rings, and flips by players, by the 2 s deadline and
    // for the leaver.
    let events: Vec<Value> = t.players[0]
        .ws
        .as_ref()
        .unwrap()
        .log
        .iter()
        .filter(|m| m["t"] == "update")
        .flat_map(|m| m["events"].as_array().unwrap().clone())
        .collect();
    let count = |kind: &str, field: &str, value: Value| {
        events.iter().filter(|e| e["type"] == kind && e[field] == value).count()
    };
    let (right, wrong) = (count("bell", "correct", json!(true)), count("bell", "correct", json!(false)));
    let (flips, deadline_flips) = (count("flipped", "auto", json!(false)), count("flipped", "auto", json!(true)));
    assert!(right >= 1 && wrong >= 1 && flips >= 1 && deadline_flips >= 1, "{right} {wrong} {flips} {deadline_flips}");
    // Live RTTs were shown (and so compared above): pings every second reached the room.
    let with_rtt = t.players[0]
        .ws
        .as_ref()
        .unwrap()
        .log
        .iter()
        .filter(|m| m["t"] == "update")
        .filter(|m| m["view"]["players"].as_object().unwrap().values().any(|p| p["rtt"].is_u64()))
        .count();
    assert!(with_rtt > 0, "no update showed an RTT");
    let auto = steps.iter().filter(|s| s["kind"] == "auto").count();
    eprintln!(
        "halli-galli ({with_rtt} updates showed RTTs): {} scenes ({auto} auto), compared per player {compared:?}, leaver {} left at seq {at}, \
         {right} right and {wrong} wrong rings, {flips} flips, {deadline_flips} on the deadline, \
         {} raced refusals, {:?}",
        steps.len(),
        t.id(leaver),
        t.raced,
        t.started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// Cockroach Poker
// ---------------------------------------------------------------------------------------

/// A random legal action for player `me` (the active one) from their own view: an offer
/// of a random card to a random player with a true or random claim, or, holding a card,
/// a random call or a peek (then a pass to someone who has not seen it).
fn cp_random_action(rng: &mut Rng, v: &Value, me: &str) -> Value {
    let kinds: Vec<Value> = Kind::ALL.iter().map(|k| serde_json::to_value(k).unwrap()).collect();
    let claim =
        |rng: &mut Rng, truth: &Value| if rng.chance(0.5) { truth.clone() } else { rng.pick(&kinds).unwrap().clone() };
    if v["holder"].is_null() {
        assert_eq!(v["starter"], me);
        let hand = v["hand"].as_array().unwrap().clone();
        let card = rng.pick(&hand).expect("the starter has cards").clone();
        let others: Vec<Value> = v["order"].as_array().unwrap().iter().filter(|p| *p != me).cloned().collect();
        let to = rng.pick(&others).unwrap().clone();
        return json!({"type": "offer", "cardId": card["id"], "to": to, "claim": claim(rng, &card["kind"])});
    }
    assert_eq!(v["holder"], me);
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

/// A whole game (lose at 3 of a kind, 15 s turns): random offers, peeks, passes and calls;
/// one turn left to run out; a player who stops watching, leaves and disconnects, whose
/// every later turn the server then takes at once (a random move, §8.5).
async fn play_cockroach_poker(test_seed: u128) -> Table {
    let options = json!({"loseCount": 3, "turnSeconds": 15});
    let mut t = Table::open("cockroach-poker", options, "0000000000000000000000000000c0c0", test_seed).await;
    let leaver = t.rng.index(3);
    let leave_at_step = 4 + t.rng.index(8);
    let run_out_at_step = 2 + t.rng.index(6);
    let (mut step, mut ran_out, mut leaver_timeouts) = (0, 0, 0);
    loop {
        let seq = t.level().await;
        let v = t.view();
        if !v["loser"].is_null() {
            break;
        }
        step += 1;
        assert!(step < 600, "the game should be over by now: {v}");
        if t.left.is_none() && step >= leave_at_step {
            t.leave(leaver, Leave::StopWatching).await;
            continue;
        }
        let active = t.idx(if v["holder"].is_null() { &v["starter"] } else { &v["holder"] });
        if t.has_left(active) {
            // Away with the grace spent: timed out at once.
            let next = t.server_moves(seq, SERVER_MOVE).await;
            assert_event(&next, "timedOut", "player", t.id(active), None);
            leaver_timeouts += 1;
        } else if ran_out == 0 && step >= run_out_at_step {
            let next = t.server_moves(seq, TURN_RUNS_OUT).await;
            assert_event(&next, "timedOut", "player", t.id(active), None);
            ran_out += 1;
        } else {
            let own = t.view_of(active);
            let me = t.id(active).to_owned();
            let a = cp_random_action(&mut t.rng, &own, &me);
            t.act(active, a).await;
        }
    }
    assert!(t.left.is_some() && ran_out == 1, "a player left and a turn ran out");
    assert!(leaver_timeouts >= 1, "the server took the leaver's turns");
    eprintln!("cockroach-poker: the leaver was timed out {leaver_timeouts} times");
    t
}

#[tokio::test]
async fn cockroach_poker_replay_scenes_equal_what_each_player_received_over_the_websocket() {
    let mut t = play_cockroach_poker(0x5eed_0002).await;
    let (steps, compared) = t.check_replays::<CockroachPoker>().await;
    let (leaver, at) = t.left.unwrap();
    let after = t.leaver_steps(&steps);
    assert!(after.iter().all(|(_, kind)| kind == "auto"), "after leaving only timeouts act for them: {after:?}");
    // The leaver stopped watching: their views end at the leave, their replay does not.
    assert!(compared[leaver] < steps.len(), "the leaver stopped receiving ({compared:?})");
    let auto = steps.iter().filter(|s| s["kind"] == "auto").count();
    eprintln!(
        "cockroach-poker: {} scenes ({auto} auto), compared per player {compared:?}, leaver {} left at seq {at}, \
         {} raced refusals, {:?}",
        steps.len(),
        t.id(leaver),
        t.raced,
        t.started.elapsed()
    );
}
