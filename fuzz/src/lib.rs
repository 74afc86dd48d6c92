//! The fuzz targets' shared driver: the client input path exactly as a room runs it
//! (`room-actor/src/room/input.rs`, `Handler<Act>` then `process` then `commit`), with the
//! contract's invariants asserted at every step. A panic anywhere is a crash to libFuzzer.
//!
//! A game case is a 9-byte header followed by the action:
//!
//! | byte | meaning                                                                  |
//! |------|--------------------------------------------------------------------------|
//! | 0    | setup seed (the game's RNG, so deal and shuffles)                        |
//! | 1    | options: 0 = defaults, else a seed picking one catalog choice per option |
//! | 2    | player count, `min + b % (max - min + 1)` for those options              |
//! | 3, 4 | warm-up steps (u16 LE, modulo 512): random legal inputs and due timers   |
//! | 5    | actor: `b % (n + 2)`; `< n` is seat `p{b+1}`, `n` a stranger, `n+1` the server |
//! | 6, 7 | ms between the last warm-up step and the action (u16 LE)                 |
//! | 8    | the actor's RTT: 0 = unknown, else `(b - 1) * 4` ms                      |
//! | 9..  | the action: JSON text if it parses, else bytes that `arbitrary` turns into an action (a mutated legal action, an action-shaped object or any JSON) |
//!
//! Missing bytes read as zero, so every input is a case.

use engine::games::cockroach_poker::CockroachPoker;
use engine::games::halli_galli::HalliGalli;
use engine::games::tally::Tally;
use engine::schedule::{self, Presence};
use engine::{Actor, Ctx, Game, Input, InputOf, PlayerId, Reject, Rng, Seed, SetupCtx, ViewCtx};
use libfuzzer_sys::arbitrary::{Result as ArbitraryResult, Unstructured};
use protocol::{parse, ClientMsg};
use serde_json::{json, Map, Value};
use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::OnceLock;

/// `gateway/src/protocol.rs` itself, compiled here rather than through a dependency on
/// the gateway crate, whose server stack (actix, redis, tokio, ...) made the instrumented
/// build several times longer (18 min against 2 on a loaded 2-core machine). That file
/// needs only serde_json.
#[path = "../../gateway/src/protocol.rs"]
pub mod protocol;

/// The decoders of frames from other nodes (the `bus_frame` and `link_frame` targets).
pub mod frames;

/// Start of simulated time.
pub const START: i64 = 1_700_000_000_000;
/// Bytes before the action.
pub const HEADER: usize = 9;
/// Most warm-up steps a case asks for.
pub const MAX_WARMUP: usize = 511;

/// The words of a game's actions, so built actions reach the rules and not only the
/// decoder.
pub struct Vocab {
    pub types: &'static [&'static str],
    pub fields: &'static [&'static str],
    pub words: &'static [&'static str],
}

pub const HALLI_GALLI: Vocab = Vocab { types: &["flip", "ring"], fields: &["version"], words: &[] };

pub const COCKROACH_POKER: Vocab = Vocab {
    types: &["offer", "call", "peek", "pass"],
    fields: &["cardId", "to", "claim", "call"],
    words: &["cockroach", "bat", "fly", "toad", "rat", "scorpion", "spider", "stinkbug", "true", "false"],
};

pub const TALLY: Vocab = Vocab { types: &["bump"], fields: &["by"], words: &[] };

/// Player ids and near misses, for any game.
const IDS: &[&str] = &["p1", "p2", "p3", "p4", "p5", "p6", "stranger", "", "P1", "p1 "];

/// The header of a game case.
#[derive(Clone, Copy, Debug, Default)]
pub struct Header {
    pub seed: u8,
    pub options: u8,
    pub players: u8,
    pub steps: u16,
    pub actor: u8,
    pub gap_ms: u16,
    pub rtt: u8,
}

