//! The spec's §10 checklist on tables laid out by hand with the helpers of `mod.rs`.

use super::*;

// ---------------------------------------------------------------- §10: deck and deal

#[test]
fn deck_has_56_cards_14_per_fruit_counts_5_3_3_2_1() {
    let faces: Vec<_> = (0..DECK_SIZE).map(|id| face(id).unwrap()).collect();
    assert_eq!(faces.len(), 56);
    assert!(face(56).is_none());
    for fruit in [S, B, L, P] {
        let of: Vec<_> = faces.iter().filter(|f| f.fruit == fruit).collect();
        assert_eq!(of.len(), 14, "{fruit:?}");
        let per_count: Vec<usize> = (1..=5).map(|c| of.iter().filter(|f| f.count == c).count()).collect();
        assert_eq!(per_count, [5, 3, 3, 2, 1], "{fruit:?}");
        assert_eq!(of.iter().map(|f| u32::from(f.count)).sum::<u32>(), 33);
    }
    // The id alone decides the face.
    assert_eq!(face(0).unwrap(), cards::Face { fruit: S, count: 1 });
    assert_eq!(face(13).unwrap(), cards::Face { fruit: S, count: 5 });
    assert_eq!(face(14 + 11).unwrap(), cards::Face { fruit: B, count: 4 });
    assert_eq!(face(55).unwrap(), cards::Face { fruit: P, count: 5 });
}

#[test]
fn deal_per_player_and_leftovers_match_the_table_with_pot_or_remove() {
    for (n, per, left) in [(2, 28, 0), (3, 18, 2), (4, 14, 0), (5, 11, 1), (6, 9, 2)] {
        let pot = start(n, &HalliGalliOptions::default(), 7);
        assert!(pot.decks.values().all(|d| d.len() == per), "{n} players");
        assert_eq!((pot.pot.len(), pot.removed.len()), (left, 0), "{n} players, pot");
        rules::check_cards(&pot).unwrap();
        let removed = start(n, &HalliGalliOptions { leftover_cards: LeftoverCards::Remove, ..Default::default() }, 7);
        assert!(removed.decks.values().all(|d| d.len() == per));
        assert_eq!((removed.pot.len(), removed.removed.len()), (0, left), "{n} players, remove");
        rules::check_cards(&removed).unwrap();
    }
}

#[test]
fn setup_shuffles_seats_and_first_player_by_seed_and_counts_down_3_seconds() {
    let a = start(4, &HalliGalliOptions::default(), 1);
    assert_eq!(a, start(4, &HalliGalliOptions::default(), 1));
    let orders: Vec<_> = (0..20).map(|seed| start(4, &HalliGalliOptions::default(), seed).order).collect();
    assert!(orders.iter().any(|o| o != &orders[0]), "seats never change with the seed");
    let firsts: Vec<_> = (0..20).map(|seed| start(4, &HalliGalliOptions::default(), seed).turn).collect();
    assert!(firsts.iter().any(|f| f != &firsts[0]), "first player never changes with the seed");
    assert_eq!(a.phase, Phase::Countdown);
    assert_eq!(HalliGalli::deadline(&a), Some(T0 + 3000));
    assert!(HalliGalli::timeout_players(&a).is_empty());
    assert_eq!(a.ends_at, Some(T0 + 3000 + 10 * 60_000));
    // Nothing may be done during the countdown.
    let first = a.turn.clone();
    let err = try_act(&a, Actor::Player(first.clone()), Input::Client(HalliGalliAction::Flip {}), T0 + 10, None);
    assert_eq!(code(err.unwrap_err()), "not_started");
    let err = try_act(&a, Actor::Player(first.clone()), Input::Client(HalliGalliAction::Ring { version: 0 }), T0, None);
    assert_eq!(code(err.unwrap_err()), "not_started");
    assert!(HalliGalli::tick(&a, T0 + 2999).is_none());
    // The tick at the end starts the game with the first player's turn.
    let started = run_timer(&a, T0 + 3000);
    assert_eq!(started.state.phase, Phase::Playing);
    assert_eq!(started.state.turn, first);
    assert_eq!(started.state.turn_deadline, T0 + 3000 + 3000);
    assert!(started.events.contains(&HalliGalliEvent::Started { turn: first }));
}

