//! Criterion benches across games and the room log:
//!
//! - `tally/apply`: one bump on a 4-player table;
//! - `harness/<game>`: random-play harness throughput, 20 seeds per iteration (the
//!   reported throughput is games per second, leak checks included);
//! - `log/encode_*`, `log/decode_*`: the bincode log codec on a start entry and a log entry;
//! - `rebuild/*`: `room_actor::rebuild::rebuild` from the seed over a recorded log
//!   (10,000 tally entries; a whole random-play halli-galli and cockroach-poker game);
//! - `view_json/<game>`: `serde_json::to_string` of a player's view mid-game.
//!
//! Run: `cargo bench -p benches --bench engine`.

use benches::recorded;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use engine::games::cockroach_poker::options::CockroachOptions;
use engine::games::cockroach_poker::CockroachPoker;
use engine::games::halli_galli::options::HalliGalliOptions;
use engine::games::halli_galli::HalliGalli;
use engine::games::tally::options::TallyOptions;
use engine::games::tally::rules::TallyAction;
use engine::games::tally::Tally;
use engine::testing::Harness;
use engine::{Actor, Ctx, Game, Input, PlayerId, Rng, Seed, SetupCtx, ViewCtx};
use room_actor::log::{decode, encode, LogEntry, StartEntry, StoredGame};
use room_actor::rebuild::{rebuild, From};
use std::hint::black_box;
use std::time::Duration;

const NOW: i64 = 1_700_000_000_000;
const HARNESS_SEEDS: u64 = 20;

fn or_die<T>(what: &str, r: anyhow::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e:#}"),
    }
}

fn tally_apply(c: &mut Criterion) {
    let players: Vec<PlayerId> = (1..=4).map(|i| PlayerId::new(format!("u_{i}"))).collect();
    let options = TallyOptions { target: None };
    let setup = SetupCtx { players: &players, options: &options, now: NOW, game_no: None };
    let state = or_die("setup", Tally::setup(setup, &mut Rng::from_seed(Seed(1))).map_err(Into::into));
    let actor = Actor::Player(players[1].clone());
    let bump = Input::Client(TallyAction::Bump {});
    let ctx = Ctx::at(NOW + 10);
    c.bench_function("tally/apply_bump", |b| {
        b.iter(|| {
            Tally::apply(black_box(&state), &actor, &bump, &ctx, &mut Rng::from_seed(Seed(1))).map(|a| a.events.len())
        })
    });
}

fn harness_of<G: Game>(c: &mut Criterion, name: &str, options: fn(&mut Rng, usize) -> G::Options) {
    let mut group = c.benchmark_group("harness");
    group.sample_size(10).measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(HARNESS_SEEDS));
    let mut round = 0u64;
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut h = Harness::<G>::new(options);
            // Fresh seeds each iteration so criterion averages over many games.
            h.seeds = round * HARNESS_SEEDS..(round + 1) * HARNESS_SEEDS;
            round += 1;
            match h.run() {
                Ok(r) => r.steps,
                Err(f) => panic!("{name}: {f}"),
            }
        })
    });
    group.finish();
    // Criterion reports means; the apply-time tail (target: p99 ≤ 5 µs) comes from the
    // harness's own per-apply timings over 100 games.
    let mut h = Harness::<G>::new(options);
    h.seeds = 10_000..10_100;
    match h.run() {
        Ok(r) => eprintln!(
            "{name}: apply over {} steps: p50 {} ns, p99 {} ns, p99.9 {} ns",
            r.apply_ns.len(),
            r.apply_quantile_ns(0.5),
            r.apply_quantile_ns(0.99),
            r.apply_quantile_ns(0.999)
        ),
        Err(f) => panic!("{name}: {f}"),
    }
}

fn harnesses(c: &mut Criterion) {
    harness_of::<Tally>(c, "tally", |_, _| TallyOptions { target: Some(100) });
    harness_of::<HalliGalli>(c, "halli_galli", |_, _| HalliGalliOptions::default());
    harness_of::<CockroachPoker>(c, "cockroach_poker", |_, _| CockroachOptions::default());
}