impl Header {
    pub fn read(data: &[u8]) -> (Header, &[u8]) {
        let mut h = [0u8; HEADER];
        let n = data.len().min(HEADER);
        h[..n].copy_from_slice(&data[..n]);
        let header = Header {
            seed: h[0],
            options: h[1],
            players: h[2],
            steps: u16::from_le_bytes([h[3], h[4]]),
            actor: h[5],
            gap_ms: u16::from_le_bytes([h[6], h[7]]),
            rtt: h[8],
        };
        (header, &data[n..])
    }

    pub fn rtt_ms(&self) -> Option<u32> {
        (self.rtt > 0).then(|| u32::from(self.rtt - 1) * 4)
    }
}

/// A game in progress, as a room holds it.
#[derive(Clone, Debug)]
pub struct Room<G: Game> {
    pub players: Vec<PlayerId>,
    pub state: G::State,
    pub rng: Rng,
    pub now: i64,
}

/// Options as a room would have them: the defaults, or one catalog choice per option.
pub fn options_for<G: Game>(selector: u8) -> Option<G::Options> {
    if selector == 0 {
        return engine::options::parse::<G>(None).ok();
    }
    let mut pick = Rng::from_seed(Seed(u128::from(selector)));
    let mut chosen = Map::new();
    for meta in G::options_meta() {
        if let Some(choice) = pick.pick(&meta.choices) {
            chosen.insert(meta.key.clone(), choice.value.clone());
        }
    }
    engine::options::parse::<G>(Some(&Value::Object(chosen))).ok()
}

/// Sets up a game and plays `steps` random legal inputs and due timers, as the harness
/// and `engine/tests/fuzz.rs` do. `None` if no room could have this game.
pub fn warm_up<G: Game>(seed: u8, options: u8, players: u8, steps: usize) -> Option<Room<G>> {
    let options = options_for::<G>(options)?;
    let range = G::players_for(&options);
    let span = range.max.checked_sub(range.min)? + 1;
    let n = range.min + usize::from(players) % span;
    let players: Vec<PlayerId> = (1..=n).map(|i| PlayerId::new(format!("p{i}"))).collect();
    let mut rng = Rng::from_seed(Seed(u128::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) + 1));
    let mut choose = Rng::from_seed(Seed(u128::from(seed) ^ 0x4655_5a5a));
    let setup = SetupCtx { players: &players, options: &options, now: START, game_no: None };
    let mut state = G::setup(setup, &mut rng).ok()?;
    let mut now = START;
    let empty = BTreeMap::new();
    let presence = Presence::all_connected(&empty);
    for _ in 0..steps {
        if G::result(&state).is_some() {
            break;
        }
        now += i64::from(choose.int(700));
        let (actor, input) = match schedule::due::<G>(&state, now, &presence) {
            Some(due) => due,
            None => {
                let p = players[choose.index(players.len())].clone();
                let legal = G::legal_actions(&state, &p, now);
                let Some(input) = choose.pick(&legal).cloned() else { continue };
                (Actor::Player(p), input)
            }
        };
        let ctx = Ctx::at(now);
        if G::validate(&state, &actor, &input, &ctx).is_ok() {
            let applied = G::apply(&state, &actor, &input, &ctx, &mut rng);
            state = applied.unwrap_or_else(|e| panic!("warm-up: validated {input:?} by {actor:?} failed: {e}")).state;
        }
    }
    Some(Room { players, state, rng, now })
}

/// Warm-ups already played in this process. Most mutations change the action and not
/// the header, so most cases reuse a room; warm-up is deterministic, so a case replayed
/// alone sees the same room.
type WarmCache<G> = HashMap<(u8, u8, u8, usize), Option<Rc<Room<G>>>>;

thread_local! {
    static WARM: RefCell<HashMap<TypeId, Box<dyn Any>>> = RefCell::new(HashMap::new());
}

/// Rooms kept per game; past this the cache starts again.
const WARM_CACHE_SIZE: usize = 4096;

