#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Whole games in a room, per game: bots with a host who is absent, silent or leaves,
//! played in virtual time (`tokio::time::pause` + `Clock::tokio`). After each game the
//! stored log is re-run entry by entry (every entry must validate), rebuilt from the
//! seed and from the latest snapshot (both must equal the record), and every message a
//! subscriber received is compared with the stored state of its seq and searched for
//! that state's secrets (`support::games`).

mod support;

use engine::games::cockroach_poker::rules::{CockroachAction, CockroachSystem};
use engine::games::cockroach_poker::CockroachPoker;
use engine::games::halli_galli::rules::{
    EndReason, HalliGalliAction, HalliGalliEvent, HalliGalliSystem, DISCONNECTED_FLIP_MS, DISCONNECT_GRACE_MS,
    RING_WINDOW_MS,
};
use engine::games::halli_galli::HalliGalli;
use engine::games::tally::Tally;
use engine::{Actor, Game, Input, PlayerId};
use room_actor::room::Clock;
use serde_json::json;
use support::games::*;
use support::Node;

/// Games per scenario: each with its own seed (deal); the bots add OS randomness.
const GAMES: u128 = 4;
const SEED: u128 = 0x5eed_0000;

fn node() -> Node {
    tokio::time::pause();
    Node::new(Clock::tokio())
}

// ---------------------------------------------------------------------------------
// halli-galli

/// The host's entries in a halli-galli log: only `timeoutFlip`, only while they are
/// away, never before the game's own 60 s grace (the room's `graceSec` does not apply)
/// and never before 1 s into their turn. Returns how many there were.
fn halli_host_timeout_flips(played: &Played, replay: &Replay<HalliGalli>) -> usize {
    let mut n = 0;
    for (entry, input, before) in entries_of(replay, &played.host) {
        assert_eq!(input, &Input::System(HalliGalliSystem::TimeoutFlip {}), "seq {}", entry.seq);
        let since = played.away_since.unwrap_or_else(|| panic!("seq {}: a connected host was timed out", entry.seq));
        assert_eq!(before.turn, played.host, "seq {}: timed out off turn", entry.seq);
        assert!(
            entry.at >= since + DISCONNECT_GRACE_MS,
            "seq {}: timed out {} ms after leaving, before the game's grace",
            entry.seq,
            entry.at - since
        );
        assert!(entry.at >= before.turn_started_at + DISCONNECTED_FLIP_MS, "seq {}: flipped too early", entry.seq);
        n += 1;
    }
    n
}

/// Flips made for the host by the turn deadline's tick (host's turn, `tick`, at or
/// after `turn_deadline`).
fn halli_deadline_flips_for_host(played: &Played, replay: &Replay<HalliGalli>) -> usize {
    replay
        .steps()
        .zip(&replay.events)
        .filter(|((entry, input, before), events)| {
            **input == Input::System(HalliGalliSystem::Tick {})
                && before.turn == played.host
                && events.iter().any(|e| matches!(e, HalliGalliEvent::Flipped { player, .. } if *player == played.host))
                && entry.at >= before.turn_deadline
        })
        .count()
}

fn host_flips(played: &Played, replay: &Replay<HalliGalli>) -> (usize, usize) {
    let mut auto = 0;
    let mut own = 0;
    for e in replay.events.iter().flatten() {
        if let HalliGalliEvent::Flipped { player, auto: a, .. } = e {
            if *player == played.host {
                if *a {
                    auto += 1;
                } else {
                    own += 1;
                }
            }
        }
    }
    (auto, own)
}

#[actix::test]
async fn halli_galli_bots_only_auto_flip_light_latency_plays_out_legally_and_rebuilds() {
    let node = node();
    for i in 0..GAMES {
        let played = play(
            &node,
            Setup {
                room: format!("hg-auto-{i}"),
                game: "halli-galli",
                options: json!({"autoFlip": true, "latencyComp": "light"}),
                bots: 3,
                human: Human::Absent,
                grace_sec: 5,
                seed: SEED + i,
            },
        )
        .await;
        let replay = verify::<HalliGalli>(&played);
        let final_state = replay.final_state();
        assert!(final_state.options.auto_flip);

        // autoFlip: every flip is the server's; nobody's client flip was ever applied.
        assert!(!replay.inputs.contains(&Input::Client(HalliGalliAction::Flip {})));
        let flips = replay.events.iter().flatten().filter(|e| matches!(e, HalliGalliEvent::Flipped { .. })).count();
        assert!(flips > 0);
        // latencyComp light: correct rings wait in a window that a `resolve` closes.
        let resolves =
            replay.inputs.iter().filter(|input| **input == Input::System(HalliGalliSystem::Resolve {})).count();
        let collected =
            replay.events.iter().flatten().filter(|e| matches!(e, HalliGalliEvent::Collected { .. })).count();
        assert!(resolves > 0 && collected > 0, "resolves {resolves}, collections {collected}");
        // The absent host: flipped for by the deadline at first, by `timeoutFlip` after 60 s.
        let timeouts = halli_host_timeout_flips(&played, &replay);
        assert!(timeouts > 0, "the absent host was never timed out");
        println!(
            "halli-galli autoFlip+light: {} entries, {flips} flips, {resolves} resolves, {timeouts} host timeouts, {} s",
            played.record.final_seq,
            (played.record.ended_at - played.record.started_at) / 1000
        );
    }
}

