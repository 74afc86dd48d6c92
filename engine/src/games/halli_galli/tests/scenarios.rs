//! The §5.5 worked example, every option and house rule, the contract details (legal
//! actions, timers, refusals) and the bot, on tables laid out by hand with the helpers of
//! `mod.rs`.

use super::*;
use crate::game::Reject;
use crate::rng::Seed;
use serde_json::json;
use std::collections::BTreeMap;

// ---------------------------------------------------------------- §5.5 worked example

#[test]
fn worked_example_5_5_step_by_step() {
    let mut pool = Pool::default();
    let a_deck = vec![pool.card(S, 1), pool.card(L, 1), pool.card(B, 3)];
    let b_deck = vec![pool.card(B, 4), pool.card(S, 2)];
    let c_deck = vec![pool.card(P, 1), pool.card(B, 2)];
    let pot = vec![pool.card(P, 2), pool.card(P, 3)];
    let s = table(no_limit(), &["a", "b", "c"], vec![a_deck, b_deck, c_deck], vec![vec![]; 3], pot.clone(), "a");

    // 1. a: banana 3, b: strawberry 2, c: banana 2 -> banana 5, version 3.
    let s = flip(&s, "a", T0).state;
    assert_eq!(s.top(&pid("a")).map(|f| (f.fruit, f.count)), Some((B, 3)));
    let s = flip(&s, "b", T0 + 700).state;
    let s = flip(&s, "c", T0 + 1400).state;
    assert_eq!(s.table_version, 3);
    assert_eq!(s.five_fruit(), Some(B));

    // 2. b rings first with version 3: correct; three piles and the 2 pot cards go
    //    under b's deck; b flips next.
    let s = ring_v(&s, "b", 3, T0 + 1500).unwrap();
    assert_eq!(deck(&s, "b").len(), 1 + 3 + 2);
    assert_eq!(deck(&s, "b")[0], pot[1], "the pot went under last");
    assert_eq!(s.turn, pid("b"));
    assert_eq!(s.table_version, 4);

    // 3. a's ring with version 3 arrives 0.1 s later: late, no penalty.
    let err = ring_v(&s, "a", 3, T0 + 1600).unwrap_err();
    assert_eq!((err.code(), err.reason().as_ref()), ("late", "늦었어요"));
    assert_eq!(s.wrong_count[&pid("a")], 0);

    // 4. b flips banana 4; a mistakes it and rings: wrong, a gives b and c one card each.
    let s = flip(&s, "b", T0 + 2200).state;
    assert_eq!(s.top(&pid("b")).map(|f| (f.fruit, f.count)), Some((B, 4)));
    let (a_before, b_before, c_before) = (deck(&s, "a"), deck(&s, "b").len(), deck(&s, "c").len());
    let s = ring(&s, "a", T0 + 2500);
    assert_eq!(deck(&s, "a").len(), a_before.len() - 2);
    assert_eq!(deck(&s, "b").len(), b_before + 1);
    assert_eq!(deck(&s, "c").len(), c_before + 1);
    assert_eq!(deck(&s, "b")[0], a_before[a_before.len() - 1], "clockwise: b gets a's top card first");
    assert_eq!(s.turn, pid("c"), "the turn does not change");
}

// ---------------------------------------------------------------- options

#[test]
fn options_parse_with_defaults_and_refuse_bad_values() {
    let parsed = crate::options::parse::<HalliGalli>(None).unwrap();
    assert_eq!(parsed, HalliGalliOptions::default());
    let parsed = crate::options::parse::<HalliGalli>(Some(&json!({
        "endMode": "official", "timeLimitMin": null, "flipSeconds": 8, "autoFlip": true, "flipGuardMs": 1000,
        "wrongRingLockoutMs": 0, "leftoverCards": "remove", "latencyComp": "light", "showRtt": false,
        "kidMode": true, "duelWrongLoses": true, "strikeOut": true, "penaltyEscalation": true, "wrongToPot": true
    })))
    .unwrap();
    assert_eq!(parsed.end_mode, EndMode::Official);
    assert_eq!(parsed.time_limit_min, None);
    assert!(parsed.auto_flip && parsed.kid_mode && parsed.wrong_to_pot && !parsed.show_rtt);
    for bad in
        [json!({"flipSeconds": 4}), json!({"endMode": "fast"}), json!({"turbo": true}), json!({"timeLimitMin": 7})]
    {
        assert!(crate::options::parse::<HalliGalli>(Some(&bad)).is_err(), "{bad}");
    }
    for m in HalliGalli::options_meta() {
        assert!(m.choices.iter().any(|c| c.value == m.default), "{}", m.key);
        assert!(!m.title.is_empty());
    }
}