fn cached_warm_up<G: Game>(seed: u8, options: u8, players: u8, steps: usize) -> Option<Rc<Room<G>>> {
    let key = (seed, options, players, steps);
    let hit = WARM.with_borrow(|caches| {
        caches.get(&TypeId::of::<G>()).and_then(|c| c.downcast_ref::<WarmCache<G>>()).and_then(|c| c.get(&key).cloned())
    });
    if let Some(room) = hit {
        return room;
    }
    let room = warm_up::<G>(seed, options, players, steps).map(Rc::new);
    WARM.with_borrow_mut(|caches| {
        let entry = caches.entry(TypeId::of::<G>()).or_insert_with(|| Box::new(WarmCache::<G>::new()));
        if let Some(cache) = entry.downcast_mut::<WarmCache<G>>() {
            if cache.len() >= WARM_CACHE_SIZE {
                cache.clear();
            }
            cache.insert(key, room.clone());
        }
    });
    room
}

/// One game case: warm up, then the room's input path for one client action.
pub fn run_game<G: Game>(data: &[u8], vocab: &Vocab) {
    let (h, rest) = Header::read(data);
    let steps = usize::from(h.steps) % (MAX_WARMUP + 1);
    let Some(room) = cached_warm_up::<G>(h.seed, h.options, h.players, steps) else { return };
    let n = room.players.len();
    let actor = match usize::from(h.actor) % (n + 2) {
        i if i < n => Actor::Player(room.players[i].clone()),
        i if i == n => Actor::Player(PlayerId::new("stranger")),
        _ => Actor::Server,
    };
    let now = room.now + i64::from(h.gap_ms);
    let legal: Vec<Value> = match actor.player() {
        Some(p) => G::legal_actions(&room.state, p, now)
            .into_iter()
            .filter_map(|input| match input {
                Input::Client(a) => serde_json::to_value(a).ok(),
                Input::System(_) => None,
            })
            .collect(),
        None => Vec::new(),
    };
    let action = action_from(rest, &legal, vocab);
    if tracing() {
        eprintln!("case: {h:?} -> {n} players, {steps} warm-up steps, actor {actor:?}, now +{} ms", h.gap_ms);
        eprintln!("state: {}", serde_json::to_string(&room.state).unwrap_or_default());
        eprintln!("legal for the actor: {}", Value::Array(legal.clone()));
    }
    check::<G>(&room, &actor, &action, &Ctx { now, rtt_ms: h.rtt_ms() });
}

/// The action a case's bytes stand for.
pub fn action_from(bytes: &[u8], legal: &[Value], vocab: &Vocab) -> Value {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        return v;
    }
    let mut u = Unstructured::new(bytes);
    built_action(&mut u, legal, vocab).unwrap_or(Value::Null)
}

fn built_action(u: &mut Unstructured<'_>, legal: &[Value], vocab: &Vocab) -> ArbitraryResult<Value> {
    let kind: u8 = u.int_in_range(0..=5)?;
    if kind <= 2 && !legal.is_empty() {
        let mut v = u.choose(legal)?.clone();
        if kind > 0 {
            for _ in 0..u.int_in_range(1..=3)? {
                mutate(u, &mut v, vocab)?;
            }
        }
        return Ok(v);
    }
    if kind <= 4 {
        let mut m = Map::new();
        m.insert("type".into(), json!(u.choose(vocab.types)?));
        for field in vocab.fields {
            if u.arbitrary::<bool>()? {
                m.insert((*field).to_owned(), any_json(u, vocab, 2)?);
            }
        }
        if kind == 4 {
            m.insert(any_key(u, vocab)?, any_json(u, vocab, 2)?);
        }
        return Ok(Value::Object(m));
    }
    any_json(u, vocab, 3)
}

fn any_key(u: &mut Unstructured<'_>, vocab: &Vocab) -> ArbitraryResult<String> {
    Ok(match u.int_in_range(0..=2)? {
        0 => (*u.choose(vocab.fields)?).to_owned(),
        1 => "type".to_owned(),
        _ => u.arbitrary::<String>()?,
    })
}

fn word(u: &mut Unstructured<'_>, vocab: &Vocab) -> ArbitraryResult<String> {
    Ok(match u.int_in_range(0..=2)? {
        0 => (*u.choose(IDS)?).to_owned(),
        1 => (*u.choose(vocab.types)?).to_owned(),
        _ if !vocab.words.is_empty() => (*u.choose(vocab.words)?).to_owned(),
        _ => u.arbitrary::<String>()?,
    })
}

