//! The scenarios: one [`Client`] per player socket, playing its room's game.
//!
//! - **tally, open loop** (the default): the client's share of the run's rate (or one bump
//!   per `--interval-ms`) on a schedule fixed in advance; a bump is sent when it is due
//!   whether or not earlier ones were answered, and its latency runs from the time it was
//!   *due*, so a slow server (or a late load generator) shows up in the tail instead of
//!   silently thinning the load (coordinated omission). Bumps sent later than
//!   `--late-ms` after their time are counted as late; bumps due in the window that were
//!   never sent are counted as missed.
//! - **tally, closed loop** (`--closed-loop`): a tick every interval, skipped (and
//!   counted) while `--max-in-flight` bumps are unanswered; latency from the actual send.
//!   This is the old behaviour, kept for comparison.
//! - **halli-galli**: flip when the view's turn is ours and `canFlip`, ring on five of a
//!   fruit (or wrongly / stale with `--bad-ring-rate`), each after `--reaction-ms` (+0–50 %);
//!   the host restarts a finished game. Each action's latency runs from the time it was
//!   planned for. Each room's players make their first move at a random point of the
//!   window's first second ([`STAGGER`]), as tables that sat down at different times do.
//! - **cockroach-poker**: the player whose move it is (the starter offers a random card
//!   with a true or false claim to a random player; the holder peeks, passes or calls at
//!   random) acts after `--reaction-ms`; the host restarts a finished game. Same latency.

use super::net::{post, Envelope, Player};
use super::spec::Schedule;
use super::stats::Recorder;
use super::{Config, GameKind, LoopMode};
use engine::{Rng, Seed};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};
use tokio_tungstenite::tungstenite::Message;

/// How long clients wait after the window for answers to actions in flight.
pub const DRAIN: Duration = Duration::from_secs(3);
/// Halli Galli and cockroach poker: each room's players hold their first move for a
/// random part of this after the window opens. Every room's game started in the ramp but
/// nobody moved until the window, so without it all rooms moved at once and stayed in step
/// (one wave of ~4,500 flips every ~0.9 s at 4,500 rooms: a Halli Galli turn is the 600 ms
/// flip guard plus the reaction), a load no server sees from players who sat down at
/// different times. One second is about a Halli Galli turn.
pub const STAGGER: Duration = Duration::from_secs(1);

/// When in [`STAGGER`] the room of the client seeded `seed` starts to move: the same for
/// the four players of a room (their seeds differ in the two low bits, see
/// `runner::start_clients`), spread evenly over rooms.
pub fn room_phase(seed: u128) -> Duration {
    STAGGER.mul_f64(Rng::from_seed(Seed(seed >> 2)).next())
}
/// Recent updates a client remembers to match acks against.
const RECENT_UPDATES: usize = 256;

/// Keeps the clients of a run connected until the last of them has drained, so the
/// answers to actions still in flight when the window closes are not timed against a
/// server busy closing every other socket of the run at once (the teardown is not the
/// load being measured: it put 150–290 ms answers at the top of Halli Galli's latency).
/// A client stopped during the window (socket stages) or whose socket failed leaves at
/// once; one that reached the end of the window waits for the others, at most [`DRAIN`]
/// more, reading (and dropping) what the server still sends.
pub struct Hold {
    /// Clients started and not yet done with their window and drain.
    playing: std::sync::atomic::AtomicUsize,
    all_done: watch::Sender<bool>,
}

impl Hold {
    pub fn new() -> Arc<Hold> {
        Arc::new(Hold { playing: std::sync::atomic::AtomicUsize::new(0), all_done: watch::Sender::new(false) })
    }

    /// A client starts playing.
    fn join(&self) {
        if self.playing.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            self.all_done.send_replace(false);
        }
    }

    /// A client is done with its window and drain; the last one releases the others.
    fn done(&self) {
        if self.playing.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.all_done.send_replace(true);
        }
    }

    fn released(&self) -> watch::Receiver<bool> {
        self.all_done.subscribe()
    }
}

/// The window as a client sees it: when it opens and closes, and (tally, open loop) this
/// client's schedule of bumps from `start`.
#[derive(Clone, Debug)]
pub struct Go {
    pub start: Instant,
    pub end: Instant,
    pub schedule: Option<Arc<Schedule>>,
}

#[derive(Deserialize)]
struct WithView<V> {
    view: V,
}

