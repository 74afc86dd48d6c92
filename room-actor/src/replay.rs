//! Replays (`game-engine.md` §8): a finished game rebuilt from its seed and log, shown to
//! one participant as their own views only — the first scene in full, every later scene
//! as an RFC 6902 patch against the one before.
//!
//! The rebuild calls `setup` and every `apply` exactly as the room did (logged `now` and
//! RTT, the RNG continued), then checks the final state and result against the stored
//! record; any difference, an older `state_version`, or an expired log means the replay
//! cannot be shown (410). Seeds and raw logs never leave this module.

use crate::log::{GameRecord, LogEntry, StoredGame};
use crate::rebuild::{apply_entry, initial};
use engine::registry::{self, GameVisitor};
use engine::{Actor, Game, PlayerId, ViewCtx};
use serde::Serialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// One scene's caption: which input made it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub seq: u64,
    pub at: i64,
    /// The player who acted; `None` for the start and for server ticks.
    pub actor: Option<PlayerId>,
    /// `start`, `player` (a person's own action), `bot` (a bot's own action) or `auto`
    /// (the server's: a move for someone whose time ran out, a tick, the time limit).
    pub kind: &'static str,
}

/// A logged input's caption kind. Bot moves are logged `auto` (the server made them),
/// but a replay that called them "done for you when time ran out" misled players: a
/// client action by a seat the game started as a bot is the bot's own move.
fn step_kind(entry: &LogEntry, client_input: bool, bots: &[PlayerId]) -> &'static str {
    if !entry.auto {
        return "player";
    }
    match entry.actor.player() {
        Some(p) if client_input && bots.contains(p) => "bot",
        _ => "auto",
    }
}

/// `GET /api/replays/{gamePk}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    pub game_pk: String,
    pub game: String,
    pub scenes: usize,
    /// Scene 0: the viewer's full view right after the deal.
    pub first: Value,
    /// `patches[k]` turns scene k into scene k + 1.
    pub patches: Vec<json_patch::Patch>,
    /// `steps[k]` describes scene k.
    pub steps: Vec<Step>,
}

/// Why a replay cannot be shown (410). The Korean text is for people.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ReplayGone {
    #[error("the log has expired")]
    Expired,
    #[error("the game's rules changed since (state version {logged} → {current})")]
    StateVersion { logged: u32, current: u32 },
    #[error("the rebuild does not match the recorded game: {0}")]
    Mismatch(String),
    #[error("unknown game {0}")]
    UnknownGame(String),
}

impl ReplayGone {
    pub fn code(&self) -> &'static str {
        match self {
            ReplayGone::Expired => "replay_expired",
            ReplayGone::StateVersion { .. } => "replay_outdated",
            ReplayGone::Mismatch(_) | ReplayGone::UnknownGame(_) => "replay_mismatch",
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ReplayGone::Expired => "기록 보관 기간(90일)이 지나 다시 볼 수 없어요",
            ReplayGone::StateVersion { .. } => "게임 규칙이 바뀌어 이 기록은 더 이상 다시 볼 수 없어요",
            ReplayGone::Mismatch(_) | ReplayGone::UnknownGame(_) => {
                "기록을 정확히 다시 만들 수 없어서 보여 드릴 수 없어요"
            }
        }
    }
}

fn to_json<T: Serialize>(value: &T, what: &str) -> Result<Value, ReplayGone> {
    serde_json::to_value(value).map_err(|e| ReplayGone::Mismatch(format!("{what} does not serialize: {e}")))
}

/// Rebuilds `stored` and returns `viewer`'s replay.
pub fn build<G: Game>(stored: &StoredGame, record: &GameRecord, viewer: &PlayerId) -> Result<Replay, ReplayGone> {
    if stored.start.state_version != G::STATE_VERSION || record.state_version != G::STATE_VERSION {
        return Err(ReplayGone::StateVersion { logged: stored.start.state_version, current: G::STATE_VERSION });
    }
    let (mut state, mut rng) = initial::<G>(stored).map_err(|e| ReplayGone::Mismatch(e.to_string()))?;
    // The RTT table the room's views showed (connection data the log carries for this).
    let mut rtt = stored.start.rtt.clone();
    let ctx = ViewCtx { now: stored.start.started_at, rtt: Some(&rtt) };
    let first = to_json(&G::sync_view(&state, Some(viewer), &ctx), "view")?;
    let mut steps = vec![Step { seq: 0, at: stored.start.started_at, actor: None, kind: "start" }];
    let mut patches = Vec::new();
    let mut previous = first.clone();
    for (expected_seq, entry) in (1..).zip(&stored.entries) {
        if entry.seq != expected_seq {
            return Err(ReplayGone::Mismatch(format!("log gap at {expected_seq}")));
        }
        let input: engine::InputOf<G> =
            serde_json::from_str(&entry.input_json).map_err(|e| ReplayGone::Mismatch(e.to_string()))?;
        state = apply_entry::<G>(&state, &mut rng, entry).map_err(|e| ReplayGone::Mismatch(e.to_string()))?.state;
        if let Some(table) = &entry.rtt {
            rtt = table.clone();
        }
        if let engine::Input::Client(action) = &input {
            if G::is_stream_action(action) {
                continue;
            }
        }
        let scene = to_json(&G::view(&state, Some(viewer), &ViewCtx { now: entry.at, rtt: Some(&rtt) }), "view")?;
        patches.push(json_patch::diff(&previous, &scene));
        previous = scene;
        let actor = match &entry.actor {
            Actor::Player(p) => Some(p.clone()),
            Actor::Server => None,
        };
        let kind = step_kind(entry, matches!(input, engine::Input::Client(_)), &stored.start.bots);
        steps.push(Step { seq: entry.seq, at: entry.at, actor, kind });
    }
    if stored.entries.len() as u64 != record.final_seq {
        return Err(ReplayGone::Mismatch(format!(
            "{} entries, record says {}",
            stored.entries.len(),
            record.final_seq
        )));
    }
    let final_state = to_json(&state, "state")?;
    let recorded_state: Value =
        serde_json::from_str(&record.final_state_json).map_err(|e| ReplayGone::Mismatch(e.to_string()))?;
    if final_state != recorded_state {
        return Err(ReplayGone::Mismatch("final state differs".into()));
    }
    let result = to_json(&G::result(&state), "result")?;
    let recorded_result: Value =
        serde_json::from_str(&record.result_json).map_err(|e| ReplayGone::Mismatch(e.to_string()))?;
    if result != recorded_result {
        return Err(ReplayGone::Mismatch("result differs".into()));
    }
    Ok(Replay {
        game_pk: record.game_pk.clone(),
        game: record.game.clone(),
        scenes: steps.len(),
        first,
        patches,
        steps,
    })
}