#[test]
fn setup_refuses_bad_player_counts() {
    for n in [1, 7] {
        let ps: Vec<PlayerId> = (1..=n).map(|i| PlayerId::new(format!("p{i}"))).collect();
        let err = HalliGalli::setup(
            SetupCtx { players: &ps, options: &HalliGalliOptions::default(), now: 0, game_no: None },
            &mut Rng::from_seed(Seed(1)),
        );
        assert_eq!(err, Err(EngineError::PlayerCount { got: n, min: 2, max: 6 }));
    }
}

// ---------------------------------------------------------------- §10: judging

#[test]
fn strawberry_2_plus_3_is_correct() {
    let (s, _) = tops(no_limit(), &[Some((S, 2)), Some((S, 3)), None]);
    assert_eq!(s.five_fruit(), Some(S));
    let after = ring(&s, "c", T0 + 10);
    assert_eq!(after.correct_count[&pid("c")], 1);
    assert_eq!(after.last_bell.as_ref().map(|b| (b.correct, b.fruit)), Some((true, Some(S))));
}

#[test]
fn strawberry_2_plus_3_plus_1_is_six_and_wrong() {
    let (s, _) = tops(no_limit(), &[Some((S, 2)), Some((S, 3)), Some((S, 1))]);
    assert_eq!(s.five_fruit(), None);
    let after = ring(&s, "c", T0 + 10);
    assert_eq!(after.wrong_count[&pid("c")], 1);
    assert_eq!(after.last_bell.as_ref().map(|b| b.correct), Some(false));
    // Four is not five either.
    let (s, _) = tops(no_limit(), &[Some((S, 2)), Some((S, 2)), None]);
    assert_eq!(s.five_fruit(), None);
}

#[test]
fn other_fruits_mixed_in_still_correct_when_one_fruit_is_exactly_five() {
    let (s, _) = tops(no_limit(), &[Some((S, 2)), Some((S, 3)), Some((B, 4))]);
    assert_eq!(s.five_fruit(), Some(S));
    let (s, _) = tops(no_limit(), &[Some((L, 1)), Some((P, 5)), Some((B, 4)), Some((L, 3))]);
    assert_eq!(s.five_fruit(), Some(P));
}

#[test]
fn eliminated_players_face_up_top_still_counts() {
    let (mut s, _) = tops(no_limit(), &[Some((B, 3)), Some((S, 1)), Some((B, 2))]);
    s.active.retain(|p| p != &pid("c"));
    s.eliminated.push(pid("c"));
    assert_eq!(s.five_fruit(), Some(B));
    let after = ring(&s, "b", T0 + 10);
    assert_eq!(after.last_bell.as_ref().map(|b| b.correct), Some(true));
    assert!(after.face_up[&pid("c")].is_empty(), "the eliminated player's pile is collected too");
    // An eliminated player cannot ring.
    assert_eq!(code(ring_v(&s, "c", s.table_version, T0).unwrap_err()), "eliminated");
}

// ---------------------------------------------------------------- §10: collection

#[test]
fn collection_takes_seat_order_piles_bottom_first_then_pot_and_winner_flips_next() {
    let mut pool = Pool::default();
    let a_pile = vec![pool.card(L, 1), pool.card(S, 2)];
    let b_pile = vec![pool.card(P, 1), pool.card(P, 2), pool.card(S, 3)];
    let c_pile = vec![pool.card(L, 2)];
    let pot = vec![pool.card(L, 3), pool.card(L, 4)];
    let decks = vec![pool.filler(3), pool.filler(3), pool.filler(3)];
    let c_deck = decks[2].clone();
    let s = table(
        no_limit(),
        &["a", "b", "c"],
        decks,
        vec![a_pile.clone(), b_pile.clone(), c_pile.clone()],
        pot.clone(),
        "a",
    );
    let applied =
        try_act(&s, Actor::Player(pid("c")), Input::Client(HalliGalliAction::Ring { version: 0 }), T0 + 5, None)
            .unwrap();
    let after = applied.state;
    // Card by card under c's deck: a's pile bottom first, then b's, then c's, the pot last
    // (so the pot's last card is now at the very bottom).
    let mut taken: Vec<u32> = a_pile.iter().chain(&b_pile).chain(&c_pile).chain(&pot).copied().collect();
    taken.reverse();
    let expected: Vec<u32> = taken.into_iter().chain(c_deck).collect();
    assert_eq!(deck(&after, "c"), expected);
    assert!(after.face_up.values().all(Vec::is_empty));
    assert!(after.pot.is_empty());
    assert_eq!(after.turn, pid("c"));
    assert_eq!(after.table_version, 1);
    assert_eq!(after.turn_deadline, T0 + 5 + 3000);
    assert!(applied.events.contains(&HalliGalliEvent::Collected { player: pid("c"), taken: 8, table_version: 1 }));
    // The same table always collects the same way.
    let again = ring(&s, "c", T0 + 5);
    assert_eq!(again, after);
}

