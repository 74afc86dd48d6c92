use super::*;

// ---------------------------------------------------------------------------------------
// §10 checklist
// ---------------------------------------------------------------------------------------

/// §10: hand sizes match the §4 table; 2 players remove 10 and get 27 each; 64 cards.
#[test]
fn checklist_deal_sizes_match_the_table_and_cards_are_conserved() {
    let table = [
        (2, vec![27, 27]),
        (3, vec![22, 21, 21]),
        (4, vec![16, 16, 16, 16]),
        (5, vec![13, 13, 13, 13, 12]),
        (6, vec![11, 11, 11, 11, 10, 10]),
    ];
    for (n, sizes) in table {
        let mut starters = std::collections::BTreeSet::new();
        for seed in 0..30 {
            let s = setup(n, seed, opts());
            let got: Vec<usize> = s.order.iter().map(|p| s.hand(p).len()).collect();
            assert_eq!(got, sizes, "{n} players, seed {seed}");
            assert_eq!(s.removed.len(), if n == 2 { 10 } else { 0 });
            rules::check_invariants(&s).unwrap();
            // Seats keep their cyclic order, rotated to start with the first player.
            assert_eq!(s.order, crate::turns::rotate_to(&players(n), &s.order[0]));
            assert_eq!(s.round.starter, s.order[0]);
            assert_eq!(CockroachPoker::active_players(&s), vec![s.order[0].clone()]);
            starters.insert(s.order[0].clone());
        }
        assert!(starters.len() > 1, "the first player is drawn at random");
    }
}

/// §4.2, §8.4: the 2-player removed cards are the first 10 of the shuffle.
#[test]
fn two_player_removes_the_first_ten_of_the_shuffle_unseen() {
    let s = setup(2, 77, opts());
    let mut rng = Rng::from_seed(Seed(77));
    let deck = rng.shuffled(&(0..64).collect::<Vec<u32>>());
    assert_eq!(s.removed, deck[..10]);
    // Dealt one at a time from the first seat.
    assert_eq!(s.hand(&s.order[0])[..3], [deck[10], deck[12], deck[14]]);
    assert_eq!(s.hand(&s.order[1])[..3], [deck[11], deck[13], deck[15]]);
}

/// §10: a right call sends the card to the passer, a wrong one to the holder; whoever
/// took it starts the next round.
#[test]
fn checklist_right_call_goes_to_the_passer_wrong_call_to_the_holder() {
    // Truthful claim, called true: right, so a (the passer) takes it.
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Spider));
    let s = act(&s, "b", call(true));
    assert_eq!(front_of(&s, "a"), vec![c(Spider, 0)]);
    assert_eq!(s.round.starter, pid("a"));
    let reveal = s.last_reveal.clone().unwrap();
    assert_eq!(
        reveal,
        Reveal {
            card: c(Spider, 0),
            kind: Spider,
            claim: Spider,
            call: CallWord::True,
            caller: pid("b"),
            correct: true,
            taken_by: pid("a")
        }
    );

    // A lie called true: wrong, so b (the holder) takes it and starts.
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Fly));
    let s = act(&s, "b", call(true));
    assert_eq!(front_of(&s, "b"), vec![c(Spider, 0)]);
    assert_eq!(s.round.starter, pid("b"));
    assert_eq!(s.round.card, None);
    assert_eq!(CockroachPoker::active_players(&s), vec![pid("b")]);

    // A lie called false: right, the passer takes it.
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Fly));
    let s = act(&s, "b", call(false));
    assert_eq!(front_of(&s, "a"), vec![c(Spider, 0)]);
    assert_eq!(s.round.starter, pid("a"));

    // The truth called false: wrong, the holder takes it.
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Spider));
    let out = applied(&s, "b", Input::Client(call(false)), 1);
    assert_eq!(front_of(&out.state, "b"), vec![c(Spider, 0)]);
    assert_eq!(
        out.events,
        vec![
            CockroachEvent::Revealed {
                caller: pid("b"),
                call: CallWord::False,
                claim: Spider,
                card: CardFace { id: c(Spider, 0), kind: Spider },
                correct: false,
                taken_by: pid("b"),
            },
            CockroachEvent::RoundStarted { starter: pid("b") },
        ]
    );
}