fn log_codec(c: &mut Criterion) {
    let stored = or_die("record", recorded::random_play::<HalliGalli>(HalliGalliOptions::default(), 3, 100));
    let start: &StartEntry = &stored.start;
    let entry: &LogEntry = match stored.entries.iter().find(|e| !e.auto) {
        Some(e) => e,
        None => panic!("no client entry recorded"),
    };
    let start_bytes = or_die("encode", encode(start).map_err(Into::into));
    let entry_bytes = or_die("encode", encode(entry).map_err(Into::into));
    let mut group = c.benchmark_group("log");
    group.bench_function("encode_start", |b| b.iter(|| encode(black_box(start)).map(|v| v.len())));
    group.bench_function("decode_start", |b| b.iter(|| decode::<StartEntry>(black_box(&start_bytes))));
    group.bench_function("encode_entry", |b| b.iter(|| encode(black_box(entry)).map(|v| v.len())));
    group.bench_function("decode_entry", |b| b.iter(|| decode::<LogEntry>(black_box(&entry_bytes))));
    group.finish();
}

fn rebuild_one<G: Game>(c: &mut Criterion, name: &str, stored: &StoredGame) {
    // The rebuilt state must be the one the recorder reached: check once, then time.
    if let Err(e) = rebuild::<G>(stored, From::Seed) {
        panic!("{name}: rebuild failed: {e}");
    }
    let mut group = c.benchmark_group("rebuild");
    group.sample_size(20);
    group.throughput(Throughput::Elements(stored.entries.len() as u64));
    group.bench_function(format!("{name}_{}_entries", stored.entries.len()), |b| {
        b.iter(|| rebuild::<G>(black_box(stored), From::Seed).map(|r| r.seq))
    });
    group.finish();
}

fn rebuilds(c: &mut Criterion) {
    let tally = or_die("record tally", recorded::tally(10_000));
    rebuild_one::<Tally>(c, "tally", &tally);
    // A halli-galli game with no time limit, played until it ends (or 10,000 entries).
    let hg_options = HalliGalliOptions { time_limit_min: None, ..HalliGalliOptions::default() };
    let hg = or_die("record halli-galli", recorded::random_play::<HalliGalli>(hg_options, 11, 10_000));
    rebuild_one::<HalliGalli>(c, "halli_galli", &hg);
    let cp =
        or_die("record cockroach", recorded::random_play::<CockroachPoker>(CockroachOptions::default(), 5, 10_000));
    rebuild_one::<CockroachPoker>(c, "cockroach_poker", &cp);
}

/// The state of `stored` after its first `k` entries.
fn mid_game<G: Game>(stored: &StoredGame, k: usize) -> G::State {
    let mut cut = stored.clone();
    cut.entries.truncate(k);
    match rebuild::<G>(&cut, From::Seed) {
        Ok(r) => r.state,
        Err(e) => panic!("mid-game state: {e}"),
    }
}

fn view_json_of<G: Game>(c: &mut Criterion, name: &str, stored: &StoredGame) {
    let state = mid_game::<G>(stored, stored.entries.len() / 2);
    let me = stored.start.players[1].clone();
    let ctx = ViewCtx::at(NOW + 5_000);
    c.bench_function(&format!("view_json/{name}"), |b| {
        b.iter(|| serde_json::to_string(&G::view(black_box(&state), Some(&me), &ctx)).map(|s| s.len()))
    });
}

fn view_json(c: &mut Criterion) {
    let tally = or_die("record tally", recorded::tally(100));
    view_json_of::<Tally>(c, "tally", &tally);
    let hg = or_die("record", recorded::random_play::<HalliGalli>(HalliGalliOptions::default(), 3, 200));
    view_json_of::<HalliGalli>(c, "halli_galli", &hg);
    let cp = or_die("record", recorded::random_play::<CockroachPoker>(CockroachOptions::default(), 5, 200));
    view_json_of::<CockroachPoker>(c, "cockroach_poker", &cp);
}

criterion_group!(engine, tally_apply, log_codec, rebuilds, view_json, harnesses);
criterion_main!(engine);