struct BuildVisitor<'a> {
    stored: &'a StoredGame,
    record: &'a GameRecord,
    viewer: &'a PlayerId,
}

impl GameVisitor for BuildVisitor<'_> {
    type Output = Result<Replay, ReplayGone>;
    fn visit<G: Game>(self) -> Self::Output {
        build::<G>(self.stored, self.record, self.viewer)
    }
}

/// [`build`] for the game named in the record.
pub fn build_any(stored: &StoredGame, record: &GameRecord, viewer: &PlayerId) -> Result<Replay, ReplayGone> {
    registry::visit(&record.game, BuildVisitor { stored, record, viewer })
        .unwrap_or_else(|| Err(ReplayGone::UnknownGame(record.game.clone())))
}

/// Recently built replays, by (game, viewer): at most `capacity` entries, each for `ttl`.
pub struct ReplayCache {
    ttl: Duration,
    capacity: usize,
    // A std Mutex: lookups are short and never held across an await.
    entries: Mutex<VecDeque<Cached>>,
}

/// (game pk, viewer, built at, replay).
type Cached = (String, PlayerId, Instant, Arc<Replay>);

impl ReplayCache {
    pub fn new(ttl: Duration, capacity: usize) -> ReplayCache {
        ReplayCache { ttl, capacity, entries: Mutex::new(VecDeque::new()) }
    }

    pub fn get(&self, game_pk: &str, viewer: &PlayerId) -> Option<Arc<Replay>> {
        let mut entries = self.entries.lock().ok()?;
        let ttl = self.ttl;
        entries.retain(|(_, _, at, _)| at.elapsed() < ttl);
        entries.iter().find(|(g, v, _, _)| g == game_pk && v == viewer).map(|(_, _, _, r)| r.clone())
    }

    pub fn put(&self, viewer: &PlayerId, replay: Arc<Replay>) {
        let Ok(mut entries) = self.entries.lock() else { return };
        entries.retain(|(g, v, _, _)| !(g == &replay.game_pk && v == viewer));
        entries.push_back((replay.game_pk.clone(), viewer.clone(), Instant::now(), replay));
        while entries.len() > self.capacity {
            entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(pk: &str) -> Arc<Replay> {
        Arc::new(Replay {
            game_pk: pk.into(),
            game: "tally".into(),
            scenes: 1,
            first: Value::Null,
            patches: vec![],
            steps: vec![],
        })
    }

    #[test]
    fn cache_is_bounded_and_keyed_by_viewer() {
        let cache = ReplayCache::new(Duration::from_secs(600), 2);
        let (a, b) = (PlayerId::from("a"), PlayerId::from("b"));
        cache.put(&a, replay("g1"));
        cache.put(&b, replay("g1"));
        assert!(cache.get("g1", &a).is_some());
        assert!(cache.get("g2", &a).is_none());
        cache.put(&a, replay("g2"));
        assert!(cache.get("g1", &a).is_none(), "oldest entry evicted");
        assert!(cache.get("g1", &b).is_some());
    }

    fn entry(actor: Actor, auto: bool) -> LogEntry {
        LogEntry { seq: 1, at: 0, actor, cs: None, rtt_ms: None, auto, input_json: String::new(), rtt: None }
    }

    #[test]
    fn a_bots_own_move_is_a_bot_step_and_a_timeout_stays_auto() {
        let bots = [PlayerId::from("bot_1")];
        let (bot, person) = (Actor::Player("bot_1".into()), Actor::Player("u_1".into()));
        // A bot's client action, logged auto: the bot's own move.
        assert_eq!(step_kind(&entry(bot.clone(), true), true, &bots), "bot");
        // A system input in a bot's name (its turn timed out) stays the server's.
        assert_eq!(step_kind(&entry(bot, true), false, &bots), "auto");
        // A person's action, and the server acting for a person whose time ran out.
        assert_eq!(step_kind(&entry(person.clone(), false), true, &bots), "player");
        assert_eq!(step_kind(&entry(person, true), true, &bots), "auto");
        assert_eq!(step_kind(&entry(Actor::Server, true), false, &bots), "auto");
    }

    #[test]
    fn cache_entries_expire() {
        let cache = ReplayCache::new(Duration::ZERO, 8);
        cache.put(&"a".into(), replay("g1"));
        assert!(cache.get("g1", &"a".into()).is_none());
    }
}
