//! Whole-game helpers (`tests/games.rs`): play a whole game in a room (bots, a silent or absent
//! human, virtual time), then check the stored log against the engine: every entry
//! legal when it was applied, rebuilds that match the record, and every message a
//! subscriber received equal to the stored state's view and free of its secrets.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use super::{add_bot, Client, Node};
use engine::testing::find_leaks;
use engine::{Ctx, Game, GameResult, Input, InputOf, PlayerId, Seed, ViewCtx};
use room_actor::directory::RoomHandle;
use room_actor::log::{GameRecord, LogEntry, StoredGame};
use room_actor::messages::Start;
use room_actor::rebuild::{self, rebuild, From};
use room_actor::spawn::{create_room, NewRoom};
use room_actor::RoomStore;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The host's user id in every room these tests open.
pub const HOST: &str = "host";
/// The spectator's user id.
pub const WATCHER: &str = "watcher";
/// How long (virtual time) a whole game may take before the test fails.
const GAME_LIMIT: Duration = Duration::from_secs(6 * 3600);

/// What the seated human host does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Human {
    /// Never subscribes: disconnected from the first moment.
    Absent,
    /// Subscribes before the start and stays, but never sends an action.
    Silent,
    /// Subscribes before the start, never acts, and unsubscribes after this many updates.
    LeavesAfter(usize),
    /// Halli Galli only: plays as a quick person does. Rings this many ms after a five
    /// appears on the table it is shown (unless the five is gone by then), and flips at
    /// once when it is their turn and no five shows.
    Reacts(u64),
}

/// A room to play to the end.
pub struct Setup {
    pub room: String,
    pub game: &'static str,
    pub options: Value,
    pub bots: usize,
    pub human: Human,
    pub grace_sec: u32,
    /// The game's seed (the deal); the bots' choices come from OS randomness.
    pub seed: u128,
}

/// A finished game and everything the subscribers received.
#[derive(Clone)]
pub struct Played {
    pub pk: String,
    pub stored: StoredGame,
    pub record: GameRecord,
    pub spectator: Vec<Value>,
    /// The host's subscription (empty when absent).
    pub human: Vec<Value>,
    /// A spectator who subscribed after the end (`sync` and `result`).
    pub latecomer: Vec<Value>,
    /// A lower bound of the room's `disconnected_since` for the host, if they were away.
    pub away_since: Option<i64>,
    pub host: PlayerId,
    pub bots: Vec<PlayerId>,
}