#[actix::test]
async fn halli_galli_silent_human_is_flipped_for_at_the_deadline_official_end_five_minutes() {
    let node = node();
    for i in 0..GAMES {
        let played = play(
            &node,
            Setup {
                room: format!("hg-official-{i}"),
                game: "halli-galli",
                options: json!({"endMode": "official", "timeLimitMin": 5}),
                bots: 3,
                human: Human::Silent,
                grace_sec: 5,
                seed: SEED + i,
            },
        )
        .await;
        let replay = verify::<HalliGalli>(&played);
        let final_state = replay.final_state();

        // Connected but silent: never timed out as a player, every flip of theirs made by
        // the turn deadline's tick.
        assert_eq!(halli_host_timeout_flips(&played, &replay), 0);
        let (auto, own) = host_flips(&played, &replay);
        assert_eq!(own, 0, "the silent host never flipped");
        assert!(auto > 0, "the host's turns came and were flipped for");
        assert_eq!(
            halli_deadline_flips_for_host(&played, &replay),
            auto,
            "each auto flip for the host was at its deadline"
        );

        // endMode official with 4 players: never "last standing"; within the time limit.
        let reason = final_state.end_reason.expect("ended");
        assert_ne!(reason, EndReason::LastStanding, "official mode ended as last standing");
        let result: serde_json::Value = serde_json::from_str(&played.record.result_json).unwrap();
        assert_eq!(result["details"]["endReason"], json!(reason));
        let ends_at = final_state.ends_at.expect("a 5 minute limit");
        assert_eq!(ends_at, final_state.countdown_ends_at + 5 * 60_000);
        // The limit's tick runs once `now >= endsAt`: timers may fire a millisecond late
        // (tokio's 1 ms rounding), and an open ring window holds the tick until it closes.
        let latest = ends_at + RING_WINDOW_MS + 2;
        assert!(played.record.ended_at <= latest, "ended {} ms after the limit", played.record.ended_at - ends_at);
        println!(
            "halli-galli official 5 min: {} entries, end {reason:?} at {} s, {auto} deadline flips for the host",
            played.record.final_seq,
            (played.record.ended_at - played.record.started_at) / 1000
        );
    }
}

#[actix::test]
async fn halli_galli_disconnected_human_is_flipped_for_after_the_games_grace() {
    let node = node();
    for i in 0..GAMES {
        let played = play(
            &node,
            Setup {
                room: format!("hg-away-{i}"),
                game: "halli-galli",
                options: json!({"flipSeconds": 5}),
                bots: 2,
                human: Human::LeavesAfter(2),
                grace_sec: 5,
                seed: SEED + i,
            },
        )
        .await;
        let replay = verify::<HalliGalli>(&played);
        // Away: after the game's 60 s grace (not the room's 5 s), flipped for 1 s into the
        // turn instead of at the 5 s deadline.
        let timeouts = halli_host_timeout_flips(&played, &replay);
        assert!(timeouts > 0, "the away host was never timed out");
        for (entry, _, before) in entries_of(&replay, &played.host) {
            assert!(
                entry.at < before.turn_deadline,
                "seq {}: the timeout flip came no sooner than the deadline",
                entry.seq
            );
        }
        // Before the grace ran out, the host's turns were flipped by the deadline's tick.
        assert!(halli_deadline_flips_for_host(&played, &replay) > 0);
        println!("halli-galli away host: {} entries, {timeouts} timeout flips", played.record.final_seq);
    }
}

// ---------------------------------------------------------------------------------
// cockroach-poker