/// §5.3: the call is judged against the latest claim, and the last passer takes a card
/// called right.
#[test]
fn call_is_judged_against_the_latest_claim_and_the_last_passer() {
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Fly)); // a lie
    let s = act(&s, "b", PEEK);
    let s = act(&s, "b", pass("c", Spider)); // the truth
    let s = act(&s, "c", call(true));
    assert_eq!(front_of(&s, "b"), vec![c(Spider, 0)], "right call: the last passer b takes it");
    assert!(front_of(&s, "a").is_empty());
    assert_eq!(s.round.starter, pid("b"));
}

/// §10: passing to anyone in `seen`, the starter included, is refused.
#[test]
fn checklist_pass_to_anyone_who_has_seen_the_card_is_refused() {
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Fly));
    let s = act(&s, "b", PEEK);
    assert_eq!(s.round.seen, vec![pid("a"), pid("b")]);
    assert_eq!(refused(&s, "b", pass("a", Fly)), "already_seen");
    assert_eq!(refused(&s, "b", pass("b", Fly)), "self_target");
    assert_eq!(refused(&s, "b", pass("zed", Fly)), "unknown_player");
    let s = act(&s, "b", pass("c", Fly));
    let s = act(&s, "c", PEEK);
    assert_eq!(refused(&s, "c", pass("a", Fly)), "already_seen");
    assert_eq!(refused(&s, "c", pass("b", Fly)), "already_seen");
    let s = act(&s, "c", pass("d", Bat));
    assert_eq!(s.round.holder, Some(pid("d")));
    assert_eq!(s.round.claim, Some(Bat));
}

/// §10: a holder whom everyone else has already seen may not peek, only call.
#[test]
fn checklist_holder_after_everyone_has_seen_can_only_call() {
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Fly));
    let s = act(&act(&s, "b", PEEK), "b", pass("c", Fly));
    let s = act(&act(&s, "c", PEEK), "c", pass("d", Fly));
    assert_eq!(refused(&s, "d", PEEK), "no_one_to_pass");
    assert!(s.pass_targets().is_empty());
    assert_eq!(
        legal_actions(&s, &pid("d")),
        vec![Input::Client(call(true)), Input::Client(call(false))],
        "only the two calls are legal"
    );
    let s = act(&s, "d", call(false));
    assert_eq!(front_of(&s, "c"), vec![c(Spider, 0)], "the lie was called: passer c takes it");

    // With 3 players the second holder is already the last one.
    let three = table(&[("a", vec![c(Spider, 0), c(Fly, 0)]), ("b", vec![c(Rat, 0)]), ("c", vec![c(Bat, 0)])], opts());
    let s = act(&three, "a", offer(c(Spider, 0), "b", Spider));
    let s = act(&act(&s, "b", PEEK), "b", pass("c", Rat));
    assert_eq!(refused(&s, "c", PEEK), "no_one_to_pass");
}

/// §10, §8.2: call after peek is refused with the spec's reason.
#[test]
fn checklist_call_after_peek_is_refused() {
    let s = act(&act(&four(), "a", offer(c(Spider, 0), "b", Fly)), "b", PEEK);
    let err =
        CockroachPoker::validate(&s, &Actor::Player(pid("b")), &Input::Client(call(true)), &Ctx::at(AT)).unwrap_err();
    assert_eq!(err, CockroachReject::MustPass);
    assert_eq!(err.code(), "must_pass");
    assert_eq!(err.reason(), "카드를 이미 봤으니 다른 사람에게 넘겨야 해요");
    assert_eq!(refused(&s, "b", call(false)), "must_pass");
    assert_eq!(refused(&s, "b", PEEK), "already_peeked");
}

/// §10: 2 players may not peek, and lose at 5 of a kind, not 4 ("auto").
#[test]
fn checklist_two_players_cannot_peek_and_lose_at_five() {
    let s = act(&two_players(3), "a", offer(c(Rat, 0), "b", Fly));
    assert_eq!(refused(&s, "b", PEEK), "two_player_no_pass");
    assert_eq!(s.lose_count(), 5);
    // Wrong call: b's fourth rat, the game goes on.
    let s = act(&s, "b", call(true));
    assert_eq!(s.front_count(&pid("b"), Rat), 4);
    assert!(CockroachPoker::result(&s).is_none());
    assert_eq!(s.round.starter, pid("b"));
    // b offers a true rat, a calls it true: b takes the fifth and loses.
    let s = act(&s, "b", offer(c(Rat, 1), "a", Rat));
    let s = act(&s, "a", call(true));
    assert_eq!(s.loser, Some(pid("b")));
    assert_eq!(s.loss_reason, Some(LossReason::Four));
    let result = CockroachPoker::result(&s).unwrap();
    assert_eq!(result.summary, "b님 앞에 쥐 5장! b님 패배, 나머지 모두 승리");
    assert_eq!(result.ranking, vec![vec![pid("a")], vec![pid("b")]]);
    assert_eq!(result.details["losingKind"], "rat");
    assert_eq!(result.details["reason"], "four");
}

