//! One person in a cycle: plays its game on its socket (tally bumps, halli-galli flips
//! and rings, cockroach-poker moves), resends after `room_unavailable`, drops and comes
//! back as planned, and leaves.

use super::counts::{Counts, Progress};
use super::net::{close_gracefully, connect_sub, drop_abruptly, leave_seat, SEND_TIMEOUT};
use super::plan::{CyclePlan, PlayerPlan};
use crate::loadgen::{self, GameKind, HgView, Session, Ws};
use anyhow::{bail, Context};
use engine::{Rng, Seed};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Longest silence on a socket while waiting for the game (the server pings every 2 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Rejected actions one player may collect before the cycle is called broken.
const MAX_REJECTS: u32 = 200;
/// `room_unavailable` answers one player may resend (same `cs`) before giving up.
const MAX_RESENDS: u32 = 50;
/// Wait before resending after `room_unavailable`.
const RESEND_AFTER: Duration = Duration::from_millis(200);
/// After this long in play, the halli-galli player who ends the game does so anyway.
const HG_END_AFTER: Duration = Duration::from_secs(12);

/// What an action was, to know what to undo when it is rejected.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Bump,
    Flip,
    Ring,
    WrongRing,
    Cockroach,
}

/// Per-game memory of a player between messages.
#[derive(Default)]
pub(super) struct Brain {
    started: bool,
    /// Tally: a bump is planned.
    bump_planned: bool,
    /// Halli-galli.
    flip_planned_for: Option<u64>,
    ring_planned_for: Option<u64>,
    wrong_sent: bool,
    flips: u32,
    playing_since: Option<Instant>,
    /// Cockroach poker: the seq already acted on.
    acted_seq: Option<u64>,
    /// The latest view (re-read after a reject).
    last: Option<(u64, Value)>,
}

pub(super) struct Player<'a> {
    k: usize,
    plan: PlayerPlan,
    game: GameKind,
    http: &'a reqwest::Client,
    base: &'a str,
    session: Session,
    room: &'a str,
    rng: Rng,
    next_cs: u64,
    /// Sent and not yet answered: cs → what it was (resent as is after `room_unavailable`).
    pending: HashMap<u64, (Kind, Value)>,
    /// Planned sends: when, what, and the cs when it is a resend.
    actions: Vec<(Instant, Kind, Value, Option<u64>)>,
    resends: u32,
    brain: Brain,
    updates: u32,
    rejects: u32,
    result: bool,
    counts: Counts,
    progress: &'a Progress,
}

/// How a player's time with a socket ended.
pub(super) enum Ended {
    Result,
    Dropped,
}

