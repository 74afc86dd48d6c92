//! Criterion benches for `cockroach-poker`: `apply` of each action on a 4-player table
//! mid-game, and `view` for a player and a spectator.
//!
//! Run: `cargo bench -p benches --bench cockroach_poker`.

use anyhow::Context;
use criterion::{criterion_group, criterion_main, Criterion};
use engine::games::cockroach_poker::rules::{CallWord, CockroachAction, CockroachInput, CockroachState, Kind};
use engine::games::cockroach_poker::CockroachPoker;
use engine::{Actor, Ctx, Game, Input, PlayerId, Rng, Seed, SetupCtx, ViewCtx};
use std::hint::black_box;

const NOW: i64 = 1_700_000_000_000;

/// The table at each decision of one round: starter to choose, holder to decide, holder
/// after peeking, next holder to call.
struct Fixtures {
    start: CockroachState,
    offered: CockroachState,
    peeked: CockroachState,
    passed: CockroachState,
    offer: CockroachInput,
    pass: CockroachInput,
}

fn step(state: &CockroachState, who: &PlayerId, input: &CockroachInput) -> anyhow::Result<CockroachState> {
    let actor = Actor::Player(who.clone());
    CockroachPoker::validate(state, &actor, input, &Ctx::at(NOW)).map_err(|r| anyhow::anyhow!("refused: {r:?}"))?;
    Ok(CockroachPoker::apply(state, &actor, input, &Ctx::at(NOW), &mut Rng::from_seed(Seed(1)))?.state)
}

fn fixtures() -> anyhow::Result<Fixtures> {
    let players: Vec<PlayerId> = (1..=4).map(|i| PlayerId::new(format!("u_{i}"))).collect();
    let options = engine::options::parse::<CockroachPoker>(None)?;
    let start = CockroachPoker::setup(
        SetupCtx { players: &players, options: &options, now: NOW, game_no: None },
        &mut Rng::from_seed(Seed(42)),
    )?;
    let order = start.order.clone();
    let [a, b, c, _d] = order.as_slice() else { anyhow::bail!("4 seats expected") };
    let card_id = *start.hand(a).first().context("starter has cards")?;
    let offer = Input::Client(CockroachAction::Offer { card_id, to: b.clone(), claim: Kind::Rat });
    let offered = step(&start, a, &offer)?;
    let peeked = step(&offered, b, &Input::Client(CockroachAction::Peek {}))?;
    let pass = Input::Client(CockroachAction::Pass { to: c.clone(), claim: Kind::Fly });
    let passed = step(&peeked, b, &pass)?;
    Ok(Fixtures { start, offered, peeked, passed, offer, pass })
}

fn bench(c: &mut Criterion) {
    let f = match fixtures() {
        Ok(f) => f,
        Err(e) => panic!("fixtures: {e:#}"),
    };
    let seat = |i: usize| Actor::Player(f.start.order[i].clone());
    let ctx = Ctx::at(NOW + 500);
    let apply = |state: &CockroachState, actor: &Actor, input: &CockroachInput| {
        let mut rng = Rng::from_seed(Seed(7));
        black_box(CockroachPoker::apply(black_box(state), actor, input, &ctx, &mut rng).map(|a| a.events.len()))
    };

    let mut g = c.benchmark_group("cockroach_poker/apply");
    g.bench_function("offer", |bn| bn.iter(|| apply(&f.start, &seat(0), &f.offer)));
    g.bench_function("peek", |bn| bn.iter(|| apply(&f.offered, &seat(1), &Input::Client(CockroachAction::Peek {}))));
    g.bench_function("pass", |bn| bn.iter(|| apply(&f.peeked, &seat(1), &f.pass)));
    let call = Input::Client(CockroachAction::Call { call: CallWord::False });
    g.bench_function("call", |bn| bn.iter(|| apply(&f.passed, &seat(2), &call)));
    g.finish();

    let mut g = c.benchmark_group("cockroach_poker/view");
    let vctx = ViewCtx::at(NOW + 500);
    let me = f.start.order[1].clone();
    g.bench_function("player", |bn| {
        bn.iter(|| black_box(CockroachPoker::view(black_box(&f.passed), Some(&me), &vctx)))
    });
    g.bench_function("spectator", |bn| bn.iter(|| black_box(CockroachPoker::view(black_box(&f.passed), None, &vctx))));
    g.bench_function("player_json", |bn| {
        bn.iter(|| {
            serde_json::to_string(&CockroachPoker::view(black_box(&f.passed), Some(&me), &vctx)).map(|s| s.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