/// Sorts the host's `timeout` entries into those at the round deadline and those
/// before it. Connected, the host is only timed out at the deadline. Away, the game's
/// 90 s grace applies (not the room's `graceSec`): a turn whose deadline falls after
/// the grace ends is timed out as soon as both the grace is over and the turn has begun
/// (within the timer's 1 ms rounding); earlier turns at their deadline. Bots are never
/// timed out.
fn cockroach_timeouts(played: &Played, replay: &Replay<CockroachPoker>) -> (usize, usize) {
    let (mut on_deadline, mut early) = (0, 0);
    let grace_over = played.away_since.map(|since| since + engine::games::cockroach_poker::DISCONNECT_GRACE_MS);
    for (entry, input, before) in entries_of(replay, &played.host) {
        assert_eq!(input, &Input::System(CockroachSystem::Timeout {}), "seq {}", entry.seq);
        assert_eq!(before.active(), Some(&played.host), "seq {}: timed out while not active", entry.seq);
        let deadline = before.round.deadline;
        match grace_over {
            Some(over) if deadline > over => {
                let turn_began = deadline - before.turn_ms();
                let due = over.max(turn_began);
                assert!(
                    (due..=due + 2).contains(&entry.at),
                    "seq {}: away host timed out at {}, due at {due} (grace over {over}, turn began {turn_began})",
                    entry.seq,
                    entry.at
                );
                early += 1;
            }
            _ => {
                assert!(
                    entry.at >= deadline,
                    "seq {}: timed out {} ms before the deadline",
                    entry.seq,
                    deadline - entry.at
                );
                on_deadline += 1;
            }
        }
    }
    for bot in &played.bots {
        let bot_timeouts: Vec<u64> =
            entries_of(replay, bot).filter(|(_, i, _)| matches!(i, Input::System(_))).map(|(e, _, _)| e.seq).collect();
        assert!(bot_timeouts.is_empty(), "bot {bot} was timed out at seqs {bot_timeouts:?}");
    }
    (on_deadline, early)
}

fn passes(replay: &Replay<CockroachPoker>) -> usize {
    replay.inputs.iter().filter(|i| matches!(i, Input::Client(CockroachAction::Pass { .. }))).count()
}

/// The loser really lost: `loseCount` of the losing kind in front, or an empty hand.
fn check_loser(replay: &Replay<CockroachPoker>, lose_count: usize) {
    let state = replay.final_state();
    assert_eq!(state.lose_count(), lose_count);
    let loser: &PlayerId = state.loser.as_ref().expect("a loser");
    match state.losing_kind {
        Some(kind) => assert!(state.front_count(loser, kind) >= lose_count, "{loser} lost with too few {kind:?}"),
        None => assert!(state.hand(loser).is_empty(), "{loser} lost without a losing kind or an empty hand"),
    }
}

#[actix::test]
async fn cockroach_poker_two_players_pass_rule_silent_human_times_out_on_the_deadline() {
    let node = node();
    for i in 0..GAMES {
        let played = play(
            &node,
            Setup {
                room: format!("cp-2-{i}"),
                game: "cockroach-poker",
                options: json!({"twoPlayerPass": true, "turnSeconds": 15}),
                bots: 1,
                human: Human::Silent,
                grace_sec: 5,
                seed: SEED + i,
            },
        )
        .await;
        let replay = verify::<CockroachPoker>(&played);
        let (on_deadline, early) = cockroach_timeouts(&played, &replay);
        assert!(on_deadline > 0, "the silent host's turns were decided by the deadline");
        assert_eq!(early, 0);
        let state = replay.final_state();
        assert!(state.options.two_player_pass);
        assert_eq!(state.removed.len(), 10, "2 players: 10 cards removed unseen");
        check_loser(&replay, 5);
        println!(
            "cockroach 2p pass: {} entries, {on_deadline} host timeouts, {} passes",
            played.record.final_seq,
            passes(&replay)
        );
    }
}

#[actix::test]
async fn cockroach_poker_four_players_disconnected_human_gets_the_games_grace() {
    let node = node();
    let mut total_early = 0;
    for i in 0..GAMES {
        let played = play(
            &node,
            Setup {
                room: format!("cp-4-{i}"),
                game: "cockroach-poker",
                options: json!({"turnSeconds": 15, "loseCount": 5}),
                bots: 3,
                human: Human::LeavesAfter(1),
                grace_sec: 5,
                seed: SEED + i,
            },
        )
        .await;
        let replay = verify::<CockroachPoker>(&played);
        let (on_deadline, early) = cockroach_timeouts(&played, &replay);
        total_early += early;
        check_loser(&replay, 5);
        println!(
            "cockroach 4p away host: {} entries, {on_deadline} deadline + {early} grace timeouts, {} passes",
            played.record.final_seq,
            passes(&replay)
        );
    }
    // A game may end before the host's first turn after the grace; not all four.
    assert!(total_early > 0, "the away host was never timed out before the round deadline");
}

