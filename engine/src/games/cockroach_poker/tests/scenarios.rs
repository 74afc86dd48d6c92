use super::*;

// ---------------------------------------------------------------------------------------
// §5.4 worked example
// ---------------------------------------------------------------------------------------

/// §5.4 step by step with A, B, C, D.
#[test]
fn worked_example_section_5_4() {
    let s = table(
        &[
            ("A", vec![c(Spider, 0), c(Rat, 0)]),
            ("B", vec![c(Fly, 0)]),
            ("C", vec![c(Bat, 0)]),
            ("D", vec![c(Toad, 0)]),
        ],
        opts(),
    );
    // 1. A hands a real spider to B, claiming "fly".
    let s = act(&s, "A", offer(c(Spider, 0), "B", Fly));
    assert_eq!(s.round.claim, Some(Fly));
    // 2. B peeks (a spider) and passes to C claiming "spider" (the truth). Seen = {A, B}.
    let s = act(&s, "B", PEEK);
    assert_eq!(view_json(&s, Some("B"))["card"]["kind"], "spider");
    let s = act(&s, "B", pass("C", Spider));
    assert_eq!(s.round.seen, vec![pid("A"), pid("B")]);
    assert_eq!(
        s.round.claims,
        vec![
            ClaimEntry { from: pid("A"), to: pid("B"), claim: Fly },
            ClaimEntry { from: pid("B"), to: pid("C"), claim: Spider }
        ]
    );

    // 4. Had C chosen to pass: after peeking only D is a target, and D must call.
    let alt = act(&s, "C", PEEK);
    assert_eq!(alt.pass_targets(), vec![pid("D")]);
    assert_eq!(refused(&alt, "C", pass("A", Spider)), "already_seen");
    assert_eq!(refused(&alt, "C", pass("B", Spider)), "already_seen");
    let alt = act(&alt, "C", pass("D", Spider));
    assert_eq!(refused(&alt, "D", PEEK), "no_one_to_pass");

    // 3. C calls "false": it is a spider, the claim was true, C was wrong: the spider
    //    goes in front of C, who starts the next round.
    let s = act(&s, "C", call(false));
    let reveal = s.last_reveal.clone().unwrap();
    assert_eq!((reveal.kind, reveal.claim, reveal.correct), (Spider, Spider, false));
    assert_eq!(front_of(&s, "C"), vec![c(Spider, 0)]);
    assert_eq!(s.round.starter, pid("C"));
    assert_eq!(CockroachPoker::active_players(&s), vec![pid("C")]);
}

// ---------------------------------------------------------------------------------------
// Refusals, action shapes, legal actions
// ---------------------------------------------------------------------------------------

