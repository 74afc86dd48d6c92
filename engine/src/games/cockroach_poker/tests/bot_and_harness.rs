use super::*;

// ---------------------------------------------------------------------------------------
// Bot
// ---------------------------------------------------------------------------------------

fn bot(s: &CockroachState, me: &str, seed: u128) -> CockroachInput {
    let me = pid(me);
    let view = CockroachPoker::view(s, Some(&me), &ViewCtx::at(AT));
    let legal = legal_actions(s, &me);
    let mv = CockroachPoker::bot_move(&view, &me, &legal, &mut Rng::from_seed(Seed(seed))).unwrap();
    assert!(legal.contains(&mv.input));
    assert!(mv.delay_ms > 0);
    mv.input
}

#[test]
fn bots_play_whole_games_with_legal_moves() {
    for seed in 0..60u128 {
        let n = 2 + (seed % 5) as usize;
        let mut s = setup(n, seed, CockroachOptions { two_player_pass: seed % 2 == 0, ..opts() });
        let mut rng = Rng::from_seed(Seed(seed + 1000));
        let mut steps = 0;
        while !s.is_over() {
            let p = s.active().unwrap().clone();
            let input = bot(&s, p.as_str(), seed * 1000 + steps);
            s = CockroachPoker::apply(&s, &Actor::Player(p), &input, &Ctx::at(AT), &mut rng).unwrap().state;
            rules::check_invariants(&s).unwrap();
            steps += 1;
            assert!(steps < 2000);
        }
        assert!(CockroachPoker::result(&s).is_some());
    }
}

#[test]
fn bot_gives_the_kind_the_target_already_collects() {
    let mut s = four();
    give_front(&mut s, "c", &[c(Spider, 2), c(Spider, 3), c(Spider, 4)]);
    let mut truthful = 0;
    for seed in 0..40 {
        match bot(&s, "a", seed) {
            Input::Client(CockroachAction::Offer { card_id, to, claim }) => {
                assert_eq!(to, pid("c"));
                assert_eq!(Kind::of(card_id), Some(Spider));
                truthful += usize::from(claim == Spider);
            }
            other => panic!("{other:?}"),
        }
    }
    assert!((5..35).contains(&truthful), "bluffs sometimes, not always: {truthful}/40 truthful");
}

#[test]
fn bot_calls_a_lie_when_every_card_of_the_claim_is_visible() {
    // b holds 4 rats and 4 more lie in fronts: a claimed rat cannot be one.
    let mut s = table(
        &[
            ("a", vec![c(Spider, 0), c(Fly, 7)]),
            ("b", vec![c(Rat, 0), c(Rat, 1), c(Rat, 2), c(Rat, 3)]),
            ("c", vec![c(Bat, 0)]),
            ("d", vec![c(Toad, 0)]),
        ],
        opts(),
    );
    give_front(&mut s, "c", &[c(Rat, 4), c(Rat, 5)]);
    give_front(&mut s, "d", &[c(Rat, 6), c(Rat, 7)]);
    let s = act(&s, "a", offer(c(Spider, 0), "b", Rat));
    for seed in 0..20 {
        assert_eq!(bot(&s, "b", seed), Input::Client(call(false)));
    }
}

#[test]
fn bot_passes_a_peeked_card_to_whoever_collects_its_kind() {
    let mut s = four();
    give_front(&mut s, "d", &[c(Spider, 2), c(Spider, 3)]);
    let s = act(&act(&s, "a", offer(c(Spider, 0), "b", Fly)), "b", PEEK);
    for seed in 0..20 {
        match bot(&s, "b", seed) {
            Input::Client(CockroachAction::Pass { to, .. }) => assert_eq!(to, pid("d")),
            other => panic!("{other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Random-play harness
// ---------------------------------------------------------------------------------------

fn random_options(rng: &mut Rng, _n: usize) -> CockroachOptions {
    CockroachOptions {
        lose_count: match rng.int(4) {
            0 => LoseCount::Auto(AutoMarker::Auto),
            k => LoseCount::Count(2 + k as u8),
        },
        turn_seconds: [15, 30, 60][rng.index(3)],
        show_seen_by: true,
        claim_history: rng.chance(0.5),
        quick_chat: rng.chance(0.5),
        eight_kinds_rule: rng.chance(0.3),
        two_player_pass: rng.chance(0.5),
    }
}

#[test]
fn passes_the_harness_over_1000_seeds() {
    let mut harness = Harness::<CockroachPoker>::new(random_options);
    harness.invariant = rules::check_invariants;
    let started = std::time::Instant::now();
    let report = harness.run().unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.games, 1000);
    assert!(report.random_timeouts > 0);
    eprintln!(
        "cockroach-poker harness: {} games, {} steps, {} timer inputs, {} random timeouts, apply p50 {} ns p99 {} ns, {:?}",
        report.games,
        report.steps,
        report.timer_inputs,
        report.random_timeouts,
        report.apply_quantile_ns(0.5),
        report.apply_quantile_ns(0.99),
        started.elapsed()
    );
}

/// Long gaps and frequent disconnects so turn deadlines and the 90 s grace fire.
#[test]
fn passes_the_harness_with_deadlines_and_disconnects() {
    let mut harness = Harness::<CockroachPoker>::new(random_options);
    harness.invariant = rules::check_invariants;
    harness.seeds = 1000..1300;
    harness.max_gap_ms = 70_000;
    harness.presence_rate = 0.1;
    harness.timeout_rate = 0.1;
    harness.leak_every = 2;
    let report = harness.run().unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.games, 300);
    eprintln!(
        "cockroach-poker harness (deadlines): {} games, {} steps, {} timer inputs, {} random timeouts",
        report.games, report.steps, report.timer_inputs, report.random_timeouts
    );
    assert!(report.timer_inputs > 300, "deadlines fired: {}", report.timer_inputs);
}