#[test]
fn simultaneous_correct_rings_second_is_late_without_penalty() {
    let (s, _) = tops(no_limit(), &[Some((S, 2)), Some((S, 3)), None]);
    let first = ring_v(&s, "b", 0, T0 + 100).unwrap();
    let before = deck(&first, "c").len();
    let err = ring_v(&first, "c", 0, T0 + 100).unwrap_err();
    assert_eq!((err.code(), err.reason().as_ref()), ("late", "늦었어요"));
    // Refused: nothing changed, no penalty, no lock.
    assert_eq!(deck(&first, "c").len(), before);
    assert_eq!(first.wrong_count[&pid("c")], 0);
    assert_eq!(first.correct_count[&pid("b")], 1);
}

// ---------------------------------------------------------------- §10: wrong rings

#[test]
fn wrong_ring_with_two_cards_in_four_player_game_eliminates() {
    let mut pool = Pool::default();
    let b_deck = vec![pool.card(P, 1), pool.card(P, 2)];
    let decks = vec![pool.filler(4), b_deck.clone(), pool.filler(4), pool.filler(4)];
    let s = table(no_limit(), &["a", "b", "c", "d"], decks, vec![vec![], vec![], vec![], vec![]], vec![], "a");
    let applied =
        try_act(&s, Actor::Player(pid("b")), Input::Client(HalliGalliAction::Ring { version: 0 }), T0, None).unwrap();
    let after = applied.state;
    // Clockwise from b: c gets the top card, d the next; a gets nothing.
    assert_eq!(deck(&after, "c")[0], b_deck[1]);
    assert_eq!(deck(&after, "d")[0], b_deck[0]);
    assert_eq!(deck(&after, "a").len(), 4);
    assert!(deck(&after, "b").is_empty());
    assert!(!after.is_active(&pid("b")));
    assert_eq!(after.eliminated, vec![pid("b")]);
    assert!(applied.events.contains(&HalliGalliEvent::Eliminated { player: pid("b"), reason: OutReason::CouldNotPay }));
    assert_eq!(after.turn, pid("a"), "the turn does not change");
}

#[test]
fn wrong_ring_paying_exactly_to_zero_stays_until_their_turn() {
    let mut pool = Pool::default();
    let decks = vec![pool.filler(4), pool.filler(3), pool.filler(4), pool.filler(4)];
    let s = table(no_limit(), &["a", "b", "c", "d"], decks, vec![vec![], vec![], vec![], vec![]], vec![], "a");
    let after = ring(&s, "b", T0);
    assert!(deck(&after, "b").is_empty());
    assert!(after.is_active(&pid("b")), "paid in full: still in");
    assert_eq!([deck(&after, "a").len(), deck(&after, "c").len(), deck(&after, "d").len()], [5, 5, 5]);
    // a flips, and b's turn comes with an empty deck: b is out, c flips next.
    let applied = flip(&after, "a", T0 + 1000);
    assert!(!applied.state.is_active(&pid("b")));
    assert_eq!(applied.state.turn, pid("c"));
    assert!(applied.events.contains(&HalliGalliEvent::Eliminated { player: pid("b"), reason: OutReason::EmptyDeck }));
}