#[test]
fn action_shapes_follow_the_protocol() {
    assert_eq!(serde_json::from_value::<HalliGalliAction>(json!({"type": "flip"})).unwrap(), HalliGalliAction::Flip {});
    assert_eq!(
        serde_json::from_value::<HalliGalliAction>(json!({"type": "ring", "version": 3})).unwrap(),
        HalliGalliAction::Ring { version: 3 }
    );
    assert!(serde_json::from_value::<HalliGalliAction>(json!({"type": "flip", "x": 1})).is_err());
    assert!(serde_json::from_value::<HalliGalliAction>(json!({"type": "ring"})).is_err());
    assert!(serde_json::from_value::<HalliGalliAction>(json!({"type": "ring", "version": 1, "at": 5})).is_err());
    assert!(
        serde_json::from_value::<HalliGalliAction>(json!({"type": "tick"})).is_err(),
        "system inputs are not actions"
    );
    assert_eq!(
        serde_json::to_value(HalliGalliAction::Ring { version: 2 }).unwrap(),
        json!({"type": "ring", "version": 2})
    );
}

#[test]
fn auto_flip_refuses_client_flips_and_the_server_flips_every_flip_seconds() {
    let options = HalliGalliOptions { auto_flip: true, flip_seconds: 2, ..no_limit() };
    let mut pool = Pool::default();
    let s = table(options, &["a", "b"], vec![pool.filler(3), pool.filler(3)], vec![vec![], vec![]], vec![], "a");
    let err = try_act(&s, Actor::Player(pid("a")), Input::Client(HalliGalliAction::Flip {}), T0 + 100, None);
    assert_eq!(code(err.unwrap_err()), "auto_flip");
    assert!(!HalliGalli::legal_actions(&s, &pid("a"), T0 + 100)
        .iter()
        .any(|i| matches!(i, Input::Client(HalliGalliAction::Flip {}))));
    let s1 = run_timer(&s, T0 + 2000).state;
    assert_eq!((s1.turn.clone(), s1.turn_deadline), (pid("b"), T0 + 4000));
    let s2 = run_timer(&s1, T0 + 4000).state;
    assert_eq!((s2.turn.clone(), s2.table_version), (pid("a"), 2));
    // Rings still work in auto-flip mode.
    assert!(!HalliGalli::legal_actions(&s2, &pid("b"), T0 + 4000).is_empty());
}

#[test]
fn kid_mode_gives_8_seconds_per_flip() {
    let options = HalliGalliOptions { kid_mode: true, flip_seconds: 2, ..no_limit() };
    let mut pool = Pool::default();
    let s = table(options, &["a", "b"], vec![pool.filler(3), pool.filler(3)], vec![vec![], vec![]], vec![], "a");
    assert_eq!(s.turn_deadline, T0 + 8000);
    let s = flip(&s, "a", T0 + 100).state;
    assert_eq!(s.turn_deadline, T0 + 8100);
    let v = HalliGalli::view(&s, None, &ViewCtx::at(T0));
    assert_eq!(v.table.flip_ms, 8000);
}

