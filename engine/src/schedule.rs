//! When the server must act on its own, and with which input.
//!
//! The room runner and the random-play harness share this, so the harness exercises
//! exactly the timer logic that runs in production (`game-engine.md` §4 `onTimer`):
//!
//! - once the game's `deadline` has passed, the game's `tick` (if it has one due) or
//!   the first timeout player's `on_timeout` is applied;
//! - a disconnected timeout player is timed out at
//!   `max(disconnected_since + grace, timeout_not_before)`, where grace is the game's
//!   `disconnect_grace_ms` or the room's `graceSec`;
//! - nothing is enforced before `hold_until` (a recovered room's recovery time + 30 s).

use crate::game::{Actor, Game, InputOf, PlayerId};
use std::collections::BTreeMap;

/// What the runner knows about connections, which the game state does not hold.
#[derive(Clone, Copy, Debug)]
pub struct Presence<'a> {
    /// Since when each disconnected seated player has been away (epoch ms).
    pub disconnected_since: &'a BTreeMap<PlayerId, i64>,
    /// The room's disconnect grace (`graceSec` × 1000).
    pub room_grace_ms: i64,
    /// No deadline is enforced before this time.
    pub hold_until: i64,
}

impl<'a> Presence<'a> {
    /// Everyone connected, default grace, no hold.
    pub fn all_connected(empty: &'a BTreeMap<PlayerId, i64>) -> Presence<'a> {
        Presence { disconnected_since: empty, room_grace_ms: 60_000, hold_until: i64::MIN }
    }
}

fn personal_deadline<G: Game>(state: &G::State, player: &PlayerId, presence: &Presence<'_>) -> Option<i64> {
    let since = *presence.disconnected_since.get(player)?;
    let grace = G::disconnect_grace_ms(state).unwrap_or(presence.room_grace_ms);
    let at = since.saturating_add(grace);
    Some(match G::timeout_not_before(state) {
        Some(nb) => at.max(nb),
        None => at,
    })
}

/// The earliest time the server has something to do in this room, if ever.
pub fn next_wake<G: Game>(state: &G::State, presence: &Presence<'_>) -> Option<i64> {
    if G::result(state).is_some() {
        return None;
    }
    let personal = G::timeout_players(state).iter().filter_map(|p| personal_deadline::<G>(state, p, presence)).min();
    let earliest = match (G::deadline(state), personal) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }?;
    Some(earliest.max(presence.hold_until))
}

/// The input the server applies at `now`, if one is due.
pub fn due<G: Game>(state: &G::State, now: i64, presence: &Presence<'_>) -> Option<(Actor, InputOf<G>)> {
    if now < presence.hold_until || G::result(state).is_some() {
        return None;
    }
    let timeout_players = G::timeout_players(state);
    if G::deadline(state).is_some_and(|d| d <= now) {
        if let Some(system) = G::tick(state, now) {
            return Some((Actor::Server, crate::game::Input::System(system)));
        }
        if let Some(p) = timeout_players.first() {
            return Some((Actor::Player(p.clone()), G::on_timeout(state, p)));
        }
    }
    timeout_players
        .iter()
        .find(|p| personal_deadline::<G>(state, p, presence).is_some_and(|d| d <= now))
        .map(|p| (Actor::Player(p.clone()), G::on_timeout(state, p)))
}