#[test]
fn wrong_ring_locks_the_bell_and_rings_while_locked_are_refused_without_penalty() {
    let (s, _) = tops(no_limit(), &[Some((S, 1)), None, None]);
    let after = ring(&s, "a", T0);
    assert_eq!(after.locked_until[&pid("a")], T0 + 1000);
    let err = ring_v(&after, "a", after.table_version, T0 + 999).unwrap_err();
    assert_eq!((err.code(), err.reason().as_ref()), ("locked", "종이 잠겨 있어요"));
    assert!(!HalliGalli::legal_actions(&after, &pid("a"), T0 + 999)
        .iter()
        .any(|i| matches!(i, Input::Client(HalliGalliAction::Ring { .. }))));
    let again = ring(&after, "a", T0 + 1000);
    assert_eq!(again.wrong_count[&pid("a")], 2);
}

// ---------------------------------------------------------------- §10: empty decks

#[test]
fn empty_deck_player_rings_correctly_before_turn_and_keeps_playing_then_empty_at_turn_is_out() {
    let mut pool = Pool::default();
    let piles = vec![vec![pool.card(B, 3)], vec![pool.card(B, 2)], vec![]];
    let decks = vec![pool.filler(3), pool.filler(3), vec![]];
    let s = table(no_limit(), &["a", "b", "c"], decks, piles, vec![], "a");
    assert!(s.is_active(&pid("c")));
    let after = ring(&s, "c", T0);
    assert_eq!(deck(&after, "c").len(), 2);
    assert!(after.is_active(&pid("c")));
    assert_eq!(after.turn, pid("c"));

    // With an empty deck, c's turn coming means c is out; the pile stays on the table.
    let mut pool = Pool::default();
    let piles = vec![vec![], vec![], vec![pool.card(L, 1)]];
    let decks = vec![pool.filler(3), pool.filler(3), vec![]];
    let s = table(no_limit(), &["a", "b", "c"], decks, piles, vec![], "b");
    let applied = flip(&s, "b", T0 + 1000);
    assert_eq!(applied.state.eliminated, vec![pid("c")]);
    assert_eq!(applied.state.turn, pid("a"));
    assert_eq!(applied.state.face_up[&pid("c")].len(), 1, "the pile stays and still counts");
    // An empty-deck player ringing wrong has nothing to give and is out at once.
    let decks = vec![pool.filler(3), pool.filler(3), vec![]];
    let s = table(no_limit(), &["a", "b", "c"], decks, vec![vec![], vec![], vec![]], vec![], "a");
    let after = ring(&s, "c", T0);
    assert_eq!(after.eliminated, vec![pid("c")]);
}

// ---------------------------------------------------------------- §10: flip guard

#[test]
fn flip_during_guard_is_reserved_and_runs_at_guard_end_bumping_version_once() {
    let mut pool = Pool::default();
    let decks = vec![pool.filler(3), pool.filler(3), pool.filler(3)];
    let s = table(no_limit(), &["a", "b", "c"], decks, vec![vec![], vec![], vec![]], vec![], "a");
    let s1 = flip(&s, "a", T0).state;
    assert_eq!((s1.table_version, s1.flip_allowed_at, s1.turn.clone()), (1, T0 + 600, pid("b")));
    // b flips 200 ms later: reserved, the table does not change.
    let reserved = flip(&s1, "b", T0 + 200);
    assert_eq!(reserved.state.pending_flip, Some(pid("b")));
    assert_eq!(reserved.state.table_version, 1);
    assert!(reserved.events.contains(&HalliGalliEvent::FlipReserved { player: pid("b"), at: T0 + 600 }));
    assert_eq!(HalliGalli::deadline(&reserved.state), Some(T0 + 600));
    assert!(HalliGalli::timeout_players(&reserved.state).is_empty());
    let err =
        try_act(&reserved.state, Actor::Player(pid("b")), Input::Client(HalliGalliAction::Flip {}), T0 + 300, None);
    assert_eq!(code(err.unwrap_err()), "already_reserved");
    // A ring in the meantime quotes version 1 and is still judged on that table.
    assert!(ring_v(&reserved.state, "c", 1, T0 + 300).is_ok());
    // The tick at the guard's end runs the flip: version 2, not 3.
    assert!(HalliGalli::tick(&reserved.state, T0 + 599).is_none());
    let ran = run_timer(&reserved.state, T0 + 600);
    assert_eq!(ran.state.table_version, 2);
    assert_eq!(ran.state.face_up[&pid("b")].len(), 1);
    assert_eq!(ran.state.pending_flip, None);
    assert_eq!(ran.state.turn, pid("c"));
    assert_eq!(ran.events.iter().filter(|e| matches!(e, HalliGalliEvent::Flipped { .. })).count(), 1);
    // After the guard a flip goes through at once.
    let direct = flip(&s1, "b", T0 + 600);
    assert_eq!(direct.state.table_version, 2);
}