#[test]
fn flip_seconds_and_flip_guard_options_set_the_timers() {
    for (secs, guard) in [(2, 400), (3, 600), (5, 1000), (8, 600)] {
        let options = HalliGalliOptions { flip_seconds: secs, flip_guard_ms: guard, ..no_limit() };
        let mut pool = Pool::default();
        let s = table(options, &["a", "b"], vec![pool.filler(3), pool.filler(3)], vec![vec![], vec![]], vec![], "a");
        let s = flip(&s, "a", T0).state;
        assert_eq!(s.turn_deadline, T0 + i64::from(secs) * 1000);
        assert_eq!(s.flip_allowed_at, T0 + i64::from(guard));
    }
}

#[test]
fn lockout_zero_lets_a_wrong_ringer_ring_again_at_once_and_2000_locks_two_seconds() {
    let (s, _) = tops(HalliGalliOptions { wrong_ring_lockout_ms: 0, ..no_limit() }, &[Some((S, 1)), None, None]);
    let s = ring(&s, "a", T0);
    assert!(ring_v(&s, "a", s.table_version, T0).is_ok());
    let (s, _) = tops(HalliGalliOptions { wrong_ring_lockout_ms: 2000, ..no_limit() }, &[Some((S, 1)), None, None]);
    let s = ring(&s, "a", T0);
    assert_eq!(code(ring_v(&s, "a", s.table_version, T0 + 1999).unwrap_err()), "locked");
    assert!(ring_v(&s, "a", s.table_version, T0 + 2000).is_ok());
}

#[test]
fn time_limit_options_set_ends_at_after_the_countdown() {
    for (limit, ends) in [(Some(5), Some(5)), (Some(10), Some(10)), (Some(15), Some(15)), (None, None)] {
        let s = start(3, &HalliGalliOptions { time_limit_min: limit, ..Default::default() }, 3);
        assert_eq!(s.ends_at, ends.map(|m: i64| T0 + 3000 + m * 60_000));
    }
}

#[test]
fn latency_light_earliest_compensated_correct_ring_wins_at_resolve() {
    let options = HalliGalliOptions { latency_comp: LatencyComp::Light, ..no_limit() };
    let (s, _) = tops(options, &[Some((S, 2)), Some((S, 3)), None]);
    // a arrives first with a fast line; c arrives 30 ms later but with RTT 200 (credit 80,
    // capped from 100): c's compensated time is earlier.
    let s1 = ring_rtt(&s, "a", T0, 20); // adj T0 - 10
    assert_eq!(s1.ring_window.as_ref().map(|w| (w.opened_at, w.closes_at())), Some((T0, T0 + 50)));
    assert_eq!(s1.table_version, 0, "nothing collected yet");
    assert_eq!(HalliGalli::deadline(&s1), Some(T0 + 50));
    assert!(HalliGalli::timeout_players(&s1).is_empty());
    let s2 = ring_rtt(&s1, "c", T0 + 30, 200); // adj T0 + 30 - 80 = T0 - 50
    let err = ring_v(&s2, "a", 0, T0 + 31).unwrap_err();
    assert_eq!(code(err), "already_rang");
    // A flip during the window is held until after it.
    let s3 = flip(&s2, "a", T0 + 40).state;
    assert_eq!((s3.pending_flip.clone(), s3.table_version), (Some(pid("a")), 0));
    assert_eq!(HalliGalli::tick(&s3, T0 + 49), None);
    assert_eq!(HalliGalli::tick(&s3, T0 + 50), Some(HalliGalliSystem::Resolve {}));
    let resolved = run_timer(&s3, T0 + 50);
    assert_eq!(resolved.state.correct_count[&pid("c")], 1);
    assert_eq!(resolved.state.correct_count[&pid("a")], 0);
    assert_eq!(resolved.state.wrong_count[&pid("a")], 0, "the loser is not penalised");
    assert_eq!((resolved.state.turn.clone(), resolved.state.table_version), (pid("c"), 1));
    assert_eq!(resolved.state.pending_flip, None);
    assert!(resolved.state.ring_window.is_none());
    // A ring of the old version after resolve is late.
    assert_eq!(code(ring_v(&resolved.state, "b", 0, T0 + 60).unwrap_err()), "late");
    // Equal compensated times: arrival order decides; no RTT means no credit.
    let s1 = ring_rtt(&s, "b", T0, 100); // T0 - 50
    let s2 = ring_rtt(&s1, "a", T0 + 20, 140); // T0 + 20 - 70: the same, but arrived later
    assert_eq!(run_timer(&s2, T0 + 50).state.correct_count[&pid("b")], 1);
}

