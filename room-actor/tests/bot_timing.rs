#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Issue 59: Halli Galli bots never out-react a person. Bots-only games at every
//! `botLevel`, in virtual time (`tokio::time::pause` + `Clock::tokio`): every ring a bot
//! makes comes at least its level's reaction time (a correct ring) or 200 ms (a wrong
//! one, the deliberate mistake) after the last change of the table it rang on, which is
//! the entry logged just before it. Before the fix, a bot whose plan no longer fitted
//! the table decided again on the new table with no new delay, and rang 20-110 ms after
//! a five appeared or after another bot's correct ring.

mod support;

use engine::games::halli_galli::bot::sees_five;
use engine::games::halli_galli::options::BotLevel;
use engine::games::halli_galli::rules::HalliGalliAction;
use engine::games::halli_galli::HalliGalli;
use engine::{Actor, Game, Input, ViewCtx};
use room_actor::room::Clock;
use serde_json::json;
use support::games::*;
use support::Node;

/// Games per level (each with its own deal; the bots add OS randomness).
const GAMES: u128 = 3;
/// A deliberate wrong ring's least delay (`halli_galli/bot.rs`).
const MISTAKE_MIN_MS: i64 = 200;

struct Rings {
    correct: usize,
    wrong: usize,
    /// The quickest correct and wrong rings (ms after the table changed).
    fastest_correct: i64,
    fastest_wrong: i64,
}

async fn rings_at(level: BotLevel, name: &str) -> Rings {
    let (react_min, _, _) = level.reaction();
    let mut rings = Rings { correct: 0, wrong: 0, fastest_correct: i64::MAX, fastest_wrong: i64::MAX };
    tokio::time::pause();
    let node = Node::new(Clock::tokio());
    for i in 0..GAMES {
        let played = play(
            &node,
            Setup {
                room: format!("hg-react-{name}-{i}"),
                game: "halli-galli",
                options: json!({"botLevel": name}),
                bots: 3,
                human: Human::Absent,
                grace_sec: 5,
                seed: 0x0b07_0000 + i,
            },
        )
        .await;
        let replay = verify::<HalliGalli>(&played);
        for (entry, input, before) in replay.steps() {
            let Actor::Player(bot) = &entry.actor else { continue };
            if !played.bots.contains(bot) || !matches!(input, Input::Client(HalliGalliAction::Ring { .. })) {
                continue;
            }
            let changed_at = match entry.seq {
                1 => played.stored.start.started_at,
                seq => played.stored.entries[usize::try_from(seq - 2).unwrap()].at,
            };
            let after = entry.at - changed_at;
            let view = HalliGalli::view(before, Some(bot), &ViewCtx { now: entry.at, rtt: None });
            let (count, fastest, least, what) = if sees_five(&view) {
                (&mut rings.correct, &mut rings.fastest_correct, react_min, "a five")
            } else {
                (&mut rings.wrong, &mut rings.fastest_wrong, MISTAKE_MIN_MS, "wrongly")
            };
            *count += 1;
            *fastest = (*fastest).min(after);
            assert!(
                after >= least,
                "{name} bot {bot} rang {what} {after} ms after the table changed (seq {}; its least is {least} ms)",
                entry.seq
            );
        }
    }
    println!(
        "{name}: {} correct rings (fastest {} ms), {} wrong (fastest {} ms)",
        rings.correct, rings.fastest_correct, rings.wrong, rings.fastest_wrong
    );
    assert!(rings.correct >= 10, "{name}: only {} correct bot rings in {GAMES} games", rings.correct);
    rings
}

#[actix::test]
async fn easy_bots_never_ring_faster_than_their_reaction_time() {
    rings_at(BotLevel::Easy, "easy").await;
}

#[actix::test]
async fn normal_bots_never_ring_faster_than_their_reaction_time() {
    rings_at(BotLevel::Normal, "normal").await;
}

#[actix::test]
async fn hard_bots_never_ring_faster_than_their_reaction_time_nor_wrongly_within_200_ms() {
    let rings = rings_at(BotLevel::Hard, "hard").await;
    assert!(rings.wrong >= 1, "hard bots make deliberate mistakes (3 %): none in {GAMES} games");
}