impl<'a> Player<'a> {
    /// Player `k` of `cycle` (its own RNG from the cycle's seed).
    pub(super) fn new(
        k: usize,
        cycle: &CyclePlan,
        http: &'a reqwest::Client,
        base: &'a str,
        session: Session,
        room: &'a str,
        progress: &'a Progress,
    ) -> Player<'a> {
        Player {
            k,
            plan: cycle.players[k].clone(),
            game: cycle.game,
            http,
            base,
            session,
            room,
            rng: Rng::from_seed(Seed(cycle.seed ^ ((k as u128 + 1) << 100))),
            next_cs: 1,
            pending: HashMap::new(),
            actions: Vec::new(),
            resends: 0,
            brain: Brain::default(),
            updates: 0,
            rejects: 0,
            result: false,
            counts: Counts::default(),
            progress,
        }
    }

    fn reaction(&mut self) -> Duration {
        let (base, spread) = self.plan.reaction_ms;
        Duration::from_millis(u64::from(base + self.rng.int(spread.max(1))))
    }

    fn plan(&mut self, kind: Kind, action: Value) {
        let at = Instant::now() + self.reaction();
        self.actions.push((at, kind, action, None));
    }

    /// Everything planned for the old socket is gone with it.
    fn forget(&mut self) {
        self.pending.clear();
        self.actions.clear();
        self.brain.bump_planned = false;
        self.brain.flip_planned_for = None;
        self.brain.ring_planned_for = None;
        self.brain.wrong_sent = false;
        self.brain.acted_seq = None;
    }

    async fn send(&mut self, ws: &mut Ws, kind: Kind, action: Value, resend: Option<u64>) -> anyhow::Result<()> {
        let cs = resend.unwrap_or_else(|| {
            self.next_cs += 1;
            self.next_cs - 1
        });
        let text = json!({"t": "act", "room": self.room, "cs": cs, "a": action}).to_string();
        timeout(SEND_TIMEOUT, ws.send(Message::text(text))).await.context("act: send timed out")??;
        self.pending.insert(cs, (kind, action));
        if resend.is_none() {
            self.counts.sent += 1;
        }
        Ok(())
    }

    /// Plays on `ws` until the result, or until the planned drop.
    async fn play(&mut self, ws: &mut Ws, first: Option<String>) -> anyhow::Result<Ended> {
        if let Some(text) = first {
            self.on_text(&text)?;
        }
        loop {
            if self.result {
                return Ok(Ended::Result);
            }
            if let Some(d) = &self.plan.drop {
                if self.updates >= d.after_updates {
                    return Ok(Ended::Dropped);
                }
            }
            let due = self.actions.iter().map(|a| a.0).min();
            self.progress.player(self.k, if due.is_some() { "playing" } else { "waiting for the server" });
            tokio::select! {
                msg = timeout(IDLE_TIMEOUT, ws.next()) => {
                    match msg {
                        Err(_) => bail!("idle: no message for {} s", IDLE_TIMEOUT.as_secs()),
                        Ok(Some(Ok(Message::Text(text)))) => self.on_text(text.as_str())?,
                        Ok(Some(Ok(Message::Close(frame)))) => bail!("server closed the socket: {frame:?}"),
                        Ok(Some(Ok(_))) => {}
                        Ok(Some(Err(e))) => bail!("socket: {e}"),
                        Ok(None) => bail!("socket ended"),
                    }
                }
                _ = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    let now = Instant::now();
                    let (ready, later): (Vec<_>, Vec<_>) = self.actions.drain(..).partition(|a| a.0 <= now);
                    self.actions = later;
                    for (_, kind, action, resend) in ready {
                        if kind == Kind::Bump && resend.is_none() {
                            self.brain.bump_planned = false;
                        }
                        self.send(ws, kind, action, resend).await?;
                    }
                }
            }
        }
    }

    fn on_text(&mut self, text: &str) -> anyhow::Result<()> {
        let v: Value = serde_json::from_str(text).with_context(|| format!("bad server message: {text:.200}"))?;
        let t = v.get("t").and_then(Value::as_str).unwrap_or("");
        let seq = v.get("seq").and_then(Value::as_u64);
        let cs = v.get("cs").and_then(Value::as_u64);
        match t {
            "sync" | "update" => {
                if t == "update" {
                    self.updates += 1;
                    self.counts.updates += 1;
                }
                if let (Some(seq), Some(view)) = (seq, v.get("view")) {
                    // Before the start the sync carries the room's info, not a game view.
                    if view.get("seats").is_none() {
                        self.brain.started = true;
                        self.brain.last = Some((seq, view.clone()));
                        self.think()?;
                    }
                }
            }
            "ack" => {
                let kind = cs.and_then(|cs| self.pending.remove(&cs)).map(|p| p.0);
                self.counts.acks += 1;
                if kind == Some(Kind::Flip) {
                    self.brain.flips += 1;
                }
            }
            "reject" => {
                let code = v.get("code").and_then(Value::as_str).unwrap_or("").to_owned();
                *self.counts.rejects.entry(code).or_default() += 1;
                self.rejects += 1;
                if self.rejects > MAX_REJECTS {
                    bail!("more than {MAX_REJECTS} rejects (last: {text:.200})");
                }
                match cs.and_then(|cs| self.pending.remove(&cs)).map(|p| p.0) {
                    Some(Kind::Flip) => self.brain.flip_planned_for = None,
                    Some(Kind::WrongRing) => self.brain.wrong_sent = false,
                    Some(Kind::Cockroach) => self.brain.acted_seq = None,
                    _ => {}
                }
                self.think()?;
            }
            "result" => {
                self.result = true;
                self.counts.results += 1;
            }
            "room" => {}
            "error" => {
                // The action's fate is unknown (PROTOCOL.md): send the same cs again.
                let code = v.get("code").and_then(Value::as_str);
                let Some((cs, (kind, action))) = cs
                    .filter(|_| code == Some("room_unavailable"))
                    .and_then(|cs| Some((cs, self.pending.get(&cs)?.clone())))
                else {
                    bail!("server error: {text:.200}");
                };
                self.counts.unavailable += 1;
                self.resends += 1;
                if self.resends > MAX_RESENDS {
                    bail!("more than {MAX_RESENDS} resends after room_unavailable");
                }
                self.actions.push((Instant::now() + RESEND_AFTER, kind, action, Some(cs)));
            }
            other => bail!("unknown message type {other:?}"),
        }
        Ok(())
    }

    /// Decides what to do about the latest view.
    fn think(&mut self) -> anyhow::Result<()> {
        if self.result || !self.brain.started {
            return Ok(());
        }
        match self.game {
            GameKind::Tally => {
                if !self.brain.bump_planned {
                    self.brain.bump_planned = true;
                    self.plan(Kind::Bump, json!({"type": "bump"}));
                }
            }
            GameKind::HalliGalli => self.think_hg()?,
            GameKind::CockroachPoker => self.think_cp(),
        }
        Ok(())
    }

    fn think_hg(&mut self) -> anyhow::Result<()> {
        let Some((_, view)) = &self.brain.last else { return Ok(()) };
        let view: HgView = serde_json::from_value(view.clone()).context("bad halli-galli view")?;
        if view.phase != "playing" {
            return Ok(());
        }
        let since = *self.brain.playing_since.get_or_insert_with(Instant::now);
        let tv = view.table_version;
        if self.plan.ender
            && !self.brain.wrong_sent
            && (self.brain.flips >= self.plan.quota || since.elapsed() > HG_END_AFTER)
            && view.can_ring
            && !view.has_five()
        {
            // A wrong ring in a duel loses at once (`duelWrongLoses`): the game ends.
            self.brain.wrong_sent = true;
            self.brain.ring_planned_for = Some(tv);
            self.plan(Kind::WrongRing, json!({"type": "ring", "version": tv}));
            return Ok(());
        }
        if view.can_ring && view.has_five() && self.brain.ring_planned_for != Some(tv) {
            self.brain.ring_planned_for = Some(tv);
            self.plan(Kind::Ring, json!({"type": "ring", "version": tv}));
        }
        let my_turn = view.turn.as_deref() == Some(self.session.user_id.as_str());
        if my_turn && view.can_flip && self.brain.flip_planned_for != Some(tv) {
            self.brain.flip_planned_for = Some(tv);
            let wait = Duration::from_millis(u64::try_from(view.flip_allowed_at - view.now).unwrap_or(0));
            let at = Instant::now() + wait + self.reaction();
            self.actions.push((at, Kind::Flip, json!({"type": "flip"}), None));
        }
        Ok(())
    }

    fn think_cp(&mut self) {
        let Some((seq, view)) = &self.brain.last else { return };
        let (seq, view) = (*seq, view.clone());
        if self.brain.acted_seq == Some(seq) {
            return;
        }
        let Some(action) = loadgen::play::cockroach_action(&view, &self.session.user_id, &mut self.rng) else {
            return;
        };
        self.brain.acted_seq = Some(seq);
        self.plan(Kind::Cockroach, action);
    }

    /// The whole life of one person in a cycle: play, maybe drop (and come back), leave.
    pub(super) async fn run(mut self, ws: Ws, first: Option<String>) -> Counts {
        let result = self.run_inner(ws, first).await;
        if let Err(e) = result {
            self.counts.error(format!("{} p{}: {e:#}", self.game.id(), self.k));
        }
        self.progress.player(self.k, "done");
        self.counts
    }

    async fn run_inner(&mut self, mut ws: Ws, first: Option<String>) -> anyhow::Result<()> {
        match self.play(&mut ws, first).await? {
            Ended::Result => {}
            Ended::Dropped => {
                let Some(plan) = self.plan.drop.take() else { bail!("dropped without a plan") };
                self.progress.player(self.k, "dropped");
                if plan.rst {
                    self.counts.drops_rst += 1;
                } else {
                    self.counts.drops_fin += 1;
                }
                drop_abruptly(ws, plan.rst);
                self.forget();
                let Some(after) = plan.reconnect_after else {
                    if plan.leave {
                        self.progress.player(self.k, "leaving the seat");
                        leave_seat(self.http, self.base, &self.session.token, self.room).await?;
                        self.counts.leaves += 1;
                    }
                    return Ok(());
                };
                sleep(after).await;
                self.progress.player(self.k, "reconnecting");
                let (again, sync) =
                    connect_sub(self.base, &self.session.token, self.room).await.context("reconnect")?;
                ws = again;
                self.counts.reconnects += 1;
                if let Ended::Dropped = self.play(&mut ws, Some(sync)).await? {
                    bail!("dropped twice");
                }
            }
        }
        self.progress.player(self.k, "leaving");
        if self.plan.final_abrupt {
            self.counts.final_abrupt += 1;
            drop_abruptly(ws, self.plan.final_rst);
            return Ok(());
        }
        if self.plan.unsub_first {
            let unsub = json!({"t": "unsub", "room": self.room}).to_string();
            timeout(SEND_TIMEOUT, ws.send(Message::text(unsub))).await.context("unsub: send timed out")??;
        }
        close_gracefully(&mut ws).await?;
        self.counts.final_graceful += 1;
        Ok(())
    }
}