/// §10: reaching 4 of one kind ends the game at once; 4 cards of different kinds do not.
#[test]
fn checklist_four_of_one_kind_ends_at_once_mixed_kinds_do_not() {
    // c: 3 spiders, 3 flies, 1 scorpion: 7 cards, none at 4 yet.
    let s = c_with_front(&[c(Spider, 2), c(Spider, 3), c(Spider, 4), c(Fly, 2), c(Fly, 3), c(Fly, 4), c(Scorpion, 0)]);
    // c takes a toad (a wrong call): 8 cards of 4 kinds, still no kind at 4.
    let s = act(&act(&s, "a", offer(c(Toad, 0), "c", Spider)), "c", call(true));
    assert_eq!(front_of(&s, "c").len(), 8);
    assert!(s.loser.is_none(), "8 cards of 4 kinds is not a loss");
    // c starts and hands a a rat; a calls the truth a lie and takes it.
    let s = act(&s, "c", offer(c(Rat, 0), "a", Rat));
    let s = act(&s, "a", call(false));
    assert_eq!(front_of(&s, "a"), vec![c(Rat, 0)], "a was wrong");
    // a starts again and hands c a real spider, c calls the truth a lie.
    let s = act(&s, "a", offer(c(Spider, 0), "c", Spider));
    let out = applied(&s, "c", Input::Client(call(false)), 1);
    let s = out.state;
    assert_eq!(s.loser, Some(pid("c")));
    assert_eq!(s.losing_kind, Some(Spider));
    assert_eq!(
        out.events.last(),
        Some(&CockroachEvent::GameOver { loser: pid("c"), reason: LossReason::Four, losing_kind: Some(Spider) })
    );
    // Over: nobody acts, no deadline, everything refused.
    assert!(CockroachPoker::active_players(&s).is_empty());
    assert_eq!(CockroachPoker::deadline(&s), None);
    assert_eq!(refused(&s, "c", offer(c(Rat, 1), "a", Rat)), "game_over");
    assert!(legal_actions(&s, &pid("c")).is_empty());
    let result = CockroachPoker::result(&s).unwrap();
    assert_eq!(result.summary, "c님 앞에 거미 4장! c님 패배, 나머지 모두 승리");
}

/// §10: the next starter with an empty hand loses at once (reason emptyHand).
#[test]
fn checklist_next_starter_with_an_empty_hand_loses() {
    // b has no cards; a offers the truth, b calls it a lie and must start: b loses.
    let s = table(&[("a", vec![c(Spider, 0), c(Fly, 0)]), ("b", vec![]), ("c", vec![c(Rat, 0)])], opts());
    let s = act(&s, "a", offer(c(Spider, 0), "b", Spider));
    let out = applied(&s, "b", Input::Client(call(false)), 1);
    assert_eq!(out.state.loser, Some(pid("b")));
    assert_eq!(out.state.loss_reason, Some(LossReason::EmptyHand));
    let result = CockroachPoker::result(&out.state).unwrap();
    assert_eq!(result.details["reason"], "emptyHand");
    assert_eq!(result.details["losingKind"], Value::Null);
    assert_eq!(result.summary, "b님 손에 카드가 없어요! b님 패배, 나머지 모두 승리");

    // The passer who offered their last card and is called right loses the same way.
    let s = table(&[("a", vec![c(Spider, 0)]), ("b", vec![c(Fly, 0)]), ("c", vec![c(Rat, 0)])], opts());
    let s = act(&act(&s, "a", offer(c(Spider, 0), "b", Spider)), "b", call(true));
    assert_eq!(s.loser, Some(pid("a")));
    assert_eq!(s.loss_reason, Some(LossReason::EmptyHand));
}

