//! The games' scripted players: what a client reads of a Halli Galli view (one pass over
//! the message, [`HgMessage`]) or a cockroach-poker one, and the moves it plans from them
//! after its reaction time. Apart from the client's socket, timing and counting
//! (`mod.rs`), which are the same for every game; `soak` plays cockroach poker with
//! [`cockroach_action`] too.

use super::{Client, Planned};
use crate::loadgen::net::Envelope;
use crate::loadgen::GameKind;
use engine::Rng;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Deserialize)]
pub(super) struct WithView<V> {
    pub(super) view: V,
}

/// A Halli Galli server message read in one pass: [`Envelope`]'s fields and the view.
#[derive(Deserialize)]
pub(super) struct HgMessage {
    pub(super) t: String,
    pub(super) seq: Option<u64>,
    pub(super) cs: Option<u64>,
    pub(super) code: Option<String>,
    pub(super) view: Option<HgView>,
}

/// The parts of a halli-galli view a scripted client plays from.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HgView {
    pub phase: String,
    pub now: i64,
    pub turn: Option<String>,
    pub table_version: u64,
    pub players: HashMap<String, HgPlayer>,
    pub flip_allowed_at: i64,
    pub can_flip: bool,
    pub can_ring: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HgPlayer {
    pub top: Option<HgFace>,
    pub active: bool,
}

#[derive(Deserialize)]
pub struct HgFace {
    pub fruit: String,
    pub count: u32,
}

impl HgView {
    /// Whether some fruit totals exactly five among the active players' tops.
    pub fn has_five(&self) -> bool {
        let mut sums: HashMap<&str, u32> = HashMap::new();
        for p in self.players.values().filter(|p| p.active) {
            if let Some(face) = &p.top {
                *sums.entry(face.fruit.as_str()).or_default() += face.count;
            }
        }
        sums.values().any(|s| *s == 5)
    }
}

/// Creature kinds a cockroach-poker claim may name.
const CP_KINDS: [&str; 8] = ["cockroach", "bat", "fly", "toad", "rat", "scorpion", "spider", "stinkbug"];

/// A random legal-looking cockroach-poker move for `me` from a view, or `None` when it is
/// not `me`'s move (or the game is over). `soak` plays cockroach poker with it too.
pub fn cockroach_action(view: &Value, me: &str, rng: &mut Rng) -> Option<Value> {
    if !view.get("loser").is_none_or(Value::is_null) {
        return None;
    }
    let s = |k: &str| view.get(k).and_then(Value::as_str);
    let targets: Vec<&str> = view
        .get("passTargets")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let peeked = view.get("peeked").and_then(Value::as_bool).unwrap_or(false);
    let kind = CP_KINDS[rng.index(CP_KINDS.len())];
    if s("holder") == Some(me) {
        if peeked {
            let to = rng.pick(&targets)?.to_string();
            Some(json!({"type": "pass", "to": to, "claim": kind}))
        } else if !targets.is_empty() && rng.chance(0.3) {
            Some(json!({"type": "peek"}))
        } else {
            Some(json!({"type": "call", "call": if rng.chance(0.5) { "true" } else { "false" }}))
        }
    } else if s("holder").is_none() && s("starter") == Some(me) {
        let hand: Vec<(u64, String)> = view
            .get("hand")
            .and_then(Value::as_array)
            .map(|h| {
                h.iter().filter_map(|c| Some((c.get("id")?.as_u64()?, c.get("kind")?.as_str()?.to_owned()))).collect()
            })
            .unwrap_or_default();
        let others: Vec<&str> = view
            .get("order")
            .and_then(Value::as_array)
            .map(|o| o.iter().filter_map(Value::as_str).filter(|p| *p != me).collect())
            .unwrap_or_default();
        let (id, real) = rng.pick(&hand).cloned()?;
        let to = rng.pick(&others)?.to_string();
        let claim = if rng.chance(0.5) { real } else { kind.to_owned() };
        Some(json!({"type": "offer", "cardId": id, "to": to, "claim": claim}))
    } else {
        None
    }
}

impl Client {
    /// Cockroach poker: plans this player's move on the latest view, once per seq.
    pub(super) fn think_cp(&mut self) {
        if self.cfg.game != GameKind::CockroachPoker {
            return;
        }
        let Some((seq, view)) = self.cp_view.take() else { return };
        if self.cp_acted != Some(seq) {
            if let Some(action) = cockroach_action(&view, &self.player.me, &mut self.rng) {
                self.cp_acted = Some(seq);
                let at = Instant::now().max(self.not_before) + self.reaction();
                self.plans.push(Planned { at, action });
            }
        }
        self.cp_view = Some((seq, view));
    }

    /// After an ack or reject: a halli-galli flip is no longer in flight; a refused
    /// cockroach-poker move is chosen again.
    pub(super) fn after_answer(&mut self, env: &Envelope) {
        if self.cfg.game == GameKind::CockroachPoker {
            if env.t == "reject" {
                self.cp_acted = None;
                self.think_cp();
            }
            return;
        }
        if self.cfg.game != GameKind::HalliGalli {
            return;
        }
        if env.t == "reject" && self.flip_planned && self.plans.is_empty() {
            // The flip (or a ring) was refused; try the flip again shortly if still our turn.
            self.flip_planned = false;
            if let Some(view) = self.last_view.take() {
                self.on_view(view);
            }
        }
    }

    fn reaction(&mut self) -> Duration {
        let base = self.cfg.reaction;
        base + base.mul_f64(self.rng.next() * 0.5)
    }

    pub(super) fn on_view(&mut self, view: HgView) {
        if view.phase != "playing" {
            self.flip_planned = false;
            self.last_view = Some(view);
            return;
        }
        let now = Instant::now().max(self.not_before);
        let my_turn = view.turn.as_deref() == Some(self.player.me.as_str());
        if !my_turn {
            self.flip_planned = false;
        }
        if my_turn && view.can_flip && !self.flip_planned {
            let wait = Duration::from_millis(u64::try_from(view.flip_allowed_at - view.now).unwrap_or(0));
            let at = now + wait + self.reaction();
            self.plans.push(Planned { at, action: json!({"type": "flip"}) });
            self.flip_planned = true;
        }
        if view.can_ring && self.ring_planned_for != Some(view.table_version) {
            if view.has_five() {
                let at = now + self.reaction();
                self.plans.push(Planned { at, action: json!({"type": "ring", "version": view.table_version}) });
                self.ring_planned_for = Some(view.table_version);
            } else if self.rng.chance(self.cfg.bad_ring_rate) {
                // Half wrong (no five on the table), half stale (an old table version).
                let version =
                    if self.rng.chance(0.5) { view.table_version } else { view.table_version.saturating_sub(1) };
                let at = now + self.reaction();
                self.plans.push(Planned { at, action: json!({"type": "ring", "version": version}) });
                self.ring_planned_for = Some(view.table_version);
            }
        }
        self.last_view = Some(view);
    }
}