// ---------------------------------------------------------------- §10: timeouts

#[test]
fn flip_timeout_flips_automatically() {
    let mut pool = Pool::default();
    let decks = vec![pool.filler(3), pool.filler(3)];
    let s = table(no_limit(), &["a", "b"], decks, vec![vec![], vec![]], vec![], "a");
    assert_eq!(HalliGalli::deadline(&s), Some(T0 + 3000));
    let empty = BTreeMap::new();
    assert!(schedule::due::<HalliGalli>(&s, T0 + 2999, &Presence::all_connected(&empty)).is_none());
    let applied = run_timer(&s, T0 + 3000);
    assert_eq!(applied.state.face_up[&pid("a")].len(), 1);
    assert_eq!(applied.state.turn, pid("b"));
    assert!(matches!(applied.events[0], HalliGalliEvent::Flipped { auto: true, .. }));
    assert_eq!(applied.state.turn_deadline, T0 + 6000);
}

#[test]
fn disconnected_player_keeps_being_auto_flipped_and_after_60s_within_1s() {
    let mut away = BTreeMap::new();
    away.insert(pid("a"), T0);
    let presence = Presence { disconnected_since: &away, room_grace_ms: 60_000, hold_until: i64::MIN };
    let mut pool = Pool::default();
    let mut s =
        table(no_limit(), &["a", "b"], vec![pool.filler(25), pool.filler(25)], vec![vec![], vec![]], vec![], "a");
    let mut now = T0;
    let mut server_flips = Vec::new(); // (a's turn start, when the server flipped for a)
    while now < T0 + 70_000 {
        assert_eq!(s.phase, Phase::Playing);
        if s.turn == pid("a") {
            let wake = schedule::next_wake::<HalliGalli>(&s, &presence).unwrap();
            let (actor, input) = schedule::due::<HalliGalli>(&s, wake, &presence).unwrap();
            server_flips.push((s.turn_started_at, wake));
            now = wake;
            s = try_act(&s, actor, input, now, None).unwrap().state;
        } else {
            // b is connected and flips as soon as the guard allows.
            now = now.max(s.flip_allowed_at);
            s = flip(&s, "b", now).state;
        }
    }
    assert!(server_flips.len() > 18, "{server_flips:?}");
    for (started, at) in &server_flips {
        if started + 3000 <= T0 + 60_000 {
            assert_eq!(*at, started + 3000, "before 60 s away: the normal flip deadline");
        } else {
            assert_eq!(*at, (T0 + 60_000).max(started + 1000), "after 60 s away: 1 s per flip");
        }
    }
    assert!(server_flips.iter().filter(|(st, at)| at - st == 1000).count() >= 3);
    // Directly: a's turn starting at T0 + 70 s is flipped at + 1 s through on_timeout.
    let mut pool = Pool::default();
    let decks = vec![pool.filler(3), pool.filler(3)];
    let mut s = table(no_limit(), &["a", "b"], decks, vec![vec![], vec![]], vec![], "a");
    s.turn_started_at = T0 + 70_000;
    s.turn_deadline = T0 + 73_000;
    assert_eq!(HalliGalli::timeout_not_before(&s), Some(T0 + 71_000));
    assert_eq!(schedule::next_wake::<HalliGalli>(&s, &presence), Some(T0 + 71_000));
    let (actor, input) = schedule::due::<HalliGalli>(&s, T0 + 71_000, &presence).unwrap();
    assert_eq!(
        (actor.clone(), input.clone()),
        (Actor::Player(pid("a")), Input::System(HalliGalliSystem::TimeoutFlip {}))
    );
    let after = try_act(&s, actor, input, T0 + 71_000, None).unwrap().state;
    assert_eq!(after.face_up[&pid("a")].len(), 1);
    // A connected player is never flipped early: the 3 s deadline applies.
    let empty = BTreeMap::new();
    assert_eq!(schedule::next_wake::<HalliGalli>(&s, &Presence::all_connected(&empty)), Some(T0 + 73_000));
    // The timeout flip is for the turn player only.
    let err = try_act(&s, Actor::Player(pid("b")), Input::System(HalliGalliSystem::TimeoutFlip {}), T0 + 71_000, None);
    assert_eq!(code(err.unwrap_err()), "not_your_turn");
}