/// §10: a player with no cards may receive a card and passes or calls normally.
#[test]
fn checklist_offer_to_an_empty_hand_is_allowed_and_plays_normally() {
    let base = table(
        &[("a", vec![c(Spider, 0), c(Fly, 0)]), ("b", vec![]), ("c", vec![c(Rat, 0)]), ("d", vec![c(Bat, 0)])],
        opts(),
    );
    let s = act(&base, "a", offer(c(Spider, 0), "b", Fly));
    assert_eq!(s.round.holder, Some(pid("b")));
    // Pass on.
    let passed = act(&act(&s, "b", PEEK), "b", pass("c", Spider));
    assert_eq!(passed.round.holder, Some(pid("c")));
    // Or call right: a takes it and the game goes on.
    let called = act(&s, "b", call(false));
    assert_eq!(front_of(&called, "a"), vec![c(Spider, 0)]);
    assert!(called.loser.is_none());
    assert_eq!(called.round.starter, pid("a"));
    // Passing to the empty hand is allowed too.
    let s = act(&base, "a", offer(c(Spider, 0), "c", Fly));
    let s = act(&act(&s, "c", PEEK), "c", pass("b", Fly));
    assert_eq!(s.round.holder, Some(pid("b")));
}

/// §10, §8.5: the starter who runs out of time offers a random card of theirs to the
/// next seat with a random claim.
#[test]
fn checklist_timeout_starter_offers_automatically() {
    let s = four();
    assert_eq!(CockroachPoker::on_timeout(&s, &pid("a")), timeout());
    let err = CockroachPoker::validate(&s, &Actor::Player(pid("b")), &timeout(), &Ctx::at(AT)).unwrap_err();
    assert_eq!(err.code(), "not_your_turn");
    let mut cards = std::collections::BTreeSet::new();
    let mut claims = std::collections::BTreeSet::new();
    for seed in 0..40 {
        let out = applied(&s, "a", timeout(), seed);
        let card = out.state.round.card.unwrap();
        assert!(s.hand(&pid("a")).contains(&card));
        assert!(!out.state.hand(&pid("a")).contains(&card));
        assert_eq!(out.state.round.holder, Some(pid("b")), "the next seat");
        let claim = out.state.round.claim.unwrap();
        assert_eq!(
            out.events,
            vec![
                CockroachEvent::TimedOut { player: pid("a") },
                CockroachEvent::Offered { from: pid("a"), to: pid("b"), claim }
            ]
        );
        cards.insert(card);
        claims.insert(claim);
    }
    assert_eq!(cards.len(), 4, "any card of the hand");
    assert!(claims.len() >= 6, "claims drawn from all 8 kinds: {claims:?}");
    // The last seat's next seat wraps around to the first.
    let mut s = four();
    s.round.starter = pid("d");
    assert_eq!(applied(&s, "d", timeout(), 3).state.round.holder, Some(pid("a")));
}

/// §10, §8.5: an unseen holder out of time calls true or false at random.
#[test]
fn checklist_timeout_holder_calls_automatically() {
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Fly));
    let mut calls = std::collections::BTreeSet::new();
    for seed in 0..20 {
        let out = applied(&s, "b", timeout(), seed);
        let reveal = out.state.last_reveal.clone().unwrap();
        assert_eq!(reveal.caller, pid("b"));
        assert_eq!(out.events[0], CockroachEvent::TimedOut { player: pid("b") });
        assert!(matches!(out.events[1], CockroachEvent::Revealed { .. }));
        calls.insert(format!("{:?}", reveal.call));
    }
    assert_eq!(calls.len(), 2, "both calls happen");
}

/// §10, §8.5: a holder who peeked and ran out of time passes to the first seat that
/// has not seen the card, claiming the true kind.
#[test]
fn checklist_timeout_after_peek_passes_automatically() {
    // a offers to c; c peeks. Seat order a, b, c, d: a has seen it, b is the first unseen.
    let s = act(&act(&four(), "a", offer(c(Spider, 0), "c", Fly)), "c", PEEK);
    let out = applied(&s, "c", timeout(), 5);
    assert_eq!(
        out.events,
        vec![
            CockroachEvent::TimedOut { player: pid("c") },
            CockroachEvent::Passed { from: pid("c"), to: pid("b"), claim: Spider }
        ]
    );
    // Now b peeks and times out: d is the only one left.
    let s = act(&out.state, "b", PEEK);
    let s = applied(&s, "b", timeout(), 5).state;
    assert_eq!(s.round.holder, Some(pid("d")));
    assert_eq!(s.round.claim, Some(Spider));
}