/// A Halli Galli server message read in one pass: [`Envelope`]'s fields and the view.
#[derive(Deserialize)]
struct HgMessage {
    t: String,
    seq: Option<u64>,
    cs: Option<u64>,
    code: Option<String>,
    view: Option<HgView>,
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

/// An action a client will send at `at`.
struct Planned {
    at: Instant,
    action: Value,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ramp,
    Window,
    Drain,
}

/// One client's play: reads everything, acts per its game, counts into the recorder.
pub struct Client {
    cfg: Arc<Config>,
    player: Player,
    rng: Rng,
    rec: Arc<Mutex<Recorder>>,
    next_cs: u64,
    /// cs → (scheduled at, counted in the window).
    pending: HashMap<u64, (Instant, bool)>,
    recent: VecDeque<(u64, Instant)>,
    plans: Vec<Planned>,
    /// Tally, open loop: the schedule, its origin, this client's offset and the next bump.
    schedule: Option<(Arc<Schedule>, Instant)>,
    offset: f64,
    next_k: u64,
    /// Halli-galli: a flip is planned or in flight.
    flip_planned: bool,
    /// Halli-galli: the table version a ring was last planned for.
    ring_planned_for: Option<u64>,
    last_view: Option<HgView>,
    /// Halli Galli and cockroach poker: no move is planned before this (see [`STAGGER`]).
    not_before: Instant,
    /// This client's room's start within [`STAGGER`].
    room_phase: Duration,
    /// Cockroach poker: the latest view (with its seq) and the seq last acted on.
    cp_view: Option<(u64, Value)>,
    cp_acted: Option<u64>,
    updates: u64,
    results: u64,
    hold: Arc<Hold>,
}

impl Client {
    pub fn new(cfg: Arc<Config>, player: Player, seed: u128, rec: Arc<Mutex<Recorder>>, hold: Arc<Hold>) -> Client {
        let mut rng = Rng::from_seed(Seed(seed));
        let offset = rng.next();
        let room_phase = room_phase(seed);
        hold.join();
        Client {
            cfg,
            player,
            rng,
            rec,
            next_cs: 1,
            pending: HashMap::new(),
            recent: VecDeque::with_capacity(RECENT_UPDATES),
            plans: Vec::new(),
            schedule: None,
            offset,
            next_k: 0,
            flip_planned: false,
            ring_planned_for: None,
            last_view: None,
            not_before: Instant::now(),
            room_phase,
            cp_view: None,
            cp_acted: None,
            updates: 0,
            results: 0,
            hold,
        }
    }

    fn rec(&self) -> std::sync::MutexGuard<'_, Recorder> {
        self.rec.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn error(&self, message: String) {
        self.rec().error(message);
    }

    /// The next scheduled bump (open-loop tally).
    fn next_due(&self) -> Option<Instant> {
        let (s, origin) = self.schedule.as_ref()?;
        s.time_of(self.next_k as f64 + self.offset).map(|t| *origin + t)
    }

