//! Tests: helpers that build tables by hand, then the §10 checklist (`checklist.rs`),
//! the §5.4 example, refusals, options and the result (`scenarios.rs`), the bot and the
//! random-play harness (`bot_and_harness.rs`).

mod bot_and_harness;
mod checklist;
mod scenarios;

use super::options::{AutoMarker, LoseCount};
use super::rules::{CardFace, ClaimEntry, Reveal, Round};
use super::*;
use crate::game::Reject;
use crate::options as engine_options;
use crate::rng::Seed;
use crate::schedule::{self, Presence};
use crate::testing::{find_leaks, Harness};
use serde_json::{json, Value};

const T0: i64 = 1_000_000;
const AT: i64 = T0 + 1_000;

use Kind::{Bat, Cockroach, Fly, Rat, Scorpion, Spider, Stinkbug, Toad};

fn pid(s: &str) -> PlayerId {
    PlayerId::from(s)
}

/// The `i`-th card (0..8) of `kind`.
fn c(kind: Kind, i: u32) -> u32 {
    kind.first_id() + i
}

fn opts() -> CockroachOptions {
    CockroachOptions::default()
}

/// A table with chosen hands, seated in the given order, the first player starting. Every
/// card not in a hand goes to `removed` so the 64-card invariant holds.
fn table(hands: &[(&str, Vec<u32>)], options: CockroachOptions) -> CockroachState {
    let order: Vec<PlayerId> = hands.iter().map(|(p, _)| pid(p)).collect();
    let held: Vec<u32> = hands.iter().flat_map(|(_, h)| h.clone()).collect();
    let state = CockroachState {
        options,
        order: order.clone(),
        hands: hands.iter().map(|(p, h)| (pid(p), h.clone())).collect(),
        fronts: order.iter().map(|p| (p.clone(), Vec::new())).collect(),
        removed: (0..64).filter(|c| !held.contains(c)).collect(),
        round: Round {
            starter: order[0].clone(),
            card: None,
            holder: None,
            last_passer: None,
            claim: None,
            seen: Vec::new(),
            peeked: false,
            claims: Vec::new(),
            deadline: T0 + 30_000,
        },
        loser: None,
        loss_reason: None,
        losing_kind: None,
        last_reveal: None,
    };
    rules::check_invariants(&state).unwrap();
    state
}

/// Moves `ids` from the removed pile to `p`'s front.
fn give_front(s: &mut CockroachState, p: &str, ids: &[u32]) {
    for id in ids {
        let at = s.removed.iter().position(|c| c == id).unwrap_or_else(|| panic!("card {id} is not spare"));
        s.removed.remove(at);
        s.fronts.get_mut(&pid(p)).unwrap().push(*id);
    }
    rules::check_invariants(s).unwrap();
}

/// a, b, c, d with four cards each: a spiders, b flies, c rats, d bats.
fn four() -> CockroachState {
    table(
        &[
            ("a", vec![c(Spider, 0), c(Spider, 1), c(Fly, 7), c(Toad, 0)]),
            ("b", vec![c(Fly, 0), c(Fly, 1), c(Toad, 1), c(Toad, 2)]),
            ("c", vec![c(Rat, 0), c(Rat, 1), c(Toad, 3), c(Toad, 4)]),
            ("d", vec![c(Bat, 0), c(Bat, 1), c(Toad, 5), c(Toad, 6)]),
        ],
        opts(),
    )
}

fn applied(
    s: &CockroachState,
    who: &str,
    input: CockroachInput,
    seed: u128,
) -> Applied<CockroachState, CockroachEvent> {
    let actor = Actor::Player(pid(who));
    if let Err(r) = CockroachPoker::validate(s, &actor, &input, &Ctx::at(AT)) {
        panic!("{who} {input:?} refused: {} ({})", r.code(), r.reason());
    }
    let out = CockroachPoker::apply(s, &actor, &input, &Ctx::at(AT), &mut Rng::from_seed(Seed(seed))).unwrap();
    rules::check_invariants(&out.state).unwrap();
    out
}

fn act(s: &CockroachState, who: &str, a: CockroachAction) -> CockroachState {
    applied(s, who, Input::Client(a), 1).state
}

fn refused(s: &CockroachState, who: &str, a: CockroachAction) -> &'static str {
    let input = Input::Client(a);
    match CockroachPoker::validate(s, &Actor::Player(pid(who)), &input, &Ctx::at(AT)) {
        Ok(()) => panic!("{who} {input:?} was allowed"),
        Err(r) => r.code(),
    }
}

fn offer(card_id: u32, to: &str, claim: Kind) -> CockroachAction {
    CockroachAction::Offer { card_id, to: pid(to), claim }
}

fn call(says_true: bool) -> CockroachAction {
    CockroachAction::Call { call: if says_true { CallWord::True } else { CallWord::False } }
}

fn pass(to: &str, claim: Kind) -> CockroachAction {
    CockroachAction::Pass { to: pid(to), claim }
}

const PEEK: CockroachAction = CockroachAction::Peek {};

fn timeout() -> CockroachInput {
    Input::System(CockroachSystem::Timeout {})
}

fn view_json(s: &CockroachState, viewer: Option<&str>) -> Value {
    let viewer = viewer.map(pid);
    serde_json::to_value(CockroachPoker::view(s, viewer.as_ref(), &ViewCtx::at(AT))).unwrap()
}

fn players(n: usize) -> Vec<PlayerId> {
    (1..=n).map(|i| PlayerId::new(format!("p{i}"))).collect()
}

fn setup(n: usize, seed: u128, options: CockroachOptions) -> CockroachState {
    let ps = players(n);
    CockroachPoker::setup(
        SetupCtx { players: &ps, options: &options, now: T0, game_no: None },
        &mut Rng::from_seed(Seed(seed)),
    )
    .unwrap()
}

fn front_of(s: &CockroachState, p: &str) -> Vec<u32> {
    s.front(&pid(p)).to_vec()
}

fn two_players(b_front_rats: u32) -> CockroachState {
    let mut s =
        table(&[("a", vec![c(Rat, 0), c(Fly, 0), c(Fly, 1)]), ("b", vec![c(Rat, 1), c(Rat, 2), c(Bat, 0)])], opts());
    let rats: Vec<u32> = (3..3 + b_front_rats).map(|i| c(Rat, i)).collect();
    give_front(&mut s, "b", &rats);
    s
}

fn c_with_front(front: &[u32]) -> CockroachState {
    let mut s = four();
    give_front(&mut s, "c", front);
    s
}