// ---------------------------------------------------------------- §10: official end

#[test]
fn official_three_down_to_two_ends_at_the_first_correct_ring() {
    let mut pool = Pool::default();
    // c has no deck and its turn comes: 3 -> 2 players, the game goes on.
    let piles = vec![vec![pool.card(S, 2)], vec![], vec![pool.card(L, 1)]];
    let decks = vec![pool.filler(5), pool.filler(5), vec![]];
    let s = table(official(), &["a", "b", "c"], decks, piles, vec![], "b");
    let s = flip(&s, "b", T0).state;
    assert_eq!(s.active, seats(&["a", "b"]));
    assert_eq!(s.phase, Phase::Playing);
    assert!(s.official_final());
    // A wrong ring would end it too, so first make the table correct: b's flip showed a
    // card; force a known table for the correct ring.
    let mut s2 = s.clone();
    let straw3 = pool.card(S, 3);
    let b_top = s2.face_up.get_mut(&pid("b")).unwrap().pop().unwrap();
    s2.removed.retain(|c| *c != straw3);
    s2.removed.push(b_top);
    s2.face_up.get_mut(&pid("b")).unwrap().push(straw3);
    assert_eq!(s2.five_fruit(), Some(S));
    let done = ring(&s2, "a", T0 + 700);
    assert_eq!(done.phase, Phase::Ended);
    let result = HalliGalli::result(&done).unwrap();
    assert_eq!(result.details["endReason"], "official");
    assert_eq!(result.ranking, vec![vec![pid("a")], vec![pid("b")], vec![pid("c")]]);
}

#[test]
fn official_wrong_ring_with_two_left_hands_the_table_to_the_other_and_ends() {
    let mut pool = Pool::default();
    let piles = vec![vec![pool.card(S, 1)], vec![pool.card(B, 1)], vec![pool.card(L, 1)]];
    let decks = vec![pool.filler(5), pool.filler(5), vec![]];
    let mut s = table(official(), &["a", "b", "c"], decks, piles, vec![], "a");
    s.active = seats(&["a", "b"]);
    s.eliminated = seats(&["c"]);
    let a_deck = deck(&s, "a").len();
    let done = ring(&s, "b", T0);
    assert_eq!(done.phase, Phase::Ended);
    assert_eq!(deck(&done, "a").len(), a_deck + 3, "a took all three face-up cards");
    assert_eq!(deck(&done, "b").len(), 5, "no other penalty");
    let result = HalliGalli::result(&done).unwrap();
    assert_eq!(result.details["endReason"], "official");
    assert_eq!(result.ranking[0], vec![pid("a")]);
}

#[test]
fn official_with_two_players_from_the_start_plays_as_last_standing() {
    let (s, _) = tops(official(), &[Some((S, 2)), Some((S, 3))]);
    assert!(!s.official_final());
    let after = ring(&s, "a", T0);
    assert_eq!(after.phase, Phase::Playing, "a correct ring does not end a 2-player game");
    let (s, _) = tops(official(), &[Some((S, 2)), Some((S, 2))]);
    let after = ring(&s, "a", T0);
    assert_eq!(after.phase, Phase::Playing, "nor does a wrong one");
    assert_eq!(deck(&after, "b").len(), 6);
}

