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
//!
//! # Layout
//!
//! - this file: the [`Client`], its socket, timing and counting: the window's phases,
//!   the open-loop schedule of bumps, planned actions sent when due, answers matched to
//!   their actions.
//! - `games`: what a scripted player reads of a Halli Galli or cockroach-poker view and
//!   the moves it plans from it.
//! - `hold`: the run's clients kept connected until the last has drained ([`Hold`]).

mod games;
mod hold;

pub use games::{cockroach_action, HgFace, HgPlayer, HgView};
pub use hold::Hold;

use super::net::{post, Envelope, Player};
use super::spec::Schedule;
use super::stats::Recorder;
use super::{Config, GameKind, LoopMode};
use engine::{Rng, Seed};
use futures_util::{SinkExt, StreamExt};
use games::{HgMessage, WithView};
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

/// The window as a client sees it: when it opens and closes, and (tally, open loop) this
/// client's schedule of bumps from `start`.
#[derive(Clone, Debug)]
pub struct Go {
    pub start: Instant,
    pub end: Instant,
    pub schedule: Option<Arc<Schedule>>,
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