#[test]
fn refusals_are_named_and_korean() {
    let s = four();
    assert_eq!(refused(&s, "b", offer(c(Fly, 0), "a", Fly)), "not_starter");
    assert_eq!(refused(&s, "a", offer(c(Fly, 0), "b", Fly)), "not_in_hand");
    assert_eq!(refused(&s, "a", offer(c(Spider, 0), "a", Fly)), "self_target");
    assert_eq!(refused(&s, "a", offer(c(Spider, 0), "zed", Fly)), "unknown_player");
    assert_eq!(refused(&s, "zed", offer(c(Spider, 0), "b", Fly)), "not_seated");
    assert_eq!(refused(&s, "b", call(true)), "not_holder");
    assert_eq!(refused(&s, "a", PEEK), "not_holder");
    let s = act(&s, "a", offer(c(Spider, 0), "b", Fly));
    assert_eq!(refused(&s, "a", offer(c(Spider, 1), "c", Fly)), "not_starter");
    assert_eq!(refused(&s, "c", call(true)), "not_holder");
    assert_eq!(refused(&s, "b", pass("c", Fly)), "peek_first");
    let server = CockroachPoker::validate(&s, &Actor::Server, &Input::Client(call(true)), &Ctx::at(AT));
    assert_eq!(server.unwrap_err().code(), "not_seated");
    assert!(CockroachPoker::apply(&s, &Actor::Server, &timeout(), &Ctx::at(AT), &mut Rng::from_seed(Seed(1))).is_err());

    let all = [
        CockroachReject::GameOver,
        CockroachReject::NotSeated,
        CockroachReject::NotStarter,
        CockroachReject::NotHolder,
        CockroachReject::NotYourTurn,
        CockroachReject::NotInHand,
        CockroachReject::SelfTarget,
        CockroachReject::UnknownPlayer,
        CockroachReject::MustPass,
        CockroachReject::AlreadyPeeked,
        CockroachReject::PeekFirst,
        CockroachReject::NoOneToPass,
        CockroachReject::TwoPlayerNoPass,
        CockroachReject::AlreadySeen,
    ];
    let codes: std::collections::BTreeSet<&str> = all.iter().map(Reject::code).collect();
    assert_eq!(codes.len(), all.len(), "codes are distinct");
    for r in &all {
        assert!(r.code().chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'), "{}", r.code());
        assert!(r.reason().chars().any(|ch| ('가'..='힣').contains(&ch)), "{}", r.reason());
    }
}

#[test]
fn actions_follow_the_protocol_shape() {
    let parse = |v: Value| serde_json::from_value::<CockroachAction>(v);
    assert_eq!(
        parse(json!({"type": "offer", "cardId": 5, "to": "u_1", "claim": "rat"})).unwrap(),
        offer(5, "u_1", Rat)
    );
    assert_eq!(parse(json!({"type": "call", "call": "true"})).unwrap(), call(true));
    assert_eq!(parse(json!({"type": "call", "call": "false"})).unwrap(), call(false));
    assert_eq!(parse(json!({"type": "peek"})).unwrap(), PEEK);
    assert_eq!(parse(json!({"type": "pass", "to": "u_2", "claim": "stinkbug"})).unwrap(), pass("u_2", Stinkbug));
    for bad in [
        json!({"type": "peek", "x": 1}),
        json!({"type": "call", "call": true}),
        json!({"type": "call", "call": "maybe"}),
        json!({"type": "offer", "cardId": 5, "to": "u_1", "claim": "dragon"}),
        json!({"type": "offer", "cardId": 5, "to": "u_1", "claim": "rat", "face": "rat"}),
        json!({"type": "pass", "to": "u_2"}),
        json!({"type": "timeout"}),
    ] {
        assert!(parse(bad.clone()).is_err(), "{bad} must be refused");
    }
    assert_eq!(serde_json::to_value(offer(5, "u_1", Cockroach)).unwrap()["cardId"], 5);
    assert_eq!(serde_json::to_value(timeout()).unwrap(), json!({"system": {"type": "timeout"}}));
}

#[test]
fn legal_actions_list_every_choice_of_the_active_player_only() {
    let s = four();
    let legal = legal_actions(&s, &pid("a"));
    assert_eq!(legal.len(), 4 * 3 * 8);
    assert!(legal_actions(&s, &pid("b")).is_empty());
    for input in &legal {
        assert!(CockroachPoker::validate(&s, &Actor::Player(pid("a")), input, &Ctx::at(AT)).is_ok());
    }
    let s = act(&s, "a", offer(c(Spider, 0), "b", Fly));
    assert_eq!(
        legal_actions(&s, &pid("b")),
        vec![Input::Client(call(true)), Input::Client(call(false)), Input::Client(PEEK)]
    );
    let s = act(&s, "b", PEEK);
    assert_eq!(legal_actions(&s, &pid("b")).len(), 2 * 8, "c or d, 8 claims each");
}

// ---------------------------------------------------------------------------------------
// Options and house rules
// ---------------------------------------------------------------------------------------

#[test]
fn options_have_korean_metadata_and_validate() {
    assert_eq!(engine_options::parse::<CockroachPoker>(None).unwrap(), opts());
    let meta = CockroachPoker::options_meta();
    let keys: Vec<&str> = meta.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(
        keys,
        ["loseCount", "turnSeconds", "showSeenBy", "claimHistory", "quickChat", "eightKindsRule", "twoPlayerPass"]
    );
    let hangul = |t: &str| t.chars().any(|ch| ('가'..='힣').contains(&ch));
    for m in &meta {
        assert!(hangul(&m.title), "{}", m.key);
        assert!(m.choices.iter().any(|ch| ch.value == m.default), "{}", m.key);
        for choice in &m.choices {
            assert!(hangul(&choice.label) || choice.label.chars().all(|ch| ch.is_ascii_digit()), "{}", choice.label);
        }
    }
    let parsed = engine_options::parse::<CockroachPoker>(Some(&json!({
        "loseCount": 3, "turnSeconds": 60, "claimHistory": false, "quickChat": false,
        "eightKindsRule": true, "twoPlayerPass": true, "showSeenBy": true
    })))
    .unwrap();
    assert_eq!(
        parsed,
        CockroachOptions {
            lose_count: LoseCount::Count(3),
            turn_seconds: 60,
            show_seen_by: true,
            claim_history: false,
            quick_chat: false,
            eight_kinds_rule: true,
            two_player_pass: true,
        }
    );
    assert_eq!(
        engine_options::parse::<CockroachPoker>(Some(&json!({"loseCount": "auto"}))).unwrap().lose_count,
        LoseCount::Auto(AutoMarker::Auto)
    );
    for bad in [
        json!({"loseCount": 6}),
        json!({"loseCount": "4"}),
        json!({"turnSeconds": 45}),
        json!({"showSeenBy": false}),
        json!({"speed": 1}),
    ] {
        assert!(engine_options::parse::<CockroachPoker>(Some(&bad)).is_err(), "{bad}");
    }
    assert_eq!(serde_json::to_value(opts()).unwrap()["loseCount"], "auto");
}

#[test]
fn option_lose_count_auto_three_four_five() {
    let auto = LoseCount::Auto(AutoMarker::Auto);
    assert_eq!([2, 3, 4, 5, 6].map(|n| auto.resolve(n)), [5, 4, 4, 4, 4]);
    // loseCount 3: the third rat in front of b ends it.
    let mut s = four();
    s.options.lose_count = LoseCount::Count(3);
    give_front(&mut s, "b", &[c(Rat, 5), c(Rat, 6)]);
    let s3 = act(&act(&s, "a", offer(c(Fly, 7), "b", Rat)), "b", call(true));
    assert!(s3.loser.is_none(), "a fly is not a rat");
    let mut t = s.clone();
    t.hands.get_mut(&pid("a")).unwrap().push(c(Rat, 7));
    t.removed.retain(|&x| x != c(Rat, 7));
    let t = act(&act(&t, "a", offer(c(Rat, 7), "b", Rat)), "b", call(false));
    assert_eq!((t.loser.clone(), t.losing_kind), (Some(pid("b")), Some(Rat)));
    assert_eq!(view_json(&t, None)["loseCount"], 3);
    // loseCount 5 with 4 players: the fourth spider does not end it.
    let mut s = c_with_front(&[c(Spider, 2), c(Spider, 3), c(Spider, 4)]);
    s.options.lose_count = LoseCount::Count(5);
    let s = act(&act(&s, "a", offer(c(Spider, 0), "c", Spider)), "c", call(false));
    assert_eq!(s.front_count(&pid("c"), Spider), 4);
    assert!(s.loser.is_none());
}

#[test]
fn house_rule_eight_kinds_loses() {
    // c has one of each kind except toad; taking a toad completes all 8.
    let front = [c(Cockroach, 0), c(Bat, 2), c(Fly, 2), c(Rat, 2), c(Scorpion, 0), c(Spider, 2), c(Stinkbug, 0)];
    let s = c_with_front(&front);
    let off = act(&act(&s, "a", offer(c(Toad, 0), "c", Toad)), "c", call(false));
    assert!(off.loser.is_none(), "without the house rule 8 kinds are fine");
    let mut on = s.clone();
    on.options.eight_kinds_rule = true;
    let on = act(&act(&on, "a", offer(c(Toad, 0), "c", Toad)), "c", call(false));
    assert_eq!(on.loser, Some(pid("c")));
    assert_eq!(on.loss_reason, Some(LossReason::EightKinds));
    let result = CockroachPoker::result(&on).unwrap();
    assert_eq!(result.details["reason"], "eightKinds");
    assert_eq!(result.summary, "c님 앞에 벌레 8종이 모두 모였어요! c님 패배, 나머지 모두 승리");
}

#[test]
fn house_rule_two_player_pass_hands_the_card_back_once() {
    let mut s = two_players(0);
    s.options.two_player_pass = true;
    let s = act(&s, "a", offer(c(Rat, 0), "b", Fly));
    assert_eq!(legal_actions(&s, &pid("b")).len(), 3, "call true, call false, peek");
    let s = act(&s, "b", PEEK);
    assert_eq!(refused(&s, "b", pass("b", Rat)), "self_target");
    let s = act(&s, "b", pass("a", Bat));
    assert_eq!(s.round.holder, Some(pid("a")));
    assert_eq!(s.round.last_passer, Some(pid("b")));
    // a saw the card as starter: it cannot bounce again, a must call.
    assert_eq!(refused(&s, "a", PEEK), "no_one_to_pass");
    let s = act(&s, "a", call(false));
    assert_eq!(front_of(&s, "b"), vec![c(Rat, 0)], "a was right: b, the last passer, takes it");
    // The timeout after a 2-player peek hands it back with the true kind.
    let mut t = two_players(0);
    t.options.two_player_pass = true;
    let t = act(&act(&t, "a", offer(c(Rat, 0), "b", Fly)), "b", PEEK);
    let out = applied(&t, "b", timeout(), 1);
    assert_eq!(out.events[1], CockroachEvent::Passed { from: pid("b"), to: pid("a"), claim: Rat });
}

#[test]
fn option_claim_history_show_seen_by_and_quick_chat_in_the_view() {
    let s = act(&act(&act(&four(), "a", offer(c(Spider, 0), "b", Fly)), "b", PEEK), "b", pass("c", Rat));
    let v = view_json(&s, Some("d"));
    assert_eq!(v["claim"], "rat");
    assert_eq!(
        v["claims"],
        json!([{"from": "a", "to": "b", "claim": "fly"}, {"from": "b", "to": "c", "claim": "rat"}])
    );
    assert_eq!(v["seen"], json!(["a", "b"]));
    assert_eq!(v["showSeenBy"], true);
    assert_eq!(v["quickChat"], true);
    let mut off = s.clone();
    off.options.claim_history = false;
    off.options.quick_chat = false;
    let v = view_json(&off, Some("d"));
    assert_eq!(v["claims"], Value::Null);
    assert_eq!(v["claim"], "rat", "the latest claim always shows");
    assert_eq!(v["quickChat"], false);
    assert_eq!(v["holder"], "c");
    assert_eq!(v["starter"], "a");
    assert_eq!(v["now"], AT);
    assert_eq!(v["deadline"], AT + 30_000);
    assert_eq!(v["fronts"]["a"]["spider"], 0);
}

// ---------------------------------------------------------------------------------------
// Result
// ---------------------------------------------------------------------------------------

#[test]
fn result_ranks_the_loser_last_and_winners_by_largest_stack_then_total() {
    let mut s = table(
        &[
            ("a", vec![c(Spider, 0)]),
            ("b", vec![c(Fly, 0)]),
            ("c", vec![c(Rat, 0)]),
            ("d", vec![c(Bat, 0)]),
            ("e", vec![c(Toad, 0)]),
        ],
        opts(),
    );
    give_front(&mut s, "a", &[c(Rat, 1), c(Rat, 2), c(Bat, 1)]); // largest 2, total 3
    give_front(&mut s, "b", &[c(Rat, 3), c(Bat, 2), c(Fly, 1)]); // largest 1, total 3
    give_front(&mut s, "c", &[c(Fly, 2)]); // largest 1, total 1
    give_front(&mut s, "e", &[c(Fly, 3)]); // largest 1, total 1
    give_front(&mut s, "d", &[c(Spider, 1), c(Spider, 2), c(Spider, 3)]);
    let s = act(&act(&s, "a", offer(c(Spider, 0), "d", Spider)), "d", call(false));
    let result = CockroachPoker::result(&s).unwrap();
    assert_eq!(result.ranking, vec![vec![pid("c"), pid("e")], vec![pid("b")], vec![pid("a")], vec![pid("d")]]);
    let scores = result.scores.unwrap();
    assert_eq!(scores[&pid("d")], 0);
    assert!(["a", "b", "c", "e"].iter().all(|p| scores[&pid(p)] == 1));
    assert_eq!(result.reason, ResultReason::Normal);
    assert_eq!(result.details["loser"], "d");
    assert_eq!(result.details["fronts"]["d"]["spider"], 4);
    assert_eq!(result.details["fronts"]["a"]["rat"], 2);
    assert_eq!(result.details["fronts"]["c"]["cockroach"], 0);
    assert_eq!(result.summary, "d님 앞에 거미 4장! d님 패배, 나머지 모두 승리");
}

#[test]
fn setup_refuses_bad_player_counts() {
    for n in [1, 7] {
        let ps = players(n);
        let err = CockroachPoker::setup(
            SetupCtx { players: &ps, options: &opts(), now: 0, game_no: None },
            &mut Rng::from_seed(Seed(1)),
        );
        assert_eq!(err, Err(EngineError::PlayerCount { got: n, min: 2, max: 6 }));
    }
}
