//! Recorded games for the rebuild and log-codec benches: a game is played step by step
//! and every applied input becomes a [`LogEntry`] built exactly as the room runner builds
//! one (`room-actor/src/room/input.rs`, `process`): the input as JSON, `now`, the actor, the
//! client's `cs` (`None` for server inputs) and the RTT passed to `apply`.

use anyhow::Context;
use engine::games::tally::options::TallyOptions;
use engine::games::tally::rules::TallyAction;
use engine::games::tally::Tally;
use engine::schedule::{self, Presence};
use engine::{Actor, Ctx, Game, Input, InputOf, PlayerId, Rng, Seed, SetupCtx};
use room_actor::log::{LogEntry, StartEntry, StoredGame};
use std::collections::BTreeMap;

/// Start of every recorded game (epoch ms).
pub const START_MS: i64 = 1_700_000_000_000;

/// The start entry of a game of `G` with these players and options.
fn start_entry<G: Game>(seed: Seed, players: &[PlayerId], options: &G::Options) -> anyhow::Result<StartEntry> {
    Ok(StartEntry {
        game_pk: "g_bench".into(),
        room_id: "r_bench".into(),
        game: G::ID.into(),
        seed,
        players: players.to_vec(),
        bots: Vec::new(),
        names: players.iter().map(|p| p.to_string()).collect(),
        options_json: serde_json::to_string(options)?,
        state_version: G::STATE_VERSION,
        started_at: START_MS,
        rtt: Default::default(),
    })
}

fn players(n: usize) -> Vec<PlayerId> {
    (1..=n).map(|i| PlayerId::new(format!("u_{i:016}"))).collect()
}

/// A tally game (4 players, no target) of exactly `entries` bumps, players in turn,
/// 20 ms apart.
pub fn tally(entries: u64) -> anyhow::Result<StoredGame> {
    let players = players(4);
    let options = TallyOptions { target: None };
    let seed = Seed(0x7a11);
    let start = start_entry::<Tally>(seed, &players, &options)?;
    let mut rng = Rng::from_seed(seed);
    let setup = SetupCtx { players: &players, options: &options, now: START_MS, game_no: None };
    let mut state = Tally::setup(setup, &mut rng)?;
    let input: InputOf<Tally> = Input::Client(TallyAction::Bump {});
    let input_json = serde_json::to_string(&input)?;
    let mut log = Vec::with_capacity(entries as usize);
    for seq in 1..=entries {
        let who = &players[(seq as usize) % players.len()];
        let actor = Actor::Player(who.clone());
        let ctx = Ctx { now: START_MS + 20 * seq as i64, rtt_ms: Some(40) };
        state = Tally::apply(&state, &actor, &input, &ctx, &mut rng)?.state;
        log.push(LogEntry {
            seq,
            at: ctx.now,
            actor,
            cs: Some(seq),
            rtt_ms: ctx.rtt_ms,
            auto: false,
            input_json: input_json.clone(),
            rtt: None,
        });
    }
    Ok(StoredGame { start, snapshot: None, entries: log })
}

/// A game of `G` (4 players, `options`) played with random legal inputs and the timers
/// the runner fires, until it ends or has `max_entries` entries.
pub fn random_play<G: Game>(options: G::Options, seed: u64, max_entries: u64) -> anyhow::Result<StoredGame> {
    let players = players(4);
    let game_seed = Seed(u128::from(seed) | 0x1000);
    let start = start_entry::<G>(game_seed, &players, &options)?;
    let mut rng = Rng::from_seed(game_seed);
    let mut choose = Rng::from_seed(Seed(u128::from(seed) ^ 0xc0ffee));
    let setup = SetupCtx { players: &players, options: &options, now: START_MS, game_no: None };
    let mut state = G::setup(setup, &mut rng)?;
    let away = BTreeMap::new();
    let presence = Presence { disconnected_since: &away, room_grace_ms: 60_000, hold_until: i64::MIN };
    let mut now = START_MS;
    let mut log = Vec::new();
    let mut cs = 0u64;
    while (log.len() as u64) < max_entries && G::result(&state).is_none() {
        now += 30 + i64::from(choose.int(400));
        let wake = schedule::next_wake::<G>(&state, &presence);
        let (actor, input, auto) = match wake.filter(|w| *w <= now) {
            Some(_) => {
                let (actor, input) = schedule::due::<G>(&state, now, &presence).context("wake reached, nothing due")?;
                (actor, input, true)
            }
            None => {
                let movers: Vec<(PlayerId, Vec<InputOf<G>>)> = players
                    .iter()
                    .map(|p| (p.clone(), G::legal_actions(&state, p, now)))
                    .filter(|(_, legal)| !legal.is_empty())
                    .collect();
                if movers.is_empty() {
                    match wake {
                        Some(w) => {
                            now = w;
                            continue;
                        }
                        None => anyhow::bail!("stuck: no legal input and no deadline"),
                    }
                }
                let (p, legal) = &movers[choose.index(movers.len())];
                (Actor::Player(p.clone()), legal[choose.index(legal.len())].clone(), false)
            }
        };
        let rtt_ms = actor.player().map(|_| 40);
        let ctx = Ctx { now, rtt_ms };
        if G::validate(&state, &actor, &input, &ctx).is_err() {
            continue;
        }
        state = G::apply(&state, &actor, &input, &ctx, &mut rng)?.state;
        let client_cs = if auto {
            None
        } else {
            cs += 1;
            Some(cs)
        };
        log.push(LogEntry {
            seq: log.len() as u64 + 1,
            at: now,
            actor,
            cs: client_cs,
            rtt_ms,
            auto,
            input_json: serde_json::to_string(&input)?,
            rtt: None,
        });
    }
    Ok(StoredGame { start, snapshot: None, entries: log })
}