/// Any JSON value, nested at most `depth` deep, biased towards the game's words.
pub fn any_json(u: &mut Unstructured<'_>, vocab: &Vocab, depth: u32) -> ArbitraryResult<Value> {
    let last = if depth == 0 { 8 } else { 10 };
    Ok(match u.int_in_range(0..=last)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => json!(u.int_in_range(0u32..=120)?),
        3 => json!(u.arbitrary::<i64>()?),
        4 => json!(u.arbitrary::<u64>()?),
        5 => json!(u.arbitrary::<f64>()?),
        6 | 7 => Value::String(word(u, vocab)?),
        8 => Value::String(u.arbitrary()?),
        9 => {
            let len = u.int_in_range(0..=3)?;
            Value::Array((0..len).map(|_| any_json(u, vocab, depth - 1)).collect::<ArbitraryResult<_>>()?)
        }
        _ => {
            let mut m = Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                m.insert(any_key(u, vocab)?, any_json(u, vocab, depth - 1)?);
            }
            Value::Object(m)
        }
    })
}

/// One small change to an action object.
fn mutate(u: &mut Unstructured<'_>, v: &mut Value, vocab: &Vocab) -> ArbitraryResult<()> {
    let Value::Object(m) = v else {
        *v = any_json(u, vocab, 2)?;
        return Ok(());
    };
    let keys: Vec<String> = m.keys().cloned().collect();
    match u.int_in_range(0..=5)? {
        0 => {
            let key = any_key(u, vocab)?;
            m.insert(key, any_json(u, vocab, 2)?);
        }
        1 if !keys.is_empty() => {
            m.remove(u.choose(&keys)?);
        }
        2 => {
            let ty = u.choose(vocab.types)?;
            m.insert("type".into(), json!(ty));
        }
        3 if !keys.is_empty() => {
            // A number nudged by a little: versions, card ids and counts off by one.
            let key = u.choose(&keys)?.clone();
            let delta = i64::from(u.int_in_range(0u8..=6)?) - 3;
            if let Some(n) = m.get(&key).and_then(Value::as_i64) {
                m.insert(key, json!(n.saturating_add(delta)));
            } else if let Some(n) = m.get(&key).and_then(Value::as_u64) {
                m.insert(key, json!(n.saturating_add_signed(delta)));
            }
        }
        4 if !keys.is_empty() => {
            let key = u.choose(&keys)?.clone();
            m.insert(key, Value::String(word(u, vocab)?));
        }
        _ => {
            let key = u.choose(vocab.fields)?;
            m.insert((*key).to_owned(), any_json(u, vocab, 1)?);
        }
    }
    Ok(())
}