    /// Plays until the window (or `stop`) ends and the drain is over.
    pub async fn run(mut self, mut go: watch::Receiver<Option<Go>>, mut stop: watch::Receiver<bool>) {
        let mut phase = Phase::Ramp;
        let mut deadline = Instant::now() + Duration::from_secs(24 * 3600);
        let mut tick = tokio::time::interval(self.cfg.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let tally = self.cfg.game == GameKind::Tally;
        let open = self.cfg.mode == LoopMode::Open;
        let mut started = go.borrow_and_update().clone();
        let mut stoppable = true;
        // Whether this client waits for the others before closing (see [`Hold`]).
        let mut hold = true;
        loop {
            if let (Phase::Ramp, Some(g)) = (phase, started.take()) {
                phase = Phase::Window;
                deadline = g.end;
                if tally && open {
                    self.schedule = g.schedule.map(|s| (s, g.start));
                } else {
                    // Closed loop: stagger the ticks over one interval.
                    let offset = self.cfg.interval.mul_f64(self.offset);
                    tick = tokio::time::interval_at(g.start + offset, self.cfg.interval);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
                self.not_before = g.start + self.room_phase;
                if let Some(view) = self.last_view.take() {
                    self.on_view(view);
                }
                self.think_cp();
            }
            let next_plan = self.plans.iter().map(|p| p.at).min();
            let next_due = if phase == Phase::Window { self.next_due() } else { None };
            tokio::select! {
                changed = go.changed(), if phase == Phase::Ramp => {
                    match changed {
                        Ok(()) => started = go.borrow_and_update().clone(),
                        Err(_) => break,
                    }
                }
                changed = stop.changed(), if phase == Phase::Window && stoppable => {
                    match changed {
                        Ok(()) if *stop.borrow() => {
                            // Stopped during the window: its teardown is part of the load.
                            deadline = Instant::now();
                            hold = false;
                        }
                        Ok(()) => {}
                        // Nobody can stop this client early any more.
                        Err(_) => stoppable = false,
                    }
                }
                _ = sleep_until(deadline) => {
                    match phase {
                        Phase::Window => {
                            phase = Phase::Drain;
                            self.close_window(deadline);
                            deadline = Instant::now() + DRAIN;
                            if self.pending.is_empty() {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
                _ = sleep_until(next_due.unwrap_or(deadline)), if next_due.is_some() => {
                    // Every bump that is due goes out now, each stamped with its own time.
                    let now = Instant::now();
                    while let Some(due) = self.next_due().filter(|d| *d <= now && *d < deadline) {
                        self.next_k += 1;
                        self.send(json!({"type": "bump"}), due).await;
                    }
                    if self.next_due().is_some_and(|d| d >= deadline) {
                        self.schedule = None;
                    }
                }
                _ = tick.tick(), if phase == Phase::Window && tally && !open => {
                    let now = Instant::now();
                    if self.pending.len() < self.cfg.max_in_flight {
                        self.send(json!({"type": "bump"}), now).await;
                    } else {
                        self.rec().skip(now);
                    }
                }
                _ = sleep_until(next_plan.unwrap_or(deadline)), if phase == Phase::Window && next_plan.is_some() => {
                    let now = Instant::now();
                    let (due, later): (Vec<Planned>, Vec<Planned>) = self.plans.drain(..).partition(|p| p.at <= now);
                    self.plans = later;
                    for p in due {
                        self.send(p.action, p.at).await;
                    }
                }
                msg = self.player.ws.next() => {
                    match msg {
                        Some(Ok(Message::Text(text))) => self.on_text(text.as_str(), phase),
                        Some(Ok(Message::Close(frame))) => {
                            if phase != Phase::Drain {
                                self.error(format!("server closed the socket: {frame:?}"));
                            }
                            hold = false;
                            break;
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            self.error(format!("socket: {e}"));
                            hold = false;
                            break;
                        }
                        None => {
                            self.error("socket ended".into());
                            hold = false;
                            break;
                        }
                    }
                    if phase == Phase::Drain && self.pending.is_empty() {
                        break;
                    }
                }
            }
        }
        if phase == Phase::Window {
            // The socket failed mid-window: what was still due is missed.
            self.close_window(deadline);
        }
        let unanswered = self.pending.values().filter(|(_, counted)| *counted).count() as u64;
        {
            let mut rec = self.rec();
            rec.sockets = rec.sockets.saturating_sub(1);
            if phase != Phase::Ramp {
                rec.updates += self.updates;
                rec.results += self.results;
            }
            rec.unanswered_add(unanswered, phase != Phase::Ramp);
            rec.open_at_end += u64::from(phase == Phase::Drain);
        }
        let mut released = self.hold.released();
        self.hold.done();
        if phase == Phase::Drain && hold {
            let until = Instant::now() + DRAIN;
            loop {
                tokio::select! {
                    _ = released.wait_for(|all| *all) => break,
                    _ = sleep_until(until) => break,
                    msg = self.player.ws.next() => if !matches!(msg, Some(Ok(_))) { break },
                }
            }
        }
        let _ = self.player.ws.close(None).await;
    }

    /// The window is over: whatever was due before `end` and not sent is counted missed.
    fn close_window(&mut self, end: Instant) {
        let mut missed = 0u64;
        while self.next_due().is_some_and(|d| d < end) {
            self.next_k += 1;
            missed += 1;
        }
        self.schedule = None;
        missed += self.plans.iter().filter(|p| p.at < end).count() as u64;
        self.plans.clear();
        if missed > 0 {
            self.rec().miss(missed);
        }
    }

    async fn send(&mut self, action: Value, scheduled: Instant) {
        let cs = self.next_cs;
        self.next_cs += 1;
        let text = json!({"t": "act", "room": self.player.room, "cs": cs, "a": action}).to_string();
        // Open loop: latency from when the action was due; closed loop: from now.
        let from = if self.cfg.mode == LoopMode::Open { scheduled } else { Instant::now() };
        let counting = {
            let mut rec = self.rec();
            rec.sent(scheduled, Instant::now());
            rec.counting()
        };
        self.pending.insert(cs, (from, counting));
        if let Err(e) = self.player.ws.send(Message::text(text)).await {
            self.pending.remove(&cs);
            self.error(format!("send: {e}"));
        }
    }

    fn on_text(&mut self, text: &str, phase: Phase) {
        let received = Instant::now();
        // Halli Galli: the envelope and the view in one pass over the text (an update is
        // ~1.4 KB of view, and loadgen's one core parses ~24,000 of them a second at 4,500
        // rooms); anything that does not read so (a message whose `view` is another shape)
        // takes the two-step path below.
        let (env, hg_view) = match self.cfg.game {
            GameKind::HalliGalli => match serde_json::from_str::<HgMessage>(text) {
                Ok(m) => (Ok(Envelope { t: m.t, seq: m.seq, cs: m.cs, code: m.code }), m.view),
                Err(_) => (serde_json::from_str(text), None),
            },
            _ => (serde_json::from_str(text), None),
        };
        let env: Envelope = match env {
            Ok(e) => e,
            Err(e) => return self.error(format!("bad server message ({e}): {text:.200}")),
        };
        let counting = phase != Phase::Ramp;
        match env.t.as_str() {
            "update" | "sync" => {
                if env.t == "update" {
                    if let Some(seq) = env.seq {
                        if self.recent.len() == RECENT_UPDATES {
                            self.recent.pop_front();
                        }
                        self.recent.push_back((seq, received));
                    }
                    if counting {
                        self.updates += 1;
                    }
                }
                match self.cfg.game {
                    GameKind::HalliGalli => match hg_view
                        .map_or_else(|| serde_json::from_str::<WithView<HgView>>(text), |view| Ok(WithView { view }))
                    {
                        Ok(v) if phase == Phase::Window => self.on_view(v.view),
                        Ok(v) => self.last_view = Some(v.view),
                        Err(e) => self.error(format!("bad halli-galli view ({e})")),
                    },
                    GameKind::CockroachPoker => match serde_json::from_str::<WithView<Value>>(text) {
                        Ok(v) => {
                            self.cp_view = Some((env.seq.unwrap_or(0), v.view));
                            if phase == Phase::Window {
                                self.think_cp();
                            }
                        }
                        Err(e) => self.error(format!("bad cockroach-poker view ({e})")),
                    },
                    GameKind::Tally => {}
                }
            }
            "ack" => {
                let (Some(cs), Some(seq)) = (env.cs, env.seq) else {
                    return self.error(format!("ack without cs/seq: {text:.200}"));
                };
                let Some((from, counted)) = self.pending.remove(&cs) else {
                    return self.error(format!("ack for unknown cs {cs}"));
                };
                if counted {
                    match self.recent.iter().rev().find(|(s, _)| *s == seq) {
                        Some((_, at)) => {
                            let latency = at.saturating_duration_since(from);
                            self.rec().ack(Some(latency), received);
                        }
                        None => {
                            let mut rec = self.rec();
                            rec.ack(None, received);
                            rec.error(format!("ack for seq {seq} without its update"));
                        }
                    }
                }
                self.after_answer(&env);
            }
            "reject" => {
                let Some(cs) = env.cs else {
                    return self.error(format!("reject without cs: {text:.200}"));
                };
                if let Some((_, true)) = self.pending.remove(&cs) {
                    self.rec().reject(env.code.as_deref().unwrap_or_default(), received);
                }
                self.after_answer(&env);
            }
            "result" => {
                if counting {
                    self.results += 1;
                }
                self.flip_planned = false;
                if let (Some(r), Phase::Window) = (&self.player.restart, phase) {
                    // The host starts the next game; a failure shows up as a silent room.
                    let (r, room) = (r.clone(), self.player.room.clone());
                    tokio::spawn(async move {
                        let url = format!("{}/api/rooms/{room}/start", r.base);
                        let _ = post(&r.http, url, Some(&r.token), json!({})).await;
                    });
                }
            }
            "room" => {}
            "error" => {
                if let Some(cs) = env.cs {
                    self.pending.remove(&cs);
                }
                self.error(format!("server error: {text:.200}"));
            }
            other => self.error(format!("unknown message type {other:?}")),
        }
    }

    /// Cockroach poker: plans this player's move on the latest view, once per seq.
    fn think_cp(&mut self) {
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
    fn after_answer(&mut self, env: &Envelope) {
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

    fn on_view(&mut self, view: HgView) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rooms_players_start_together_and_rooms_spread_over_the_stagger() {
        // As runner::start_clients seeds them: run seed high, room * 4 + player low.
        let seed = |room: u128, k: u128| (7u128 << 64) | (room * 4 + k);
        for room in 0..100 {
            let phase = room_phase(seed(room, 0));
            for k in 1..4 {
                assert_eq!(room_phase(seed(room, k)), phase, "room {room} player {k}");
            }
        }
        let phases: Vec<Duration> = (0..1000).map(|room| room_phase(seed(room, 0))).collect();
        assert!(phases.iter().all(|p| *p < STAGGER));
        for tenth in 0..10 {
            let n =
                phases.iter().filter(|p| (p.as_secs_f64() / STAGGER.as_secs_f64() * 10.0) as usize == tenth).count();
            assert!((50..=150).contains(&n), "{n} of 1,000 rooms in tenth {tenth} of the stagger");
        }
    }
}