#[actix::test]
async fn cockroach_poker_six_players_bots_only_plays_out_legally_and_rebuilds() {
    let node = node();
    let mut host_timeouts = 0;
    for i in 0..GAMES {
        let played = play(
            &node,
            Setup {
                room: format!("cp-6-{i}"),
                game: "cockroach-poker",
                options: json!({}),
                bots: 5,
                human: Human::Absent,
                grace_sec: 5,
                seed: SEED + i,
            },
        )
        .await;
        let replay = verify::<CockroachPoker>(&played);
        let (on_deadline, early) = cockroach_timeouts(&played, &replay);
        host_timeouts += on_deadline + early;
        assert_eq!(replay.final_state().order.len(), 6);
        check_loser(&replay, 4);
        println!(
            "cockroach 6p bots: {} entries, {on_deadline} deadline + {early} grace timeouts, {} passes",
            played.record.final_seq,
            passes(&replay)
        );
    }
    assert!(host_timeouts > 0, "the absent host's turns never came");
}

// ---------------------------------------------------------------------------------
// tally

#[actix::test]
async fn tally_silent_human_and_bots_play_legally_and_rebuild() {
    let node = node();
    for i in 0..GAMES {
        let played = play(
            &node,
            Setup {
                room: format!("t-{i}"),
                game: "tally",
                options: json!({"target": 100}),
                bots: 2,
                human: Human::Silent,
                grace_sec: 5,
                seed: SEED + i,
            },
        )
        .await;
        let replay = verify::<Tally>(&played);
        assert_eq!(played.record.final_seq, 100);
        assert_eq!(entries_of(&replay, &played.host).count(), 0, "the silent host never bumped");
        assert_eq!(replay.final_state().count, 100);
        assert!(Tally::result(replay.final_state()).is_some());
    }
}

// ---------------------------------------------------------------------------------
// the checks themselves

/// The checks can fail: an entry applied for the wrong player, a record that is not the
/// log's end, a message carrying a hidden card, a missing update and a view that is not
/// the stored state are each caught.
#[actix::test]
async fn the_checks_catch_a_tampered_log_record_or_message() {
    let node = node();
    let played = play(
        &node,
        Setup {
            room: "cp-tamper".into(),
            game: "cockroach-poker",
            options: json!({"turnSeconds": 15}),
            bots: 2,
            human: Human::Silent,
            grace_sec: 5,
            seed: SEED,
        },
    )
    .await;
    let replay = verify::<CockroachPoker>(&played);

    // A bot's move logged as the host's.
    let mut stored = played.stored.clone();
    let k = stored
        .entries
        .iter()
        .position(|e| e.actor.player().is_some_and(|p| played.bots.contains(p)))
        .expect("a bot moved");
    stored.entries[k].actor = Actor::Player(played.host.clone());
    expect_panic("is illegal on the state it was applied to", || {
        replay_validating::<CockroachPoker>(&stored);
    });

    // A record whose final state is the one before the last entry.
    let mut wrong_record = played.clone();
    let before_last = &replay.states[replay.states.len() - 2];
    wrong_record.record.final_state_json = serde_json::to_string(before_last).unwrap();
    expect_panic("the final state differs from the record", || {
        check_rebuilds::<CockroachPoker>(&wrong_record, &replay)
    });

    // A spectator update that carries a card of a hand.
    let at = played.spectator.iter().position(|m| m["t"] == "update").expect("an update");
    let seq = usize::try_from(played.spectator[at]["seq"].as_u64().unwrap()).unwrap();
    let card = *replay.states[seq].hand(&played.bots[0]).first().expect("the bot holds cards");
    let mut leaking = played.spectator.clone();
    leaking[at]["view"]["lastCardId"] = json!(card);
    expect_panic("leaks hidden information", || {
        check_messages::<CockroachPoker>(&played, &replay, &leaking, None, "spectator");
    });

    // An update missing.
    let mut gap = played.spectator.clone();
    gap.remove(at);
    expect_panic("none missing", || {
        check_messages::<CockroachPoker>(&played, &replay, &gap, None, "spectator");
    });

    // An update whose view is not the stored state's.
    let mut stale = played.spectator.clone();
    stale[at]["view"]["handCounts"] = json!({});
    expect_panic("is not the stored state", || {
        check_messages::<CockroachPoker>(&played, &replay, &stale, None, "spectator");
    });
}