#[test]
fn latency_light_wrong_rings_are_penalised_at_once() {
    let options = HalliGalliOptions { latency_comp: LatencyComp::Light, ..no_limit() };
    let (s, _) = tops(options, &[Some((S, 2)), Some((S, 2)), None]);
    let after = ring_rtt(&s, "a", T0, 100);
    assert!(after.ring_window.is_none());
    assert_eq!(after.wrong_count[&pid("a")], 1);
    assert_eq!(deck(&after, "a").len(), 3);
}

#[test]
fn show_rtt_puts_rtt_and_colour_band_in_the_view_and_slow_players_get_a_hint() {
    let (s, _) = tops(no_limit(), &[None, None, None]);
    let mut rtt = BTreeMap::new();
    rtt.insert(pid("a"), 79);
    rtt.insert(pid("b"), 199);
    rtt.insert(pid("c"), 200);
    let ctx = ViewCtx { now: T0, rtt: Some(&rtt) };
    let v = serde_json::to_value(HalliGalli::view(&s, Some(&pid("c")), &ctx)).unwrap();
    assert_eq!((v["players"]["a"]["rtt"].clone(), v["players"]["a"]["rttBand"].clone()), (json!(79), json!("green")));
    assert_eq!(v["players"]["b"]["rttBand"], "yellow");
    assert_eq!(v["players"]["c"]["rttBand"], "red");
    assert_eq!(v["slowNotice"], "연결이 느려요");
    let v = serde_json::to_value(HalliGalli::view(&s, Some(&pid("a")), &ctx)).unwrap();
    assert_eq!(v["slowNotice"], json!(null));
    // Off: no RTTs shown.
    let (s, _) = tops(HalliGalliOptions { show_rtt: false, ..no_limit() }, &[None, None, None]);
    let v = serde_json::to_value(HalliGalli::view(&s, None, &ctx)).unwrap();
    assert_eq!(v["players"]["a"]["rtt"], json!(null));
    assert_eq!(v["players"]["a"]["rttBand"], json!(null));
}

