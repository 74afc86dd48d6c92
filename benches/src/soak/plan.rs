//! What each cycle does, decided up front from `--seed` and the cycle's number: the
//! game and its options, the bots, who drops mid-game and who comes back, how everyone
//! leaves.

use super::cli::Args;
use crate::loadgen::GameKind;
use engine::{Rng, Seed};
use serde_json::{json, Value};
use std::time::Duration;

/// The games in the order of `--mix`.
const GAMES: [GameKind; 3] = [GameKind::Tally, GameKind::HalliGalli, GameKind::CockroachPoker];

/// A planned mid-game drop of one player.
#[derive(Clone, Debug)]
pub(super) struct DropPlan {
    /// Drop after this many `update`s.
    pub(super) after_updates: u32,
    /// Reset (SO_LINGER 0) rather than a plain FIN; no close frame either way.
    pub(super) rst: bool,
    /// Come back after this long, on a new socket.
    pub(super) reconnect_after: Option<Duration>,
    /// Not coming back: leave the seat (`DELETE …/seats/me`) so the game stops waiting.
    pub(super) leave: bool,
}

/// How one person in a cycle behaves.
#[derive(Clone, Debug)]
pub(super) struct PlayerPlan {
    pub(super) drop: Option<DropPlan>,
    /// Leave after the result without a close frame (and with a reset if `final_rst`).
    pub(super) final_abrupt: bool,
    pub(super) final_rst: bool,
    /// Send `unsub` before the close frame.
    pub(super) unsub_first: bool,
    /// Halli-galli: this player ends the game (a wrong ring in a duel) after `quota` flips.
    pub(super) ender: bool,
    pub(super) quota: u32,
    /// Delay before acting (tally: between bumps), ms.
    pub(super) reaction_ms: (u32, u32),
}

#[derive(Clone, Debug)]
pub(super) struct CyclePlan {
    pub(super) game: GameKind,
    pub(super) bots: usize,
    pub(super) options: Value,
    pub(super) players: Vec<PlayerPlan>,
    pub(super) seed: u128,
}

pub(super) fn plan_cycle(args: &Args, i: usize) -> CyclePlan {
    let seed = (u128::from(args.seed) << 64) | i as u128;
    let mut rng = Rng::from_seed(Seed(seed));
    let total: u32 = args.mix.iter().sum();
    let mut pick = rng.int(total);
    let mut game = GameKind::Tally;
    for (g, w) in GAMES.iter().zip(args.mix) {
        if pick < w {
            game = *g;
            break;
        }
        pick -= w;
    }
    let (humans, bots) = match game {
        GameKind::Tally => (2 + rng.index(3), usize::from(rng.chance(0.2))),
        // Two seats: the duel house rule makes a wrong ring end the game at once.
        GameKind::HalliGalli if rng.chance(0.5) => (2, 0),
        GameKind::HalliGalli => (1, 1),
        GameKind::CockroachPoker => (2 + rng.index(3), usize::from(rng.chance(0.3))),
    };
    let dropper = rng.chance(args.drop_rate).then(|| rng.index(humans));
    let options = match game {
        // A drop needs a game long enough to happen in.
        GameKind::Tally => json!({ "target": if dropper.is_some() { 100 } else { 10 } }),
        GameKind::HalliGalli => json!({
            "endMode": "lastStanding", "timeLimitMin": 5, "flipSeconds": 2, "flipGuardMs": 400,
            "wrongRingLockoutMs": 0, "duelWrongLoses": true
        }),
        GameKind::CockroachPoker => json!({ "loseCount": 3, "turnSeconds": 15 }),
    };
    let players = (0..humans)
        .map(|k| {
            let drop = (dropper == Some(k)).then(|| {
                let after_updates = match game {
                    GameKind::Tally => 1 + rng.int(4),
                    GameKind::HalliGalli => 2 + rng.int(8),
                    GameKind::CockroachPoker => 1 + rng.int(5),
                };
                // The host (player 0) ends halli-galli and always bumps tally on: it comes back.
                let back = k == 0 || rng.chance(args.reconnect_rate);
                let delay_ms = match game {
                    GameKind::Tally => 50 + rng.int(450),
                    _ => 200 + rng.int(1800),
                };
                DropPlan {
                    after_updates,
                    rst: rng.chance(0.5),
                    reconnect_after: back.then(|| Duration::from_millis(u64::from(delay_ms))),
                    // Cockroach poker waits up to 90 s for an away player's turns: one who
                    // is not coming back always leaves; elsewhere half of them do.
                    leave: !back && (game == GameKind::CockroachPoker || rng.chance(0.5)),
                }
            });
            let final_abrupt = rng.chance(0.25);
            PlayerPlan {
                drop,
                final_abrupt,
                final_rst: final_abrupt && rng.chance(0.5),
                unsub_first: !final_abrupt && rng.chance(0.2),
                ender: game == GameKind::HalliGalli && k == 0,
                quota: 2 + rng.int(5),
                reaction_ms: match game {
                    // At most 25 bumps/s per socket: under the 30/s rate limit.
                    GameKind::Tally => (40, 30),
                    GameKind::HalliGalli => (60, 120),
                    GameKind::CockroachPoker => (30, 100),
                },
            }
        })
        .collect();
    CyclePlan { game, bots, options, players, seed }
}