async fn recv(client: &mut Client, what: &str) -> Value {
    tokio::time::timeout(GAME_LIMIT, client.rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{}: nothing within {GAME_LIMIT:?} of virtual time waiting for {what}", client.user))
        .unwrap_or_else(|| panic!("{}: channel closed waiting for {what}", client.user))
}

/// Collects every message until (and including) `result`.
async fn until_result(client: &mut Client, into: &mut Vec<Value>) {
    loop {
        let msg = recv(client, "result").await;
        let done = msg["t"] == "result";
        into.push(msg);
        if done {
            return;
        }
    }
}

/// Whether a Halli Galli view shows exactly five of one fruit on the players' tops.
pub fn hg_five(view: &Value) -> bool {
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    for p in view["players"].as_object().into_iter().flat_map(|players| players.values()) {
        if let (Some(fruit), Some(count)) = (p["top"]["fruit"].as_str(), p["top"]["count"].as_u64()) {
            *sums.entry(fruit).or_default() += count;
        }
    }
    sums.values().any(|s| *s == 5)
}

/// [`Human::Reacts`]: the host's side of a Halli Galli game until its `result`.
async fn react_until_result(client: &mut Client, room: &RoomHandle, after: Duration, into: &mut Vec<Value>) {
    let (mut cs, mut version) = (0u64, 0u64);
    let mut ring_at: Option<tokio::time::Instant> = None;
    loop {
        let msg = match ring_at {
            Some(at) => tokio::select! {
                msg = recv(client, "result") => msg,
                () = tokio::time::sleep_until(at) => {
                    ring_at = None;
                    cs += 1;
                    client.act(room, cs, serde_json::json!({"type": "ring", "version": version}));
                    continue;
                }
            },
            None => recv(client, "result").await,
        };
        if matches!(msg["t"].as_str(), Some("sync" | "update")) && msg["view"]["phase"] == "playing" {
            let view = &msg["view"];
            version = view["tableVersion"].as_u64().unwrap_or(version);
            if hg_five(view) {
                // Seen now: the ring goes `after` from the first sight of a five.
                ring_at.get_or_insert(tokio::time::Instant::now() + after);
            } else {
                ring_at = None;
                if view["canFlip"] == true {
                    cs += 1;
                    client.act(room, cs, serde_json::json!({"type": "flip"}));
                }
            }
        }
        let done = msg["t"] == "result";
        into.push(msg);
        if done {
            return;
        }
    }
}

/// Opens the room, seats the bots, subscribes a spectator (and the host, unless
/// absent) before the start, and plays until the spectator receives `result`.
/// Call with tokio's time paused and a node on `Clock::tokio()`.
pub async fn play(node: &Node, setup: Setup) -> Played {
    println!("playing {} ({}) seed {:#x}", setup.room, setup.game, setup.seed);
    let room = create_room(
        NewRoom {
            room_id: setup.room.clone(),
            game: setup.game.into(),
            options: Some(setup.options),
            host: HOST.into(),
            host_name: HOST.into(),
            grace_sec: setup.grace_sec,
            seed: Some(Seed(setup.seed)),
            listed: None,
        },
        node.deps.clone(),
    )
    .expect("room created");
    for _ in 0..setup.bots {
        add_bot(&room, HOST).await;
    }
    let mut spectator = Client::new(100, WATCHER);
    spectator.subscribe(&room);
    let mut human = Client::new(1, HOST);
    if setup.human != Human::Absent {
        human.subscribe(&room);
    }
    let started_ms = node.deps.clock.now_ms();
    let pk = room.ask(Start { user: HOST.into() }).await.unwrap();

    let mut human_msgs = Vec::new();
    let mut away_since = match setup.human {
        Human::Absent => Some(started_ms),
        _ => None,
    };
    if let Human::LeavesAfter(n) = setup.human {
        let mut updates = 0;
        while updates < n {
            let msg = recv(&mut human, "an update").await;
            assert_ne!(msg["t"], "result", "the game ended before the host left");
            updates += usize::from(msg["t"] == "update");
            human_msgs.push(msg);
        }
        away_since = Some(node.deps.clock.now_ms());
        human.unsubscribe(&room);
    }

    if let Human::Reacts(ms) = setup.human {
        react_until_result(&mut human, &room, Duration::from_millis(ms), &mut human_msgs).await;
    }
    let mut spectator_msgs = Vec::new();
    until_result(&mut spectator, &mut spectator_msgs).await;
    match setup.human {
        Human::Silent => until_result(&mut human, &mut human_msgs).await,
        Human::Reacts(_) => {}
        Human::LeavesAfter(_) => {
            human_msgs.extend(human.drain());
            assert!(
                human_msgs.iter().all(|m| m["t"] != "result"),
                "the host unsubscribed, yet still received the result"
            );
        }
        Human::Absent => {}
    }

    // The record is written right after `result` is sent: wait for it (bounded).
    let mut record = None;
    for _ in 0..200 {
        record = node.store.record(&pk).await.unwrap();
        if record.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let record = record.expect("finished game recorded");
    let mut latecomer = Client::new(200, "latecomer");
    latecomer.subscribe(&room);
    let mut latecomer_msgs = Vec::new();
    until_result(&mut latecomer, &mut latecomer_msgs).await;
    let stored = node.store.load(&pk).await.unwrap().expect("game stored");
    let bots = stored.start.bots.clone();
    assert_eq!(bots.len(), setup.bots);
    Played {
        pk,
        stored,
        record,
        spectator: spectator_msgs,
        human: human_msgs,
        latecomer: latecomer_msgs,
        away_since,
        host: HOST.into(),
        bots,
    }
}

/// The stored game re-run entry by entry.
pub struct Replay<G: Game> {
    /// `states[s]`: the state after `s` entries (`states[0]`: after setup).
    pub states: Vec<G::State>,
    /// `inputs[s - 1]`, `events[s - 1]`: the input and events of entry `s`.
    pub inputs: Vec<InputOf<G>>,
    pub events: Vec<Vec<G::Event>>,
    pub entries: Vec<LogEntry>,
}

impl<G: Game> Replay<G> {
    /// The state an entry was applied to.
    pub fn before(&self, entry: &LogEntry) -> &G::State {
        &self.states[usize::try_from(entry.seq - 1).unwrap()]
    }

    pub fn final_state(&self) -> &G::State {
        self.states.last().unwrap()
    }

    /// (entry, input, state before) for every entry.
    pub fn steps(&self) -> impl Iterator<Item = (&LogEntry, &InputOf<G>, &G::State)> {
        self.entries.iter().zip(&self.inputs).zip(&self.states).map(|((e, i), s)| (e, i, s))
    }
}

/// Re-runs a stored game from its seed: every entry must pass `G::validate` on the state
/// it was applied to, with the context it was applied with (`at`, `rtt_ms`), before it
/// is applied. Panics naming the first entry that would be refused.
pub fn replay_validating<G: Game>(stored: &StoredGame) -> Replay<G> {
    let (mut state, mut rng) = rebuild::initial::<G>(stored).expect("setup from the start entry");
    let mut replay =
        Replay { states: vec![state.clone()], inputs: Vec::new(), events: Vec::new(), entries: stored.entries.clone() };
    for (i, entry) in stored.entries.iter().enumerate() {
        assert_eq!(entry.seq, i as u64 + 1, "log seqs are contiguous from 1");
        let input: InputOf<G> = serde_json::from_str(&entry.input_json)
            .unwrap_or_else(|e| panic!("seq {}: input does not decode: {e}", entry.seq));
        let ctx = Ctx { now: entry.at, rtt_ms: entry.rtt_ms };
        if let Err(refusal) = G::validate(&state, &entry.actor, &input, &ctx) {
            panic!(
                "seq {} ({:?} {input:?} at {}) is illegal on the state it was applied to: {} {}",
                entry.seq,
                entry.actor,
                entry.at,
                engine::Reject::code(&refusal),
                engine::Reject::reason(&refusal)
            );
        }
        let applied = rebuild::apply_entry::<G>(&state, &mut rng, entry)
            .unwrap_or_else(|e| panic!("seq {}: apply failed on replay: {e}", entry.seq));
        state = applied.state;
        replay.states.push(state.clone());
        replay.inputs.push(input);
        replay.events.push(applied.events);
    }
    replay
}

/// The record matches the log: rebuilt from the seed and from the latest snapshot, the
/// final state is exactly `final_state_json`, and `result_json` is `G::result` of it.
pub fn check_rebuilds<G: Game>(played: &Played, replay: &Replay<G>) {
    let record = &played.record;
    let stored = &played.stored;
    assert_eq!(record.game_pk, played.pk);
    assert_eq!(record.final_seq, stored.entries.len() as u64, "final_seq is the last logged seq");
    assert_eq!(record.players, stored.start.players);

    let from_seed = rebuild::<G>(stored, From::Seed).expect("rebuild from the seed");
    assert_eq!(from_seed.seq, record.final_seq);
    let final_json = serde_json::to_string(&from_seed.state).unwrap();
    assert_eq!(final_json, record.final_state_json, "rebuilt from the seed, the final state differs from the record");
    assert_eq!(&from_seed.state, replay.final_state());

    match stored.snapshot.as_ref() {
        Some(snapshot) => {
            assert_eq!(snapshot.seq % 16, 0, "snapshots every 16 entries");
            assert!(snapshot.seq <= record.final_seq && snapshot.seq + 16 > record.final_seq, "the latest is kept");
            let snap_state: G::State = serde_json::from_str(&snapshot.state_json).unwrap();
            let at_seq = &replay.states[usize::try_from(snapshot.seq).unwrap()];
            assert_eq!(&snap_state, at_seq, "the snapshot is the state at its seq");
        }
        None => assert!(record.final_seq < 16, "{} entries and no snapshot", record.final_seq),
    }
    let from_snapshot = rebuild::<G>(stored, From::LatestSnapshot).expect("rebuild from the latest snapshot");
    assert_eq!(from_snapshot.seq, record.final_seq);
    assert_eq!(
        serde_json::to_string(&from_snapshot.state).unwrap(),
        record.final_state_json,
        "rebuilt from the latest snapshot, the final state differs from the record"
    );
    assert_eq!(from_snapshot.rng.state(), from_seed.rng.state(), "the RNG continues identically");

    let result = G::result(&from_seed.state).expect("the rebuilt final state has a result");
    assert_eq!(record.result_json, serde_json::to_string(&result).unwrap(), "result_json = G::result(rebuilt)");
    assert_eq!(record.ended_at, stored.entries.last().unwrap().at, "ended at the last entry");
    for (s, state) in replay.states.iter().enumerate().take(replay.states.len() - 1) {
        assert!(G::result(state).is_none(), "the game had a result at seq {s}, before its last entry");
    }
}

/// What a subscription received, counted.
#[derive(Debug, Default)]
pub struct Seen {
    pub updates: usize,
    pub syncs: usize,
    pub last_update_seq: u64,
}

/// Every `update`/`sync` a subscription received is checked against the stored game:
/// no secret of `G::secrets_of(state at its seq, viewer)` (`find_leaks` over the whole
/// message), an update's view and events are exactly `G::view` / the applied events of
/// that seq, a sync's view is `G::sync_view` of that seq; updates arrive in seq order
/// without gaps; `result` equals the record.
pub fn check_messages<G: Game>(
    played: &Played,
    replay: &Replay<G>,
    msgs: &[Value],
    viewer: Option<&PlayerId>,
    who: &str,
) -> Seen {
    let no_rtt = BTreeMap::new();
    let mut seen = Seen::default();
    // The room shows seat names where the game's summary has player ids; everything
    // else is the recorded result as is.
    let mut recorded: Value = serde_json::from_str(&played.record.result_json).unwrap();
    if let Some(summary) = recorded["summary"].as_str() {
        let mut shown = summary.to_owned();
        for (player, name) in played.record.players.iter().zip(&played.record.names) {
            if !name.is_empty() {
                shown = shown.replace(player.as_str(), name);
            }
        }
        recorded["summary"] = Value::String(shown);
    }
    for msg in msgs {
        let t = msg["t"].as_str().unwrap_or_default();
        if t == "result" {
            assert_eq!(msg["gamePk"], played.pk.as_str(), "{who}: result of another game");
            assert_eq!(msg["result"], recorded, "{who}: the result sent is not the one recorded");
            let _: GameResult = serde_json::from_value(msg["result"].clone()).expect("result decodes as GameResult");
            continue;
        }
        if t != "update" && t != "sync" {
            continue;
        }
        let seq = msg["seq"].as_u64().unwrap_or_else(|| panic!("{who}: {t} without seq"));
        let state = replay
            .states
            .get(usize::try_from(seq).unwrap())
            .unwrap_or_else(|| panic!("{who}: {t} at seq {seq}, past the log's end"));
        let leaks = find_leaks(msg, &G::secrets_of(state, viewer));
        assert!(leaks.is_empty(), "{who}: {t} at seq {seq} leaks hidden information: {leaks:?}");
        if t == "update" {
            assert_eq!(seq, seen.last_update_seq + 1, "{who}: updates arrive in seq order, none missing");
            seen.last_update_seq = seq;
            seen.updates += 1;
            let entry = &replay.entries[usize::try_from(seq - 1).unwrap()];
            let view = G::view(state, viewer, &ViewCtx { now: entry.at, rtt: Some(&no_rtt) });
            assert_eq!(
                msg["view"],
                serde_json::to_value(&view).unwrap(),
                "{who}: update {seq} is not the stored state"
            );
            let events = serde_json::to_value(&replay.events[usize::try_from(seq - 1).unwrap()]).unwrap();
            assert_eq!(msg["events"], events, "{who}: update {seq} events differ from the replay's");
        } else {
            seen.syncs += 1;
            if msg["view"].get("roomId").is_some() {
                // The waiting room's sync: room info, not a game view.
                assert_eq!(seq, 0);
                continue;
            }
            let now = msg["view"]["now"].as_i64().unwrap_or_else(|| panic!("{who}: sync view without `now`"));
            let view = G::sync_view(state, viewer, &ViewCtx { now, rtt: Some(&no_rtt) });
            assert_eq!(msg["view"], serde_json::to_value(&view).unwrap(), "{who}: sync {seq} is not the stored state");
        }
    }
    seen
}

/// Everything every scenario must satisfy. Returns the replay for game-specific checks.
pub fn verify<G: Game>(played: &Played) -> Replay<G> {
    let replay = replay_validating::<G>(&played.stored);
    check_rebuilds::<G>(played, &replay);
    let final_seq = played.record.final_seq;

    let spectator = check_messages::<G>(played, &replay, &played.spectator, None, "spectator");
    assert_eq!(spectator.last_update_seq, final_seq, "the spectator saw every update");
    assert_eq!(played.spectator.last().unwrap()["t"], "result", "the spectator's last message is the result");
    assert!(spectator.syncs >= 1);
    if !played.human.is_empty() {
        let human = check_messages::<G>(played, &replay, &played.human, Some(&played.host), "host");
        assert!(human.syncs >= 1 && human.updates >= 1, "the host's subscription received the game");
        if played.away_since.is_none() {
            assert_eq!(human.last_update_seq, final_seq, "the connected host saw every update");
        }
    }

    let late = check_messages::<G>(played, &replay, &played.latecomer, None, "latecomer");
    assert_eq!((late.syncs, late.updates), (1, 0), "a late spectator gets one sync, then the result");
    assert_eq!(played.latecomer[0]["t"], "sync");
    assert_eq!(played.latecomer[0]["seq"], final_seq, "the late sync is the final state");

    // Bots have no socket: what the room shows a bot is `G::view` of the state it thinks
    // on, built at every commit; check that for every stored state.
    let no_rtt = BTreeMap::new();
    for (seq, state) in replay.states.iter().enumerate() {
        let now = seq.checked_sub(1).map_or(played.stored.start.started_at, |i| replay.entries[i].at);
        for bot in &played.bots {
            let view = serde_json::to_value(G::view(state, Some(bot), &ViewCtx { now, rtt: Some(&no_rtt) })).unwrap();
            let leaks = find_leaks(&view, &G::secrets_of(state, Some(bot)));
            assert!(leaks.is_empty(), "bot {bot}'s view at seq {seq} leaks hidden information: {leaks:?}");
        }
    }

    // Nobody sent a client action: the bots' moves and every timeout are server-made.
    for (entry, input, _) in replay.steps() {
        assert!(entry.auto && entry.cs.is_none(), "seq {}: a non-automatic entry {entry:?}", entry.seq);
        match &entry.actor {
            engine::Actor::Player(p) if *p == played.host => {
                assert!(matches!(input, Input::System(_)), "seq {}: the silent host acted: {input:?}", entry.seq)
            }
            engine::Actor::Player(p) => assert!(played.bots.contains(p), "seq {}: unknown actor {p}", entry.seq),
            engine::Actor::Server => {
                assert!(matches!(input, Input::System(_)), "seq {}: a server client action", entry.seq)
            }
        }
    }
    replay
}

/// Entries applied for `player` (timeouts for the host, moves and timeouts for bots).
pub fn entries_of<'a, G: Game>(
    replay: &'a Replay<G>,
    player: &'a PlayerId,
) -> impl Iterator<Item = (&'a LogEntry, &'a InputOf<G>, &'a G::State)> {
    replay.steps().filter(move |(e, _, _)| e.actor.player() == Some(player))
}

/// Runs `f`, which must panic with a message containing `what`.
pub fn expect_panic(what: &str, f: impl FnOnce()) {
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .err()
        .unwrap_or_else(|| panic!("expected a panic about `{what}`, but the check passed"));
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(msg.contains(what), "expected a panic about `{what}`, got `{msg}`");
}