#[test]
fn view_has_the_protocol_fields() {
    let (s, _) = tops(no_limit(), &[Some((S, 2)), None, None]);
    let s = ring(&s, "b", T0 + 5); // wrong: locks b
    let v = serde_json::to_value(HalliGalli::view(&s, Some(&pid("a")), &ViewCtx::at(T0 + 10))).unwrap();
    for key in [
        "phase",
        "turn",
        "tableVersion",
        "order",
        "players",
        "pot",
        "endsAt",
        "lastBell",
        "now",
        "turnDeadline",
        "eliminated",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    for key in ["deck", "faceUpCount", "top", "active", "lockedUntil", "rtt"] {
        assert!(v["players"]["a"].get(key).is_some(), "missing players.a.{key}");
    }
    assert_eq!(v["phase"], "playing");
    assert_eq!(v["now"], T0 + 10);
    assert_eq!(v["players"]["b"]["lockedUntil"], T0 + 1005);
    assert_eq!(v["players"]["b"]["locked"], true);
    assert_eq!(v["lastBell"], json!({"player": "b", "correct": false, "at": T0 + 5}));
    assert_eq!(v["canFlip"], true);
    assert_eq!(v["players"]["c"]["top"], json!(null));
}

// ---------------------------------------------------------------- house rules

#[test]
fn duel_wrong_loses_ends_a_one_on_one_at_the_wrong_ring() {
    let options = HalliGalliOptions { duel_wrong_loses: true, ..no_limit() };
    let (s, _) = tops(options.clone(), &[Some((S, 1)), None]);
    let done = ring(&s, "a", T0);
    assert_eq!(done.phase, Phase::Ended);
    assert_eq!(HalliGalli::result(&done).unwrap().ranking, vec![vec![pid("b")], vec![pid("a")]]);
    // With three players it is an ordinary wrong ring.
    let (s, _) = tops(options, &[Some((S, 1)), None, None]);
    let after = ring(&s, "a", T0);
    assert_eq!((after.phase, deck(&after, "a").len()), (Phase::Playing, 3));
}

#[test]
fn strike_out_forfeits_at_the_third_wrong_ring_and_moves_the_deck_under_the_bell() {
    let options = HalliGalliOptions { strike_out: true, wrong_ring_lockout_ms: 0, ..no_limit() };
    let mut pool = Pool::default();
    let s = table(
        options,
        &["a", "b", "c"],
        vec![pool.filler(10), pool.filler(5), pool.filler(5)],
        vec![vec![]; 3],
        vec![],
        "a",
    );
    let s = ring(&s, "a", T0);
    let s = ring(&s, "a", T0 + 1);
    assert!(s.is_active(&pid("a")));
    let left = deck(&s, "a").len() - 2;
    let applied =
        try_act(&s, Actor::Player(pid("a")), Input::Client(HalliGalliAction::Ring { version: 0 }), T0 + 2, None)
            .unwrap();
    let s = applied.state;
    assert_eq!(s.eliminated, vec![pid("a")]);
    assert_eq!(s.pot.len(), left);
    assert!(applied.events.contains(&HalliGalliEvent::Eliminated { player: pid("a"), reason: OutReason::StrikeOut }));
    assert_eq!(s.turn, pid("b"), "a's turn passes on");
    // Off: three wrong rings are just penalties.
    let mut pool = Pool::default();
    let options = HalliGalliOptions { wrong_ring_lockout_ms: 0, ..no_limit() };
    let s = table(
        options,
        &["a", "b", "c"],
        vec![pool.filler(5), pool.filler(10), pool.filler(5)],
        vec![vec![]; 3],
        vec![],
        "a",
    );
    let s = ring(&ring(&ring(&s, "b", T0), "b", T0), "b", T0);
    assert!(s.is_active(&pid("b")));
}

#[test]
fn penalty_escalation_gives_1_then_2_then_3_cards_to_each() {
    let options = HalliGalliOptions { penalty_escalation: true, wrong_ring_lockout_ms: 0, ..no_limit() };
    let mut pool = Pool::default();
    let decks = vec![pool.filler(20), pool.filler(5), pool.filler(5)];
    let s = table(options, &["a", "b", "c"], decks, vec![vec![]; 3], vec![], "b");
    let s1 = ring(&s, "a", T0);
    assert_eq!([deck(&s1, "a").len(), deck(&s1, "b").len(), deck(&s1, "c").len()], [18, 6, 6]);
    let s2 = ring(&s1, "a", T0);
    assert_eq!([deck(&s2, "a").len(), deck(&s2, "b").len(), deck(&s2, "c").len()], [14, 8, 8]);
    let s3 = ring(&s2, "a", T0);
    assert_eq!([deck(&s3, "a").len(), deck(&s3, "b").len(), deck(&s3, "c").len()], [8, 11, 11]);
    // Not enough for the 4th (8 of 8 needed is enough: exactly zero, stays).
    let s4 = ring(&s3, "a", T0);
    assert!(deck(&s4, "a").is_empty() && s4.is_active(&pid("a")));
}

#[test]
fn wrong_to_pot_puts_penalty_cards_under_the_bell() {
    let options = HalliGalliOptions { wrong_to_pot: true, ..no_limit() };
    let (s, _) = tops(options.clone(), &[Some((S, 1)), None, None]);
    let applied =
        try_act(&s, Actor::Player(pid("b")), Input::Client(HalliGalliAction::Ring { version: 0 }), T0, None).unwrap();
    let after = applied.state;
    assert_eq!((deck(&after, "b").len(), after.pot.len()), (3, 2));
    assert_eq!((deck(&after, "a").len(), deck(&after, "c").len()), (5, 5));
    assert!(applied.events.contains(&HalliGalliEvent::Penalty { player: pid("b"), to: vec![], to_pot: 2 }));
    // Short of cards: what there is goes under the bell and the ringer is out.
    let mut pool = Pool::default();
    let s = table(
        options,
        &["a", "b", "c"],
        vec![pool.filler(3), pool.filler(1), pool.filler(3)],
        vec![vec![]; 3],
        vec![],
        "a",
    );
    let after = ring(&s, "b", T0);
    assert_eq!((after.pot.len(), after.eliminated.clone()), (1, vec![pid("b")]));
}

// ---------------------------------------------------------------- contract details

#[test]
fn legal_actions_offer_flip_to_the_turn_player_and_ring_to_everyone_in() {
    let (s, _) = tops(no_limit(), &[Some((S, 1)), None, None]);
    let legal = HalliGalli::legal_actions(&s, &pid("a"), T0);
    assert_eq!(
        legal,
        vec![Input::Client(HalliGalliAction::Flip {}), Input::Client(HalliGalliAction::Ring { version: 0 })]
    );
    assert_eq!(
        HalliGalli::legal_actions(&s, &pid("b"), T0),
        vec![Input::Client(HalliGalliAction::Ring { version: 0 })]
    );
    assert!(HalliGalli::legal_actions(&s, &pid("zz"), T0).is_empty());
    assert_eq!(HalliGalli::active_players(&s), seats(&["a", "b", "c"]));
    assert_eq!(HalliGalli::timeout_players(&s), seats(&["a"]));
    assert_eq!(HalliGalli::disconnect_grace_ms(&s), Some(60_000));
    assert_eq!(HalliGalli::on_timeout(&s, &pid("a")), Input::System(HalliGalliSystem::TimeoutFlip {}));
    // Strangers, the server and ticks before their time are refused.
    let err = try_act(&s, Actor::Server, Input::Client(HalliGalliAction::Flip {}), T0, None).unwrap_err();
    assert_eq!(code(err), "not_seated");
    let err = try_act(&s, Actor::Server, Input::System(HalliGalliSystem::Tick {}), T0 + 10, None).unwrap_err();
    assert_eq!(code(err), "not_due");
    let err =
        try_act(&s, Actor::Player(pid("a")), Input::System(HalliGalliSystem::Tick {}), T0 + 5000, None).unwrap_err();
    assert_eq!(code(err), "server_only");
    let err = try_act(&s, Actor::Server, Input::System(HalliGalliSystem::Resolve {}), T0 + 5000, None).unwrap_err();
    assert_eq!(code(err), "not_due");
    let err = try_act(&s, Actor::Player(pid("b")), Input::Client(HalliGalliAction::Flip {}), T0, None).unwrap_err();
    assert_eq!((err.code(), err.reason().as_ref()), ("not_your_turn", "내 차례가 아니에요"));
    // apply refuses what validate refuses, instead of panicking.
    let bad = HalliGalli::apply(
        &s,
        &Actor::Player(pid("b")),
        &Input::Client(HalliGalliAction::Flip {}),
        &Ctx::at(T0),
        &mut Rng::from_seed(Seed(1)),
    );
    assert!(matches!(bad, Err(EngineError::InvalidInput(_))));
}

#[test]
fn the_game_over_refuses_everything() {
    let options = HalliGalliOptions { duel_wrong_loses: true, ..no_limit() };
    let (s, _) = tops(options, &[Some((S, 1)), None]);
    let done = ring(&s, "a", T0);
    let err = ring_v(&done, "b", done.table_version, T0 + 1).unwrap_err();
    assert_eq!(code(err), "game_over");
    assert!(HalliGalli::legal_actions(&done, &pid("b"), T0 + 1).is_empty());
    assert!(HalliGalli::timeout_players(&done).is_empty());
    assert!(HalliGalli::tick(&done, T0 + 100_000).is_none());
    let v = HalliGalli::view(&done, Some(&pid("b")), &ViewCtx::at(T0 + 1));
    assert_eq!((v.table.turn, v.mine.can_ring, v.table.end_reason), (None, false, Some(EndReason::LastStanding)));
}

// ---------------------------------------------------------------- bot

fn bot_view(s: &HalliGalliState, me: &str) -> view::HalliGalliView {
    HalliGalli::view(s, Some(&pid(me)), &ViewCtx::at(T0))
}

#[test]
fn bot_rings_on_a_correct_table_after_its_levels_delay() {
    // Default (normal): about a person's reaction to "exactly five", 0.7–1.4 s; hard is
    // quicker than most people, easy slower.
    for (level, range) in [(None, 700..1400), (Some(BotLevel::Easy), 1100..2000), (Some(BotLevel::Hard), 350..950)] {
        let options = HalliGalliOptions { bot_level: level.unwrap_or_default(), ..no_limit() };
        let (s, _) = tops(options, &[Some((S, 2)), Some((S, 3)), None]);
        let legal = HalliGalli::legal_actions(&s, &pid("b"), T0);
        let delays: Vec<i64> = (0..200)
            .map(|seed| {
                let mv = HalliGalli::bot_move(&bot_view(&s, "b"), &pid("b"), &legal, &mut Rng::from_seed(Seed(seed)))
                    .unwrap();
                assert_eq!(mv.input, Input::Client(HalliGalliAction::Ring { version: 0 }));
                mv.delay_ms
            })
            .collect();
        for d in &delays {
            assert!(range.contains(d), "{level:?}: {d} ms");
        }
        // Spread over the range, not stuck at one end.
        let (min, max) = (delays.iter().min().unwrap(), delays.iter().max().unwrap());
        assert!(max - min > (range.end - range.start) / 2, "{level:?}: {min}..{max}");
    }
}

#[test]
fn bot_flips_on_its_turn_and_rarely_rings_wrongly() {
    // Wrong rings per 1000 decisions: about 10 at easy, 20 at normal, 30 at hard.
    for (level, wrong_range) in [(BotLevel::Easy, 2..25), (BotLevel::Normal, 8..40), (BotLevel::Hard, 12..55)] {
        let options = HalliGalliOptions { bot_level: level, ..no_limit() };
        let (s, _) = tops(options, &[Some((S, 2)), Some((S, 2)), None]);
        let legal = HalliGalli::legal_actions(&s, &pid("a"), T0);
        let mut wrong = 0;
        for seed in 0..1000 {
            let mv =
                HalliGalli::bot_move(&bot_view(&s, "a"), &pid("a"), &legal, &mut Rng::from_seed(Seed(seed))).unwrap();
            match mv.input {
                Input::Client(HalliGalliAction::Flip {}) => assert!(mv.delay_ms < 1300),
                _ => wrong += 1,
            }
        }
        assert!(wrong_range.contains(&wrong), "{level:?}: {wrong} wrong rings in 1000");
        // Not its turn and no five: it mostly waits.
        let legal = HalliGalli::legal_actions(&s, &pid("b"), T0);
        let waits = (0..100)
            .filter(|seed| {
                HalliGalli::bot_move(&bot_view(&s, "b"), &pid("b"), &legal, &mut Rng::from_seed(Seed(*seed))).is_none()
            })
            .count();
        assert!(waits > 80);
    }
}

#[test]
fn bot_level_is_a_room_option_and_old_stored_options_read_normal() {
    let parsed = crate::options::parse::<HalliGalli>(Some(&json!({"botLevel": "easy"}))).unwrap();
    assert_eq!(parsed.bot_level, BotLevel::Easy);
    assert!(crate::options::parse::<HalliGalli>(Some(&json!({"botLevel": "expert"}))).is_err());
    let meta = HalliGalli::options_meta();
    let level = meta.iter().find(|m| m.key == "botLevel").unwrap();
    assert_eq!(level.default, json!("normal"));
    let labels: Vec<&str> = level.choices.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["쉬움 (느긋한 봇)", "보통", "어려움 (빠른 봇)"]);
    // Options stored before the option existed (a running game's state) still decode.
    let mut old = serde_json::to_value(HalliGalliOptions::default()).unwrap();
    old.as_object_mut().unwrap().remove("botLevel");
    let decoded: HalliGalliOptions = serde_json::from_value(old).unwrap();
    assert_eq!(decoded.bot_level, BotLevel::Normal);
}

