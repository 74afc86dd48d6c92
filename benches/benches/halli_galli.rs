//! Criterion benches for halli-galli: `apply` of a flip, a correct ring and a wrong ring,
//! and `view`, on tables laid out by hand (4 players, piles a few cards deep). The
//! budget is 5 ms per apply (`game-engine.md` §7.2); expect microseconds.

use criterion::{criterion_group, criterion_main, Criterion};
use engine::games::halli_galli::cards::{card_id, Fruit};
use engine::games::halli_galli::options::HalliGalliOptions;
use engine::games::halli_galli::rules::{custom_state, HalliGalliAction, HalliGalliState};
use engine::games::halli_galli::HalliGalli;
use engine::{Actor, Ctx, Game, Input, PlayerId, Rng, Seed, ViewCtx};
use std::collections::BTreeMap;
use std::hint::black_box;

const NOW: i64 = 1_700_000_000_000;

/// Four players with 9-card decks; face-up piles two deep whose tops are `tops`.
fn table(tops: [(Fruit, u8); 4]) -> anyhow::Result<HalliGalliState> {
    let order: Vec<PlayerId> = ["a", "b", "c", "d"].iter().map(|n| PlayerId::from(*n)).collect();
    let top_ids: Vec<u32> = tops
        .iter()
        .enumerate()
        .map(|(i, (f, c))| card_id(*f, *c, i % 2).ok_or_else(|| anyhow::anyhow!("no such card")))
        .collect::<anyhow::Result<_>>()?;
    let mut free = (0..56u32).filter(|c| !top_ids.contains(c));
    let mut take = |k: usize| -> Vec<u32> { free.by_ref().take(k).collect() };
    let mut decks = BTreeMap::new();
    let mut piles = BTreeMap::new();
    for (p, top) in order.iter().zip(&top_ids) {
        decks.insert(p.clone(), take(9));
        let mut pile = take(1);
        pile.push(*top);
        piles.insert(p.clone(), pile);
    }
    let pot = take(2);
    let options = HalliGalliOptions { time_limit_min: None, ..HalliGalliOptions::default() };
    Ok(custom_state(&options, &order, decks, piles, pot, &order[0], NOW))
}

fn benches(c: &mut Criterion) {
    let correct = match table([(Fruit::Strawberry, 2), (Fruit::Strawberry, 3), (Fruit::Banana, 4), (Fruit::Lime, 1)]) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let wrong = match table([(Fruit::Strawberry, 2), (Fruit::Strawberry, 2), (Fruit::Banana, 4), (Fruit::Lime, 1)]) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let a = Actor::Player(PlayerId::from("a"));
    let c_player = Actor::Player(PlayerId::from("c"));
    let flip = Input::Client(HalliGalliAction::Flip {});
    let ring = Input::Client(HalliGalliAction::Ring { version: correct.table_version });
    let ctx = Ctx { now: NOW + 1000, rtt_ms: Some(60) };
    // Every measured input must be one the game accepts.
    for (state, actor, input) in [(&correct, &a, &flip), (&correct, &c_player, &ring), (&wrong, &c_player, &ring)] {
        if let Err(e) = HalliGalli::apply(state, actor, input, &ctx, &mut Rng::from_seed(Seed(1))) {
            panic!("bench input refused: {e}");
        }
    }

    let mut group = c.benchmark_group("halli_galli");
    // What every apply pays before its rule logic: `apply` returns a new state.
    group.bench_function("clone_state", |b| b.iter(|| black_box(&correct).clone()));
    group.bench_function("apply_flip", |b| {
        b.iter(|| HalliGalli::apply(black_box(&correct), &a, &flip, &ctx, &mut Rng::from_seed(Seed(1))))
    });
    group.bench_function("apply_ring_correct", |b| {
        b.iter(|| HalliGalli::apply(black_box(&correct), &c_player, &ring, &ctx, &mut Rng::from_seed(Seed(1))))
    });
    group.bench_function("apply_ring_wrong", |b| {
        b.iter(|| HalliGalli::apply(black_box(&wrong), &c_player, &ring, &ctx, &mut Rng::from_seed(Seed(1))))
    });
    let me = PlayerId::from("b");
    let rtt: BTreeMap<PlayerId, u32> = ["a", "b", "c", "d"].iter().map(|n| (PlayerId::from(*n), 120)).collect();
    let vctx = ViewCtx { now: NOW + 1000, rtt: Some(&rtt) };
    group.bench_function("view", |b| b.iter(|| HalliGalli::view(black_box(&correct), Some(&me), &vctx)));
    group.bench_function("view_json", |b| {
        b.iter(|| serde_json::to_vec(&HalliGalli::view(black_box(&correct), Some(&me), &vctx)))
    });
    // What a room runs after each change: the JSON of every viewer's view, the table
    // serialized once (four players and a spectator).
    let viewers: Vec<Option<PlayerId>> =
        ["a", "b", "c", "d"].iter().map(|n| Some(PlayerId::from(*n))).chain([None]).collect();
    let viewers: Vec<Option<&PlayerId>> = viewers.iter().map(Option::as_ref).collect();
    group.bench_function("views_json_5", |b| b.iter(|| HalliGalli::views_json(black_box(&correct), &viewers, &vctx)));
    group.finish();
}

criterion_group!(halli_galli, benches);
criterion_main!(halli_galli);
