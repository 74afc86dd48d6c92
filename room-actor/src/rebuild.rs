//! Rebuilding a room from its log: the start entry (seed, players, options) through
//! `setup`, then every entry through `apply` with its logged `now` and RTT, continuing the
//! RNG, exactly as the room did. Recovery may start from the latest snapshot instead.

use crate::dedupe::AppliedCs;
use crate::error::RebuildError;
use crate::log::{LogEntry, StoredGame};
use engine::{Ctx, Game, InputOf, Rng, SetupCtx};

/// A room's state after its whole log.
#[derive(Clone, Debug)]
pub struct Rebuilt<G: Game> {
    pub state: G::State,
    pub rng: Rng,
    pub seq: u64,
    pub last_at: i64,
    /// (player, cs) → seq of every client input, for dedupe after recovery.
    pub applied: AppliedCs,
}

/// Where a rebuild starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    /// From the seed: what replays do.
    Seed,
    /// From the latest snapshot when there is one: what recovery does.
    LatestSnapshot,
}

/// The options a game was started with.
pub fn options_of<G: Game>(stored: &StoredGame) -> Result<G::Options, RebuildError> {
    serde_json::from_str(&stored.start.options_json)
        .map_err(|e| RebuildError::Entry { seq: 0, message: format!("options: {e}") })
}

/// The state at the start of the game (after `setup`) and the RNG after it.
pub fn initial<G: Game>(stored: &StoredGame) -> Result<(G::State, Rng), RebuildError> {
    let start = &stored.start;
    if start.game != G::ID {
        return Err(RebuildError::WrongGame { expected: G::ID.into(), found: start.game.clone() });
    }
    if start.state_version != G::STATE_VERSION {
        return Err(RebuildError::StateVersion { logged: start.state_version, current: G::STATE_VERSION });
    }
    let options = options_of::<G>(stored)?;
    let mut rng = Rng::from_seed(start.seed);
    let ctx = SetupCtx { players: &start.players, options: &options, now: start.started_at, game_no: None };
    let state = G::setup(ctx, &mut rng).map_err(|e| RebuildError::Entry { seq: 0, message: e.to_string() })?;
    Ok((state, rng))
}

/// Applies one logged entry.
pub fn apply_entry<G: Game>(
    state: &G::State,
    rng: &mut Rng,
    entry: &LogEntry,
) -> Result<engine::Applied<G::State, G::Event>, RebuildError> {
    let fail = |message: String| RebuildError::Entry { seq: entry.seq, message };
    let input: InputOf<G> = serde_json::from_str(&entry.input_json).map_err(|e| fail(format!("input: {e}")))?;
    let ctx = Ctx { now: entry.at, rtt_ms: entry.rtt_ms };
    G::apply(state, &entry.actor, &input, &ctx, rng).map_err(|e| fail(e.to_string()))
}

/// Rebuilds the room's current state.
pub fn rebuild<G: Game>(stored: &StoredGame, from: From) -> Result<Rebuilt<G>, RebuildError> {
    let snapshot = match from {
        From::Seed => None,
        From::LatestSnapshot => stored.snapshot.as_ref(),
    };
    let (mut state, mut rng, mut seq, mut last_at) = match snapshot {
        Some(snap) => {
            let state = serde_json::from_str(&snap.state_json)
                .map_err(|e| RebuildError::Entry { seq: snap.seq, message: format!("snapshot: {e}") })?;
            (state, Rng::from_state(snap.rng), snap.seq, snap.at)
        }
        None => {
            let (state, rng) = initial::<G>(stored)?;
            (state, rng, 0, stored.start.started_at)
        }
    };
    let mut applied = AppliedCs::new();
    for entry in &stored.entries {
        if let (engine::Actor::Player(p), Some(cs)) = (&entry.actor, entry.cs) {
            applied.insert(p, cs, entry.seq);
        }
        if entry.seq <= seq {
            continue;
        }
        if entry.seq != seq + 1 {
            return Err(RebuildError::Entry { seq: entry.seq, message: format!("gap after {seq}") });
        }
        state = apply_entry::<G>(&state, &mut rng, entry)?.state;
        seq = entry.seq;
        last_at = entry.at;
    }
    Ok(Rebuilt { state, rng, seq, last_at, applied })
}
