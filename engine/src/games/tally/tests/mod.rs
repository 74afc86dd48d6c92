use super::*;
use crate::game::Reject;
use crate::options;
use crate::testing::Harness;
use serde_json::json;

fn players(n: usize) -> Vec<PlayerId> {
    (1..=n).map(|i| PlayerId::new(format!("p{i}"))).collect()
}

fn start(n: usize, target: Option<u64>) -> TallyState {
    let ps = players(n);
    let opts = TallyOptions { target };
    Tally::setup(
        SetupCtx { players: &ps, options: &opts, now: 0, game_no: None },
        &mut Rng::from_seed(crate::rng::Seed(1)),
    )
    .unwrap()
}

fn bump(state: &TallyState, who: &str) -> TallyState {
    let actor = Actor::Player(who.into());
    let input = Input::Client(TallyAction::Bump {});
    Tally::validate(state, &actor, &input, &Ctx::at(1)).unwrap();
    Tally::apply(state, &actor, &input, &Ctx::at(1), &mut Rng::from_seed(crate::rng::Seed(1))).unwrap().state
}

#[test]
fn bump_counts_and_remembers_last() {
    let s = bump(&bump(&start(2, Some(10)), "p1"), "p2");
    assert_eq!(s.count, 2);
    assert_eq!(s.last, Some("p2".into()));
    let v = serde_json::to_value(Tally::view(&s, None, &ViewCtx::at(5))).unwrap();
    assert_eq!(v["count"], 2);
    assert_eq!(v["last"], "p2");
    assert_eq!(v["now"], 5);
}

#[test]
fn reaching_target_ends_with_most_bumps_first() {
    let mut s = start(3, Some(10));
    for i in 0..10 {
        s = bump(&s, if i < 6 { "p2" } else { "p1" });
    }
    let result = Tally::result(&s).unwrap();
    assert_eq!(result.ranking, vec![vec!["p2".into()], vec!["p1".into()], vec!["p3".into()]]);
    let refused = Tally::validate(&s, &Actor::Player("p1".into()), &Input::Client(TallyAction::Bump {}), &Ctx::at(2))
        .unwrap_err();
    assert_eq!(refused.code(), "game_over");
    assert!(Tally::active_players(&s).is_empty());
}

#[test]
fn no_target_never_ends() {
    let mut s = start(1, None);
    for _ in 0..2000 {
        s = bump(&s, "p1");
    }
    assert!(Tally::result(&s).is_none());
}

#[test]
fn strangers_and_the_server_cannot_bump() {
    let s = start(2, Some(10));
    let input = Input::Client(TallyAction::Bump {});
    let err = Tally::validate(&s, &Actor::Player("x".into()), &input, &Ctx::at(0)).unwrap_err();
    assert_eq!((err.code(), err.reason().as_ref()), ("not_seated", "이 게임의 참가자가 아니에요"));
    assert!(Tally::validate(&s, &Actor::Server, &input, &Ctx::at(0)).is_err());
}

#[test]
fn action_shape_is_checked() {
    assert_eq!(serde_json::from_value::<TallyAction>(json!({"type": "bump"})).unwrap(), TallyAction::Bump {});
    assert!(serde_json::from_value::<TallyAction>(json!({"type": "bump", "by": 3})).is_err());
    assert!(serde_json::from_value::<TallyAction>(json!({"type": "smash"})).is_err());
}

#[test]
fn options_follow_the_protocol() {
    assert_eq!(options::parse::<Tally>(None).unwrap(), TallyOptions { target: Some(100) });
    assert_eq!(options::parse::<Tally>(Some(&json!({"target": null}))).unwrap(), TallyOptions { target: None });
    assert_eq!(options::parse::<Tally>(Some(&json!({"target": 1000}))).unwrap(), TallyOptions { target: Some(1000) });
    assert!(options::parse::<Tally>(Some(&json!({"target": 5}))).is_err());
}

#[test]
fn setup_refuses_bad_player_counts() {
    let ps = players(9);
    let err = Tally::setup(
        SetupCtx { players: &ps, options: &TallyOptions::default(), now: 0, game_no: None },
        &mut Rng::from_seed(crate::rng::Seed(1)),
    );
    assert_eq!(err, Err(EngineError::PlayerCount { got: 9, min: 1, max: 8 }));
}

fn random_options(rng: &mut Rng, _n: usize) -> TallyOptions {
    // Mostly short games so 1,000 seeds stay fast; sometimes the long one.
    TallyOptions {
        target: Some(if rng.chance(0.1) {
            1000
        } else if rng.chance(0.5) {
            100
        } else {
            10
        }),
    }
}

#[test]
fn passes_the_harness_over_1000_seeds() {
    let mut harness = Harness::<Tally>::new(random_options);
    harness.invariant = |s| {
        let total: u64 = s.bumps.values().sum();
        if total == s.count {
            Ok(())
        } else {
            Err(format!("bumps {total} != count {}", s.count))
        }
    };
    let report = harness.run().unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.games, 1000);
    assert!(report.steps >= 1000 * 10);
}
