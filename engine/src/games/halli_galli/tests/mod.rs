//! Tests: helpers that lay states out by hand ([`rules::custom_state`] and a [`Pool`] of
//! cards), then the spec's §10 checklist (`checklist.rs`), the §5.5 worked example,
//! every option and house rule and the contract details (`scenarios.rs`), the bot and
//! the random-play harness (`bot_and_harness.rs`).

mod bot_and_harness;
mod checklist;
mod scenarios;

use super::cards::{card_id, face, Fruit, DECK_SIZE};
use super::options::{BotLevel, EndMode, LatencyComp, LeftoverCards};
use super::rules::{custom_state, EndReason, HalliGalliEvent, OutReason};
use super::*;
use crate::game::Reject;
use crate::rng::Seed;
use crate::schedule::{self, Presence};
use crate::testing::find_leaks;
use serde_json::json;
use std::collections::BTreeMap;

pub(super) const T0: i64 = 1_000_000;
pub(super) const S: Fruit = Fruit::Strawberry;
pub(super) const B: Fruit = Fruit::Banana;
pub(super) const L: Fruit = Fruit::Lime;
pub(super) const P: Fruit = Fruit::Plum;

pub(super) fn pid(name: &str) -> PlayerId {
    PlayerId::from(name)
}

pub(super) fn seats(names: &[&str]) -> Vec<PlayerId> {
    names.iter().map(|n| pid(n)).collect()
}

/// Hands out distinct cards: chosen faces, or any unused cards as filler.
#[derive(Default)]
pub(super) struct Pool {
    used: Vec<u32>,
}

impl Pool {
    /// A card showing `count` of `fruit` that was not handed out yet.
    pub(super) fn card(&mut self, fruit: Fruit, count: u8) -> u32 {
        let id = (0..5).filter_map(|n| card_id(fruit, count, n)).find(|c| !self.used.contains(c)).unwrap();
        self.used.push(id);
        id
    }

    /// `k` unused cards, lowest ids first (plain filler under chosen tops).
    pub(super) fn filler(&mut self, k: usize) -> Vec<u32> {
        let ids: Vec<u32> = (0..DECK_SIZE).rev().filter(|c| !self.used.contains(c)).take(k).collect();
        self.used.extend(&ids);
        ids
    }
}

/// A playing state: `decks[i]` and `piles[i]` belong to the i-th seat (top = last).
pub(super) fn table(
    options: HalliGalliOptions,
    names: &[&str],
    decks: Vec<Vec<u32>>,
    piles: Vec<Vec<u32>>,
    pot: Vec<u32>,
    turn: &str,
) -> HalliGalliState {
    let order = seats(names);
    let decks: BTreeMap<_, _> = order.iter().cloned().zip(decks).collect();
    let piles: BTreeMap<_, _> = order.iter().cloned().zip(piles).collect();
    custom_state(&options, &order, decks, piles, pot, &pid(turn), T0)
}

pub(super) fn no_limit() -> HalliGalliOptions {
    HalliGalliOptions { time_limit_min: None, ..HalliGalliOptions::default() }
}

pub(super) fn try_act(
    s: &HalliGalliState,
    actor: Actor,
    input: HalliGalliInput,
    now: i64,
    rtt: Option<u32>,
) -> Result<Applied<HalliGalliState, HalliGalliEvent>, HalliGalliReject> {
    let ctx = Ctx { now, rtt_ms: rtt };
    HalliGalli::validate(s, &actor, &input, &ctx)?;
    let applied = HalliGalli::apply(s, &actor, &input, &ctx, &mut Rng::from_seed(Seed(1))).unwrap();
    rules::check_cards(&applied.state).unwrap();
    Ok(applied)
}

pub(super) fn flip(s: &HalliGalliState, who: &str, now: i64) -> Applied<HalliGalliState, HalliGalliEvent> {
    try_act(s, Actor::Player(pid(who)), Input::Client(HalliGalliAction::Flip {}), now, None).unwrap()
}

pub(super) fn ring_v(
    s: &HalliGalliState,
    who: &str,
    version: u64,
    now: i64,
) -> Result<HalliGalliState, HalliGalliReject> {
    try_act(s, Actor::Player(pid(who)), Input::Client(HalliGalliAction::Ring { version }), now, None).map(|a| a.state)
}

pub(super) fn ring(s: &HalliGalliState, who: &str, now: i64) -> HalliGalliState {
    ring_v(s, who, s.table_version, now).unwrap()
}

pub(super) fn ring_rtt(s: &HalliGalliState, who: &str, now: i64, rtt: u32) -> HalliGalliState {
    let input = Input::Client(HalliGalliAction::Ring { version: s.table_version });
    try_act(s, Actor::Player(pid(who)), input, now, Some(rtt)).unwrap().state
}

/// Applies what the runner would apply at `now` with everyone connected.
pub(super) fn run_timer(s: &HalliGalliState, now: i64) -> Applied<HalliGalliState, HalliGalliEvent> {
    let empty = BTreeMap::new();
    let (actor, input) = schedule::due::<HalliGalli>(s, now, &Presence::all_connected(&empty)).unwrap();
    try_act(s, actor, input, now, None).unwrap()
}

pub(super) fn deck(s: &HalliGalliState, who: &str) -> Vec<u32> {
    s.decks[&pid(who)].clone()
}

pub(super) fn code(r: HalliGalliReject) -> &'static str {
    r.code()
}

pub(super) fn start(n: usize, options: &HalliGalliOptions, seed: u128) -> HalliGalliState {
    let ps: Vec<PlayerId> = (1..=n).map(|i| PlayerId::new(format!("p{i}"))).collect();
    HalliGalli::setup(SetupCtx { players: &ps, options, now: T0, game_no: None }, &mut Rng::from_seed(Seed(seed)))
        .unwrap()
}

/// Three seats whose face-up tops are `tops` (empty pile where `None`), each with filler
/// decks; returns the state after nothing else happened.
pub(super) fn tops(options: HalliGalliOptions, tops: &[Option<(Fruit, u8)>]) -> (HalliGalliState, Pool) {
    let names = ["a", "b", "c", "d", "e", "f"];
    let mut pool = Pool::default();
    let piles: Vec<Vec<u32>> = tops.iter().map(|t| t.map(|(f, c)| vec![pool.card(f, c)]).unwrap_or_default()).collect();
    let decks: Vec<Vec<u32>> = tops.iter().map(|_| pool.filler(5)).collect();
    (table(options, &names[..tops.len()], decks, piles, Vec::new(), "a"), pool)
}

pub(super) fn official() -> HalliGalliOptions {
    HalliGalliOptions { end_mode: EndMode::Official, ..no_limit() }
}