#[test]
fn last_standing_ends_when_one_player_is_left() {
    let mut pool = Pool::default();
    let decks = vec![pool.filler(1), pool.filler(3)];
    let s = table(no_limit(), &["a", "b"], decks, vec![vec![], vec![]], vec![], "b");
    let s = flip(&s, "b", T0).state; // a's turn, one card
    let s = flip(&s, "a", T0 + 1000).state; // b's turn
    let s = flip(&s, "b", T0 + 2000).state; // a's turn with no deck: a is out
    assert_eq!(s.phase, Phase::Ended);
    let result = HalliGalli::result(&s).unwrap();
    assert_eq!(result.details["endReason"], "lastStanding");
    assert_eq!(result.ranking, vec![vec![pid("b")], vec![pid("a")]]);
    assert!(result.summary.contains("b님"));
}

// ---------------------------------------------------------------- §10: time limit

#[test]
fn time_limit_ranks_by_deck_plus_own_pile_then_correct_rings_then_shared() {
    let options = HalliGalliOptions { time_limit_min: Some(5), ..HalliGalliOptions::default() };
    let mut pool = Pool::default();
    // a: 4 + 2 = 6, b: 5 + 1 = 6, c: 6 + 0 = 6, d: 2 + 1 = 3 (pot 3 is nobody's).
    let decks = vec![pool.filler(4), pool.filler(5), pool.filler(6), pool.filler(2)];
    let piles = vec![pool.filler(2), pool.filler(1), vec![], pool.filler(1)];
    let pot = pool.filler(3);
    let mut s = table(options, &["a", "b", "c", "d"], decks, piles, pot, "a");
    s.correct_count.insert(pid("a"), 2);
    s.correct_count.insert(pid("b"), 1);
    s.correct_count.insert(pid("c"), 2);
    assert_eq!(s.ends_at, Some(T0 + 5 * 60_000));
    s.turn_deadline = T0 + 10 * 60_000; // nobody flips in between
    assert_eq!(HalliGalli::deadline(&s), Some(T0 + 300_000));
    let applied = run_timer(&s, T0 + 300_000);
    let done = applied.state;
    assert!(applied.events.contains(&HalliGalliEvent::Ended { reason: EndReason::TimeLimit }));
    let result = HalliGalli::result(&done).unwrap();
    assert_eq!(result.ranking, vec![seats(&["a", "c"]), seats(&["b"]), seats(&["d"])]);
    assert_eq!(result.details["endReason"], "timeLimit");
    let rows = result.details["ranking"].as_array().unwrap();
    assert_eq!(rows[0], json!({"rank": 1, "id": "a", "cards": 6, "correct": 2, "wrong": 0}));
    assert_eq!(rows[2]["rank"], 3);
    assert_eq!(rows[3], json!({"rank": 4, "id": "d", "cards": 3, "correct": 0, "wrong": 0}));
    let scores = result.scores.unwrap();
    assert_eq!((scores[&pid("a")], scores[&pid("c")], scores[&pid("b")], scores[&pid("d")]), (3, 3, 1, 0));
    assert_eq!(result.summary, "시간 종료! a님, c님 공동 우승!");
    assert!(HalliGalli::active_players(&done).is_empty());
    assert!(HalliGalli::deadline(&done).is_none());
}

#[test]
fn scores_are_3_2_1_by_place() {
    let mut pool = Pool::default();
    let decks = vec![pool.filler(9), pool.filler(6), pool.filler(3), pool.filler(1)];
    let mut s = table(
        HalliGalliOptions { time_limit_min: Some(5), ..Default::default() },
        &["a", "b", "c", "d"],
        decks,
        vec![vec![]; 4],
        vec![],
        "a",
    );
    s.turn_deadline = T0 + 10 * 60_000;
    let done = run_timer(&s, T0 + 300_000).state;
    let result = HalliGalli::result(&done).unwrap();
    let scores = result.scores.unwrap();
    assert_eq!([scores[&pid("a")], scores[&pid("b")], scores[&pid("c")], scores[&pid("d")]], [3, 2, 1, 0]);
    assert_eq!(result.summary, "시간 종료! a님이 9장으로 우승!");
}

// ---------------------------------------------------------------- §10: leaks

