#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Property-based fuzzing of every game's input path: arbitrary JSON as a client action
//! (mostly near-valid shapes, so the rules are reached, not just the decoder), from any
//! actor, at any moment, in states reached by random play. Whatever arrives:
//! - decoding never panics;
//! - `validate` never panics, and a refusal has a snake_case code and a Korean reason;
//! - an input `validate` accepts is applied by `apply` without error.
//!
//! Proptest keeps failing cases in `tests/fuzz.proptest-regressions` (the corpus, kept
//! in the repo) and replays them first on every run. Case counts are bounded so CI time
//! stays fixed.

use engine::games::cockroach_poker::CockroachPoker;
use engine::games::halli_galli::HalliGalli;
use engine::games::tally::Tally;
use engine::{Actor, Ctx, Game, Input, PlayerId, Reject, Rng, Seed, SetupCtx};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const START: i64 = 1_700_000_000_000;

/// Arbitrary JSON, small and nested.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (0u32..80).prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        "[a-z_]{0,10}".prop_map(Value::String),
        prop_oneof![Just("p1"), Just("p2"), Just("p3"), Just("x"), Just("")].prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Objects shaped like actions: a known or unknown `type` plus known and random fields.
fn action_like(types: &'static [&'static str], fields: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let ty = prop_oneof![4 => prop::sample::select(types).prop_map(|t| json!(t)), 1 => any_json()];
    let known = prop::collection::btree_map(prop::sample::select(fields), any_json(), 0..4);
    let extra = prop::collection::btree_map("[a-z]{1,6}", any_json(), 0..2);
    (ty, known, extra, any::<bool>()).prop_map(|(ty, known, extra, with_extra)| {
        let mut m = Map::new();
        m.insert("type".into(), ty);
        for (k, v) in known {
            m.insert(k.to_owned(), v);
        }
        if with_extra {
            for (k, v) in extra {
                m.insert(k, v);
            }
        }
        Value::Object(m)
    })
}

/// A state of `G` after `steps` random legal inputs from `seed` (timers included).
fn state_after<G: Game>(options: &G::Options, players: usize, seed: u64, steps: usize) -> (G::State, i64) {
    let ps: Vec<PlayerId> = (1..=players).map(|i| PlayerId::new(format!("p{i}"))).collect();
    let mut rng = Rng::from_seed(Seed(u128::from(seed)));
    let mut choose = Rng::from_seed(Seed(u128::from(seed) + 1));
    let mut state = G::setup(SetupCtx { players: &ps, options, now: START, game_no: None }, &mut rng).unwrap();
    let mut now = START;
    let empty = Default::default();
    let presence = engine::schedule::Presence::all_connected(&empty);
    for _ in 0..steps {
        if G::result(&state).is_some() {
            break;
        }
        now += i64::from(choose.int(700));
        let (actor, input) = match engine::schedule::due::<G>(&state, now, &presence) {
            Some(due) => due,
            None => {
                let p = ps[choose.index(ps.len())].clone();
                let legal = G::legal_actions(&state, &p, now);
                let Some(input) = choose.pick(&legal).cloned() else { continue };
                (Actor::Player(p), input)
            }
        };
        if G::validate(&state, &actor, &input, &Ctx::at(now)).is_ok() {
            state = G::apply(&state, &actor, &input, &Ctx::at(now), &mut rng).unwrap().state;
        }
    }
    (state, now)
}

fn check<G: Game>(
    state: &G::State,
    now: i64,
    actor: &str,
    action: &Value,
    rtt: Option<u32>,
) -> Result<(), TestCaseError> {
    let Ok(action) = serde_json::from_value::<G::Action>(action.clone()) else { return Ok(()) };
    let actor = if actor.is_empty() { Actor::Server } else { Actor::Player(actor.into()) };
    let input = Input::Client(action);
    let ctx = Ctx { now, rtt_ms: rtt };
    match G::validate(state, &actor, &input, &ctx) {
        Err(refusal) => {
            let code = refusal.code();
            prop_assert!(!code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "code {code}");
            prop_assert!(refusal.reason().chars().any(|c| ('가'..='힣').contains(&c)), "reason {}", refusal.reason());
        }
        Ok(()) => {
            let mut rng = Rng::from_seed(Seed(9));
            let applied = G::apply(state, &actor, &input, &ctx, &mut rng);
            prop_assert!(applied.is_ok(), "validated {input:?} by {actor:?} failed to apply: {applied:?}");
        }
    }
    Ok(())
}

fn actors() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["p1", "p2", "p3", "p4", "stranger", ""][..])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn halli_galli_survives_arbitrary_actions(
        seed in 0u64..50, steps in 0usize..120, players in 2usize..=4,
        actor in actors(), gap in 0i64..5_000, rtt in prop::option::of(0u32..400),
        action in action_like(&["flip", "ring"], &["version"]),
    ) {
        let (state, now) = state_after::<HalliGalli>(&Default::default(), players, seed, steps);
        check::<HalliGalli>(&state, now + gap, actor, &action, rtt)?;
    }

    #[test]
    fn cockroach_poker_survives_arbitrary_actions(
        seed in 0u64..50, steps in 0usize..60, players in 2usize..=4,
        actor in actors(), gap in 0i64..5_000,
        action in action_like(&["offer", "call", "peek", "pass"], &["cardId", "to", "claim", "call"]),
    ) {
        let (state, now) = state_after::<CockroachPoker>(&Default::default(), players, seed, steps);
        check::<CockroachPoker>(&state, now + gap, actor, &action, None)?;
    }

    #[test]
    fn tally_survives_arbitrary_actions(steps in 0usize..20, actor in actors(), action in action_like(&["bump"], &["by"])) {
        let (state, now) = state_after::<Tally>(&Default::default(), 2, 1, steps);
        check::<Tally>(&state, now, actor, &action, None)?;
    }

    #[test]
    fn arbitrary_json_never_panics_a_decoder(value in any_json()) {
        let _ = serde_json::from_value::<<HalliGalli as Game>::Action>(value.clone());
        let _ = serde_json::from_value::<<CockroachPoker as Game>::Action>(value.clone());
        let _ = serde_json::from_value::<<Tally as Game>::Action>(value.clone());
        let _ = engine::options::parse::<HalliGalli>(Some(&value));
        let _ = engine::options::parse::<CockroachPoker>(Some(&value));
    }
}