/// §8.5: the deadline is `turnSeconds` after the round's last change, and the runner
/// applies the timeout for the active player once it passes.
#[test]
fn deadline_follows_turn_seconds_and_fires_the_timeout() {
    let s = setup(4, 9, CockroachOptions { turn_seconds: 15, ..opts() });
    assert_eq!(CockroachPoker::deadline(&s), Some(T0 + 15_000));
    let starter = s.order[0].clone();
    let holder = s.order[1].clone();
    let card = s.hand(&starter)[0];
    let out = CockroachPoker::apply(
        &s,
        &Actor::Player(starter.clone()),
        &Input::Client(CockroachAction::Offer { card_id: card, to: holder.clone(), claim: Rat }),
        &Ctx::at(T0 + 4_000),
        &mut Rng::from_seed(Seed(1)),
    )
    .unwrap();
    assert_eq!(CockroachPoker::deadline(&out.state), Some(T0 + 19_000));
    let empty = BTreeMap::new();
    let presence = Presence::all_connected(&empty);
    assert_eq!(schedule::due::<CockroachPoker>(&out.state, T0 + 18_999, &presence), None);
    assert_eq!(
        schedule::due::<CockroachPoker>(&out.state, T0 + 19_000, &presence),
        Some((Actor::Player(holder), timeout()))
    );
    for (secs, ms) in [(30, 30_000), (60, 60_000)] {
        let s = setup(3, 1, CockroachOptions { turn_seconds: secs, ..opts() });
        assert_eq!(CockroachPoker::deadline(&s), Some(T0 + ms));
    }
}

/// §8.5: a player away for 90 s or more is timed out as soon as it is their turn, also
/// when they are chosen as the receiver.
#[test]
fn players_away_90_seconds_are_timed_out_at_once() {
    assert_eq!(CockroachPoker::disconnect_grace_ms(&four()), Some(90_000));
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Fly)); // deadline AT + 30 s
    let long_away = BTreeMap::from([(pid("b"), AT - 95_000)]);
    let presence = Presence { disconnected_since: &long_away, room_grace_ms: 60_000, hold_until: i64::MIN };
    assert_eq!(schedule::due::<CockroachPoker>(&s, AT, &presence), Some((Actor::Player(pid("b")), timeout())));
    // Away 70 s: more than the room's 60 s grace, but the game's 90 s applies.
    let short_away = BTreeMap::from([(pid("b"), AT - 70_000)]);
    let presence = Presence { disconnected_since: &short_away, room_grace_ms: 60_000, hold_until: i64::MIN };
    assert_eq!(schedule::due::<CockroachPoker>(&s, AT, &presence), None);
    assert_eq!(schedule::next_wake::<CockroachPoker>(&s, &presence), Some(AT + 20_000));
    // Someone away who is not active is not timed out.
    let c_away = BTreeMap::from([(pid("c"), AT - 200_000)]);
    let presence = Presence { disconnected_since: &c_away, room_grace_ms: 60_000, hold_until: i64::MIN };
    assert_eq!(schedule::due::<CockroachPoker>(&s, AT, &presence), None);
}

/// §10: hidden information never leaks: the card in flight (to unseen holders, other
/// players and spectators), other hands, and the 2-player removed cards during play.
#[test]
fn checklist_hidden_information_does_not_leak() {
    let s = act(&four(), "a", offer(c(Spider, 0), "b", Fly));
    let spider = json!({"id": c(Spider, 0), "kind": "spider"});
    for viewer in [Some("b"), Some("c"), Some("d"), None] {
        let v = view_json(&s, viewer);
        assert_eq!(v["card"], Value::Null, "{viewer:?} must not see the card");
        assert_eq!(v["hands"], Value::Null);
        assert!(!v.to_string().contains(&spider.to_string()), "{viewer:?}");
        let secrets = CockroachPoker::secrets_of(&s, viewer.map(pid).as_ref());
        assert!(secrets.contains(&Secret::Card(c(Spider, 0))));
        assert!(secrets.contains(&Secret::Value(spider.clone())));
        assert!(find_leaks(&v, &secrets).is_empty(), "{viewer:?}: {:?}", find_leaks(&v, &secrets));
    }
    // The starter sees it; the leak checker would catch it in anyone else's view.
    let a_view = view_json(&s, Some("a"));
    assert_eq!(a_view["card"], spider);
    assert!(!find_leaks(&a_view, &CockroachPoker::secrets_of(&s, Some(&pid("b")))).is_empty());
    // Own hand only; the others as counts.
    let b_view = view_json(&s, Some("b"));
    assert_eq!(b_view["hand"].as_array().unwrap().len(), 4);
    assert_eq!(b_view["handCounts"]["a"], 3);
    assert_eq!(view_json(&s, None)["hand"], Value::Null);
    // The offer event tells from, to and claim only.
    let out = applied(&four(), "a", Input::Client(offer(c(Spider, 0), "b", Fly)), 1);
    assert_eq!(
        serde_json::to_value(&out.events).unwrap(),
        json!([{"type": "offered", "from": "a", "to": "b", "claim": "fly"}])
    );

    // After b peeks, b sees it and c still does not.
    let s = act(&s, "b", PEEK);
    assert_eq!(view_json(&s, Some("b"))["card"], spider);
    assert_eq!(view_json(&s, Some("c"))["card"], Value::Null);
    assert_eq!(view_json(&s, Some("c"))["seen"], json!(["a", "b"]));

    // 2 players: the removed cards are a count during play, shown once it is over.
    let s = setup(2, 5, opts());
    for viewer in [Some(s.order[0].as_str()), None] {
        let v = view_json(&s, viewer);
        assert_eq!(v["removedCount"], 10);
        assert_eq!(v["removed"], Value::Null);
        let secrets = CockroachPoker::secrets_of(&s, viewer.map(pid).as_ref());
        for id in &s.removed {
            assert!(secrets.contains(&Secret::Card(*id)));
        }
        assert!(find_leaks(&v, &secrets).is_empty());
    }
}