/// The room's input path for one client action `action` (the `a` of an `act` message)
/// from `actor` at `ctx`, with the contract's invariants:
///
/// - decoding, `validate` and `apply` never panic;
/// - a refusal has a snake_case code and a Korean reason, and leaves the state
///   byte-identical;
/// - an accepted input applies without error, deterministically (same RNG, same state,
///   events and RNG after), never changes the state it was given, and gives a state that
///   serializes and round-trips through JSON byte-identically; the input round-trips
///   through the log codec and the events through JSON;
/// - what the room does after a commit (views and full views for every seat and a
///   spectator, result, next timer, bots' legal inputs) does not panic, and views
///   serialize.
pub fn check<G: Game>(room: &Room<G>, actor: &Actor, action: &Value, ctx: &Ctx) {
    // `Handler<Act>`: the shape check.
    let decoded = serde_json::from_value::<G::Action>(action.clone());
    if tracing() {
        eprintln!("{}: action {action} decodes to {decoded:?}", G::ID);
    }
    let Ok(action) = decoded else { return };
    let input: InputOf<G> = Input::Client(action);
    let before = serde_json::to_string(&room.state).expect("the state before serializes");

    // `process`: validate, then apply with the room's RNG.
    let verdict = G::validate(&room.state, actor, &input, ctx);
    if tracing() {
        eprintln!("{}: validate by {actor:?} at {ctx:?}: {verdict:?}", G::ID);
    }
    if let Err(refusal) = verdict {
        let code = refusal.code();
        assert!(!code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "refusal code {code:?}");
        let reason = refusal.reason();
        assert!(reason.chars().any(|c| ('가'..='힣').contains(&c)), "refusal reason {reason:?} is not Korean");
        let after = serde_json::to_string(&room.state).expect("the state serializes");
        assert_eq!(after, before, "refusing {input:?} by {actor:?} changed the state");
        return;
    }
    let mut rng = room.rng.clone();
    let applied = G::apply(&room.state, actor, &input, ctx, &mut rng)
        .unwrap_or_else(|e| panic!("validated {input:?} by {actor:?} failed to apply: {e}"));
    let after = serde_json::to_string(&room.state).expect("the state serializes");
    assert_eq!(after, before, "apply changed the state it was given");

    let mut rng_again = room.rng.clone();
    let again = G::apply(&room.state, actor, &input, ctx, &mut rng_again).expect("the second apply succeeds");
    assert!(again == applied, "apply is not deterministic for {input:?} by {actor:?}");
    assert_eq!(rng_again.state(), rng.state(), "apply drew differently from the RNG");

    // The log entry and the snapshot.
    let input_json = serde_json::to_string(&input).expect("the input serializes");
    let input_back: InputOf<G> = serde_json::from_str(&input_json).expect("the logged input decodes");
    assert_eq!(input_back, input, "the input does not round-trip: {input_json}");
    let state_json = serde_json::to_string(&applied.state).expect("the new state serializes");
    let state_back: G::State = serde_json::from_str(&state_json).expect("the new state deserializes");
    assert!(state_back == applied.state, "the new state does not round-trip: {state_json}");
    let state_json_again = serde_json::to_string(&state_back).expect("the state serializes again");
    assert_eq!(state_json_again, state_json, "the new state's JSON is not stable");
    let events_json = serde_json::to_string(&applied.events).expect("the events serialize");
    let events_back: Vec<G::Event> = serde_json::from_str(&events_json).expect("the events deserialize");
    assert!(events_back == applied.events, "the events do not round-trip: {events_json}");

    // `commit`: updates to every subscriber, then the result or the next timer and bots.
    let state = &applied.state;
    let rtt: BTreeMap<PlayerId, u32> = room.players.iter().map(|p| (p.clone(), 40)).collect();
    let vctx = ViewCtx { now: ctx.now, rtt: Some(&rtt) };
    for viewer in room.players.iter().map(Some).chain([None]) {
        serde_json::to_string(&G::view(state, viewer, &vctx)).expect("a view serializes");
        serde_json::to_string(&G::sync_view(state, viewer, &vctx)).expect("a full view serializes");
    }
    if let Some(result) = G::result(state) {
        serde_json::to_string(&result).expect("the result serializes");
    } else {
        let empty = BTreeMap::new();
        let _ = schedule::next_wake::<G>(state, &Presence::all_connected(&empty));
        for p in &room.players {
            let _ = G::legal_actions(state, p, ctx.now);
        }
    }
}

/// Whether `ROOMD_FUZZ_TRACE` is set: then each case prints what it does (run a target
/// on one input file to see why it is interesting or how it crashes).
pub fn tracing() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("ROOMD_FUZZ_TRACE").is_some())
}

/// Rooms the `ws_message` target sends its `act` messages to: each game at a few depths.
struct Rooms {
    halli_galli: Vec<Room<HalliGalli>>,
    cockroach_poker: Vec<Room<CockroachPoker>>,
    tally: Vec<Room<Tally>>,
}

fn rooms() -> &'static Rooms {
    static ROOMS: OnceLock<Rooms> = OnceLock::new();
    ROOMS.get_or_init(|| {
        fn some<G: Game>() -> Vec<Room<G>> {
            [0, 5, 20, 60, 200].iter().filter_map(|&steps| warm_up::<G>(1, 0, 1, steps)).collect()
        }
        Rooms { halli_galli: some(), cockroach_poker: some(), tally: some() }
    })
}