#[test]
fn views_and_events_never_carry_deck_pot_or_hidden_card_contents() {
    let mut pool = Pool::default();
    let piles = vec![vec![pool.card(S, 1), pool.card(S, 2)], vec![pool.card(B, 2)], vec![]];
    let decks = vec![pool.filler(4), pool.filler(4), pool.filler(4)];
    let pot = pool.filler(2);
    let s = table(no_limit(), &["a", "b", "c"], decks, piles, pot, "a");
    let secrets = HalliGalli::secrets_of(&s, Some(&pid("a")));
    // Own deck included; tops excluded.
    for c in deck(&s, "a").iter().chain(&s.pot).chain(&s.face_up[&pid("a")][..1]) {
        assert!(secrets.contains(&Secret::Card(*c)), "card {c} not secret");
    }
    assert!(!secrets.contains(&Secret::Card(s.face_up[&pid("b")][0])));
    let mut rtt = BTreeMap::new();
    rtt.insert(pid("a"), 250);
    for viewer in [Some(pid("a")), Some(pid("b")), None] {
        let v =
            serde_json::to_value(HalliGalli::view(&s, viewer.as_ref(), &ViewCtx { now: T0, rtt: Some(&rtt) })).unwrap();
        assert!(find_leaks(&v, &HalliGalli::secrets_of(&s, viewer.as_ref())).is_empty());
        // No card id at all: tops are faces only; no deck arrays.
        assert_eq!(v["players"]["a"]["top"], json!({"fruit": "strawberry", "count": 2}));
        assert_eq!(v["players"]["a"]["deck"], 4);
        assert_eq!(v["pot"], 2);
        let text = v.to_string();
        assert!(!text.contains("\"id\"") && !text.contains("cardId") && !text.contains("decks"), "{text}");
    }
    // Events after a flip, a collection and a penalty carry no hidden card.
    let flipped = flip(&s, "a", T0);
    let rung = try_act(
        &flipped.state,
        Actor::Player(pid("b")),
        Input::Client(HalliGalliAction::Ring { version: 1 }),
        T0 + 10,
        None,
    )
    .unwrap();
    for applied in [&flipped, &rung] {
        let ev = serde_json::to_value(&applied.events).unwrap();
        for viewer in [Some(pid("a")), Some(pid("c")), None] {
            assert!(find_leaks(&ev, &HalliGalli::secrets_of(&applied.state, viewer.as_ref())).is_empty());
        }
        assert!(!ev.to_string().contains("\"id\""));
    }
}

// ---------------------------------------------------------------- §10: replay

#[test]
fn same_seed_and_log_with_server_ts_replay_identically() {
    let options = HalliGalliOptions { latency_comp: LatencyComp::Light, ..HalliGalliOptions::default() };
    let play = || {
        let mut rng = Rng::from_seed(Seed(42));
        let mut s = start(4, &options, 42);
        let mut log = Vec::new();
        let mut chooser = Rng::from_seed(Seed(9));
        let mut now = T0;
        while HalliGalli::result(&s).is_none() && log.len() < 3000 {
            now += i64::from(chooser.int(400));
            let (actor, input, rtt) = match HalliGalli::tick(&s, now) {
                Some(sys) => (Actor::Server, Input::System(sys), None),
                None => {
                    let p = s.order[chooser.index(s.order.len())].clone();
                    let legal = HalliGalli::legal_actions(&s, &p, now);
                    let Some(input) = chooser.pick(&legal).cloned() else { continue };
                    (Actor::Player(p), input, Some(chooser.int(300)))
                }
            };
            let ctx = Ctx { now, rtt_ms: rtt };
            let applied = HalliGalli::apply(&s, &actor, &input, &ctx, &mut rng).unwrap();
            log.push((actor, input, ctx, applied.events.clone()));
            s = applied.state;
        }
        (s, log)
    };
    let (end_a, log_a) = play();
    let (end_b, log_b) = play();
    assert_eq!(end_a, end_b);
    assert_eq!(log_a, log_b);
    // Replaying the log (with its serverTs and RTTs) from the seed gives the same game.
    let mut rng = Rng::from_seed(Seed(42));
    let mut s = start(4, &options, 42);
    for (actor, input, ctx, events) in &log_a {
        let applied = HalliGalli::apply(&s, actor, input, ctx, &mut rng).unwrap();
        assert_eq!(&applied.events, events);
        s = applied.state;
    }
    assert_eq!(s, end_a);
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(serde_json::from_str::<HalliGalliState>(&json).unwrap(), s);
}