/// §8.3: once the game is over every hand and the removed cards are revealed.
#[test]
fn everything_is_revealed_when_the_game_is_over() {
    let s = two_players(4);
    let s = act(&act(&s, "a", offer(c(Rat, 0), "b", Rat)), "b", call(false));
    assert!(s.is_over());
    let v = view_json(&s, None);
    assert_eq!(v["removed"].as_array().unwrap().len(), s.removed.len());
    assert_eq!(v["hands"]["a"], json!([{"id": c(Fly, 0), "kind": "fly"}, {"id": c(Fly, 1), "kind": "fly"}]));
    assert!(CockroachPoker::secrets_of(&s, None).is_empty());
    assert_eq!(v["deadline"], Value::Null);
    assert_eq!(v["loser"], "b");
    assert_eq!(v["lossReason"], "four");
}

/// Plays a whole game from `seed` with random legal inputs and random timeouts and
/// returns the log and every state.
#[allow(clippy::type_complexity)]
fn random_game(n: usize, seed: u128) -> (Vec<(Actor, CockroachInput, Ctx)>, Vec<CockroachState>, Vec<CockroachEvent>) {
    let mut choose = Rng::from_seed(Seed(seed ^ 0xabc));
    let mut rng = Rng::from_seed(Seed(seed));
    let ps = players(n);
    let mut s =
        CockroachPoker::setup(SetupCtx { players: &ps, options: &opts(), now: T0, game_no: None }, &mut rng).unwrap();
    let (mut log, mut states, mut events) = (Vec::new(), vec![s.clone()], Vec::new());
    let mut now = T0;
    while !s.is_over() {
        now += 700;
        let p = s.active().unwrap().clone();
        let input = if choose.chance(0.1) { timeout() } else { choose.pick(&legal_actions(&s, &p)).unwrap().clone() };
        let ctx = Ctx::at(now);
        let out = CockroachPoker::apply(&s, &Actor::Player(p.clone()), &input, &ctx, &mut rng).unwrap();
        log.push((Actor::Player(p), input, ctx));
        events.extend(out.events);
        s = out.state;
        states.push(s.clone());
    }
    (log, states, events)
}

/// §10: the same seed and the same action log give the same game.
#[test]
fn checklist_same_seed_and_log_replay_identically() {
    for (n, seed) in [(2, 1), (4, 2), (6, 3)] {
        let (log, states, events) = random_game(n, seed);
        let mut rng = Rng::from_seed(Seed(seed));
        let ps = players(n);
        let mut s =
            CockroachPoker::setup(SetupCtx { players: &ps, options: &opts(), now: T0, game_no: None }, &mut rng)
                .unwrap();
        assert_eq!(s, states[0]);
        let mut replayed = Vec::new();
        for (i, (actor, input, ctx)) in log.iter().enumerate() {
            let out = CockroachPoker::apply(&s, actor, input, ctx, &mut rng).unwrap();
            s = out.state;
            replayed.extend(out.events);
            assert_eq!(s, states[i + 1], "step {i}");
        }
        assert_eq!(replayed, events);
        assert_eq!(CockroachPoker::result(&s), CockroachPoker::result(states.last().unwrap()));
        assert!(CockroachPoker::result(&s).is_some());
        // Another seed deals differently.
        assert_ne!(states[0], random_game(n, seed + 100).1[0]);
    }
}