#[test]
fn bots_play_a_whole_game_with_legal_moves_only() {
    let ps = seats(&["a", "b", "c", "d"]);
    let options = HalliGalliOptions::default();
    let mut rng = Rng::from_seed(Seed(5));
    let mut s =
        HalliGalli::setup(SetupCtx { players: &ps, options: &options, now: T0, game_no: None }, &mut rng).unwrap();
    let mut bot_rng = Rng::from_seed(Seed(6));
    let mut now = T0;
    let mut moves = 0;
    while HalliGalli::result(&s).is_none() {
        // Each bot proposes; the earliest proposal happens unless a timer comes first.
        let mut best: Option<(i64, PlayerId, HalliGalliInput)> = None;
        for p in &ps {
            let legal = HalliGalli::legal_actions(&s, p, now);
            let v = HalliGalli::view(&s, Some(p), &ViewCtx::at(now));
            if let Some(mv) = HalliGalli::bot_move(&v, p, &legal, &mut bot_rng) {
                if best.as_ref().is_none_or(|(t, _, _)| now + mv.delay_ms < *t) {
                    best = Some((now + mv.delay_ms, p.clone(), mv.input));
                }
            }
        }
        let timer = HalliGalli::deadline(&s).unwrap();
        match best {
            Some((t, p, input)) if t < timer => {
                now = t;
                s = try_act(&s, Actor::Player(p), input, now, Some(50)).unwrap().state;
                moves += 1;
            }
            _ => {
                now = now.max(timer);
                s = run_timer(&s, now).state;
            }
        }
    }
    assert!(moves > 20);
    assert!(HalliGalli::result(&s).is_some());
}