/// The WebSocket layer: one text frame through `gateway::protocol::parse`, as
/// `WsSession::on_text` does, and an `act`'s action on into every game's input path.
///
/// - `parse` never panics, and a refusal has a reason;
/// - a parsed message, written out again, parses to the same message (same kind, room,
///   cs, and an action every game decodes the same);
/// - the action sent on to another node (`to_string`, then `from_str` there, `Null` if
///   that fails) decodes as it does here, for every game;
/// - then [`check`] for every game the action decodes for, by seat `p{cs % n + 1}`, in a
///   room chosen by `cs`.
pub fn ws_message(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let msg = match parse(&text) {
        Ok(msg) => msg,
        Err(reason) => {
            assert!(!reason.is_empty(), "a refusal without a reason");
            return;
        }
    };
    let written = match &msg {
        ClientMsg::Sub { room } => json!({"t": "sub", "room": room}).to_string(),
        ClientMsg::Unsub { room } => json!({"t": "unsub", "room": room}).to_string(),
        ClientMsg::Chat { room, phrase } => json!({"t": "chat", "room": room, "phrase": phrase}).to_string(),
        ClientMsg::Act { room, cs, action } => {
            let room = Value::from(room.as_str());
            match action {
                // The action's text goes out as it came in (it is JSON).
                Some(a) => format!(r#"{{"t":"act","room":{room},"cs":{cs},"a":{a}}}"#),
                None => format!(r#"{{"t":"act","room":{room},"cs":{cs}}}"#),
            }
        }
    };
    let again = parse(&written).unwrap_or_else(|e| panic!("{written} does not parse again: {e}"));
    let ClientMsg::Act { room, cs, action } = msg else {
        assert_eq!(again, msg, "a parsed message written out parses differently");
        return;
    };
    let ClientMsg::Act { room: room_again, cs: cs_again, action: action_again } = again else {
        panic!("an act written out is not an act");
    };
    assert_eq!((&room_again, cs_again), (&room, cs), "an act written out has another room or cs");
    assert_eq!(action_again.is_some(), action.is_some(), "an act written out lost or gained its action");
    // Without an action the session refuses it itself (`bad_action`).
    let (Some(action), Some(action_again)) = (action, action_again) else { return };
    // What another node's room decodes is the same text again (it crosses the bus as is).
    assert!(
        same_decode_text::<HalliGalli>(&action, &action_again),
        "halli-galli decodes {action} and {action_again} differently"
    );
    assert!(
        same_decode_text::<CockroachPoker>(&action, &action_again),
        "cockroach-poker decodes {action} and {action_again} differently"
    );
    assert!(same_decode_text::<Tally>(&action, &action_again), "tally decodes {action} and {action_again} differently");
    let rooms = rooms();
    act_in(&rooms.halli_galli, cs, &action);
    act_in(&rooms.cockroach_poker, cs, &action);
    act_in(&rooms.tally, cs, &action);
}

/// Whether two action texts decode to the same action of `G` (or both not at all), as a
/// room decodes them.
pub fn same_decode_text<G: Game>(a: &str, b: &str) -> bool {
    match (serde_json::from_str::<G::Action>(a), serde_json::from_str::<G::Action>(b)) {
        (Ok(x), Ok(y)) => x == y,
        (Err(_), Err(_)) => true,
        _ => false,
    }
}

fn act_in<G: Game>(rooms: &[Room<G>], cs: u64, action: &str) {
    // As a room decodes it: from the text.
    if rooms.is_empty() || serde_json::from_str::<G::Action>(action).is_err() {
        return;
    }
    let Ok(action) = serde_json::from_str::<Value>(action) else { return };
    let action = &action;
    let room = &rooms[(cs % rooms.len() as u64) as usize];
    let seat = (cs / rooms.len() as u64 % room.players.len() as u64) as usize;
    let actor = Actor::Player(room.players[seat].clone());
    check::<G>(room, &actor, action, &Ctx { now: room.now + 300, rtt_ms: None });
}