#[test]
fn views_json_is_each_view_serialized_with_ids_that_need_escaping_rtts_shown_and_a_ring_window_open() {
    // `views_json` writes the field names itself (view.rs): every field, in order, as
    // serde names it, and the values (ids with quotes, backslashes, Hangul) as serde does.
    let options = HalliGalliOptions {
        latency_comp: LatencyComp::Light,
        show_rtt: true,
        kid_mode: true,
        bot_level: BotLevel::Easy,
        ..no_limit()
    };
    let names = ["q\"uote", "한글", "back\\slash"];
    let mut pool = Pool::default();
    let piles = vec![vec![pool.card(S, 2)], vec![pool.card(S, 3)], Vec::new()];
    let decks = names.iter().map(|_| pool.filler(5)).collect();
    let s = ring_rtt(&table(options, &names, decks, piles, Vec::new(), names[0]), names[1], T0, 250);
    assert!(s.ring_window.is_some());
    let rtt: BTreeMap<PlayerId, u32> = [(pid(names[0]), 30), (pid(names[1]), 250)].into();
    let ctx = ViewCtx { now: T0 + 5, rtt: Some(&rtt) };
    let ids = seats(&names);
    let viewers: Vec<Option<&PlayerId>> = ids.iter().map(Some).chain([None]).collect();
    let together = HalliGalli::views_json(&s, &viewers, &ctx).unwrap();
    assert_eq!(together.len(), viewers.len());
    for (viewer, json) in viewers.iter().zip(&together) {
        assert_eq!(*json, serde_json::to_string(&HalliGalli::view(&s, *viewer, &ctx)).unwrap(), "viewer {viewer:?}");
    }
    assert!(together[0].contains(r#""q\"uote":{"deck":"#), "{}", together[0]);
    assert!(together[0].contains(r#""rang":["한글"]"#), "{}", together[0]);
    assert!(
        together[1].ends_with(r#""canFlip":false,"canRing":false,"slowNotice":"연결이 느려요"}"#),
        "{}",
        together[1]
    );
}
