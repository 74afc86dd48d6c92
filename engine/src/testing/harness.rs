//! The random-play harness (`game-engine.md` §7.2–7.4).
//!
//! For each seed: random player count and options, then play to the end with random
//! legal inputs, time advancing by random gaps, timers fired through [`crate::schedule`]
//! exactly as the runner fires them, players dropping and coming back, and timeouts at
//! random moments. At every step it checks:
//!
//! - no `apply` error, and every legal input and every timer input validates;
//! - the state round-trips through JSON, and so does every input (the log codec);
//! - the per-game invariant hook holds;
//! - no view (every player and a spectator, `view` and `sync_view`) and no event carries
//!   a secret of its viewer (`secrets_of`);
//! - `on_timeout` validates for every timeout player;
//! - the game ends within `max_steps`.
//!
//! After each game it replays the recorded log from the same seed and requires the very
//! same states and events (determinism).

use crate::game::{Actor, Ctx, Game, InputOf, PlayerId, SetupCtx, ViewCtx};
use crate::rng::{Rng, Seed};
use crate::schedule::{self, Presence};
use crate::testing::leak::find_leaks;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Range, RangeInclusive};
use std::time::Instant;

/// Start of simulated time (2023-11-14T22:13:20Z): any fixed epoch works.
const EPOCH_MS: i64 = 1_700_000_000_000;

/// Which check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Setup,
    Apply,
    LegalActionRefused,
    TimerInputRefused,
    RoundTrip,
    Invariant,
    Leak,
    TimeoutLegality,
    Determinism,
    Bound,
    Stuck,
    /// `views_json` is not the JSON of `view`.
    ViewsJson,
    /// `events_json` is not the JSON of the events.
    EventsJson,
}

/// A failed check with enough context to reproduce it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    pub step: usize,
    pub check: Check,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {} step {}: {:?}: {}", self.seed, self.step, self.check, self.message)
    }
}

impl std::error::Error for Failure {}

/// What a harness run saw.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub games: usize,
    pub steps: usize,
    pub timer_inputs: usize,
    pub random_timeouts: usize,
    /// Nanoseconds per `apply` call, in call order.
    pub apply_ns: Vec<u64>,
}

impl Report {
    /// The `q` quantile (0.0..=1.0) of apply time in nanoseconds.
    pub fn apply_quantile_ns(&self, q: f64) -> u64 {
        let mut v = self.apply_ns.clone();
        v.sort_unstable();
        if v.is_empty() {
            return 0;
        }
        let i = ((v.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        v[i]
    }
}

/// One recorded step: who, what, when, and what came of it.
#[derive(Clone, Debug)]
struct Step<G: Game> {
    actor: Actor,
    input: InputOf<G>,
    ctx: Ctx,
    state: G::State,
    events: Vec<G::Event>,
}

/// Harness settings for game `G`.
pub struct Harness<G: Game> {
    pub seeds: Range<u64>,
    pub players: RangeInclusive<usize>,
    pub max_steps: usize,
    /// Random options for a game of `n` players.
    pub options: fn(&mut Rng, usize) -> G::Options,
    /// Per-game invariant (cards conserved, ...).
    pub invariant: fn(&G::State) -> Result<(), String>,
    /// Largest random gap between inputs (ms).
    pub max_gap_ms: i64,
    /// Chance per step that a random timeout player is timed out now.
    pub timeout_rate: f64,
    /// Chance per step that a random player disconnects or comes back.
    pub presence_rate: f64,
    /// Check views and secrets every `leak_every` steps (1 = every step).
    pub leak_every: usize,
}

impl<G: Game> Harness<G> {
    pub fn new(options: fn(&mut Rng, usize) -> G::Options) -> Harness<G> {
        Harness {
            seeds: 0..1000,
            players: G::MIN_PLAYERS..=G::MAX_PLAYERS,
            max_steps: 20_000,
            options,
            invariant: |_| Ok(()),
            max_gap_ms: 1500,
            timeout_rate: 0.02,
            presence_rate: 0.01,
            leak_every: 1,
        }
    }

    /// Runs every seed; the first failure stops the run.
    pub fn run(&self) -> Result<Report, Failure> {
        let mut report = Report::default();
        for seed in self.seeds.clone() {
            self.run_seed(seed, &mut report)?;
            report.games += 1;
        }
        Ok(report)
    }

    /// One game from `seed`.
    pub fn run_seed(&self, seed: u64, report: &mut Report) -> Result<(), Failure> {
        let fail = |step: usize, check: Check, message: String| Failure { seed, step, check, message };
        // The harness's own choices come from a generator separate from the game's.
        let mut choose = Rng::from_seed(Seed(u128::from(seed) ^ 0x4841_524e_4553_5300_0000_0000_0000_0000));
        let span = (self.players.end() - self.players.start() + 1) as u32;
        let n = self.players.start() + choose.int(span) as usize;
        let players: Vec<PlayerId> = (1..=n).map(|i| PlayerId::new(format!("p{i}"))).collect();
        let options = (self.options)(&mut choose, n);
        let game_seed = Seed(u128::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        let start = EPOCH_MS + i64::from(choose.int(1_000_000));

        let mut rng = Rng::from_seed(game_seed);
        let setup = SetupCtx { players: &players, options: &options, now: start, game_no: None };
        let mut state = G::setup(setup.clone(), &mut rng).map_err(|e| fail(0, Check::Setup, e.to_string()))?;
        let initial = state.clone();
        let mut now = start;
        let mut disconnected: BTreeMap<PlayerId, i64> = BTreeMap::new();
        let mut rtt: BTreeMap<PlayerId, u32> = BTreeMap::new();
        let mut log: Vec<Step<G>> = Vec::new();
        let mut last_events: Vec<G::Event> = Vec::new();

        for step in 0..self.max_steps {
            self.check_state(&state, &players, &last_events, now, &rtt, step)
                .map_err(|(check, message)| fail(step, check, message))?;
            if G::result(&state).is_some() {
                report.steps += step;
                return self.check_replay(seed, game_seed, &setup, &initial, &log);
            }

            // Presence changes: who is away matters to the timer.
            if choose.chance(self.presence_rate) {
                if let Some(p) = choose.pick(&players).cloned() {
                    if disconnected.remove(&p).is_none() {
                        disconnected.insert(p, now);
                    }
                }
            }
            for p in &players {
                rtt.insert(p.clone(), 5 + choose.int(300));
            }

            let presence = Presence { disconnected_since: &disconnected, room_grace_ms: 60_000, hold_until: i64::MIN };
            let gap = if choose.chance(0.5) {
                i64::from(choose.int(50))
            } else {
                i64::from(choose.int(self.max_gap_ms as u32 + 1))
            };
            let movers: Vec<(PlayerId, Vec<InputOf<G>>)> = players
                .iter()
                .map(|p| (p.clone(), G::legal_actions(&state, p, now + gap)))
                .filter(|(_, legal)| !legal.is_empty())
                .collect();
            let wake = schedule::next_wake::<G>(&state, &presence);

            let (actor, input, at, from_timer) = match wake {
                Some(w) if w <= now + gap || movers.is_empty() => {
                    now = now.max(w);
                    let Some((actor, input)) = schedule::due::<G>(&state, now, &presence) else {
                        return Err(fail(step, Check::Stuck, format!("wake time {w} reached but nothing is due")));
                    };
                    report.timer_inputs += 1;
                    (actor, input, now, true)
                }
                None if movers.is_empty() => {
                    return Err(fail(step, Check::Stuck, "no legal input and no deadline".into()));
                }
                _ => {
                    now += gap;
                    let timeout_players = G::timeout_players(&state);
                    let random_timeout = choose.chance(self.timeout_rate) && !timeout_players.is_empty();
                    if random_timeout && G::timeout_not_before(&state).is_none_or(|nb| nb <= now) {
                        let p = timeout_players[choose.index(timeout_players.len())].clone();
                        report.random_timeouts += 1;
                        (Actor::Player(p.clone()), G::on_timeout(&state, &p), now, true)
                    } else {
                        let (p, legal) = &movers[choose.index(movers.len())];
                        (Actor::Player(p.clone()), legal[choose.index(legal.len())].clone(), now, false)
                    }
                }
            };

            let ctx = Ctx { now: at, rtt_ms: actor.player().and_then(|p| rtt.get(p).copied()) };
            if let Err(reject) = G::validate(&state, &actor, &input, &ctx) {
                let check = if from_timer { Check::TimerInputRefused } else { Check::LegalActionRefused };
                return Err(fail(
                    step,
                    check,
                    format!(
                        "{actor:?} {input:?} refused: {} ({})",
                        crate::game::Reject::code(&reject),
                        crate::game::Reject::reason(&reject)
                    ),
                ));
            }
            round_trip(&input).map_err(|m| fail(step, Check::RoundTrip, format!("input: {m}")))?;
            let started = Instant::now();
            let applied = G::apply(&state, &actor, &input, &ctx, &mut rng);
            report.apply_ns.push(started.elapsed().as_nanos() as u64);
            let applied = applied.map_err(|e| fail(step, Check::Apply, format!("{actor:?} {input:?}: {e}")))?;
            state = applied.state;
            last_events = applied.events;
            log.push(Step { actor, input, ctx, state: state.clone(), events: last_events.clone() });
        }
        Err(fail(self.max_steps, Check::Bound, format!("game did not end within {} steps", self.max_steps)))
    }

    fn check_state(
        &self,
        state: &G::State,
        players: &[PlayerId],
        events: &[G::Event],
        now: i64,
        rtt: &BTreeMap<PlayerId, u32>,
        step: usize,
    ) -> Result<(), (Check, String)> {
        round_trip(state).map_err(|m| (Check::RoundTrip, format!("state: {m}")))?;
        (self.invariant)(state).map_err(|m| (Check::Invariant, m))?;

        let viewers: Vec<Option<&PlayerId>> = players.iter().map(Some).chain([None]).collect();
        if step.is_multiple_of(self.leak_every.max(1)) || G::result(state).is_some() {
            let vctx = ViewCtx { now, rtt: Some(rtt) };
            let events_json = serde_json::to_value(events).map_err(|e| (Check::RoundTrip, format!("events: {e}")))?;
            // What the runner sends must be these very events.
            let written = G::events_json(events).map_err(|e| (Check::EventsJson, e.to_string()))?;
            let serialized = serde_json::to_string(events).map_err(|e| (Check::RoundTrip, format!("events: {e}")))?;
            if written != serialized {
                return Err((Check::EventsJson, format!("events_json is {written}, the events are {serialized}")));
            }
            for viewer in &viewers {
                let secrets = G::secrets_of(state, *viewer);
                for (what, view) in
                    [("view", G::view(state, *viewer, &vctx)), ("syncView", G::sync_view(state, *viewer, &vctx))]
                {
                    let json = serde_json::to_value(&view).map_err(|e| (Check::RoundTrip, format!("{what}: {e}")))?;
                    let leaks = find_leaks(&json, &secrets);
                    if !leaks.is_empty() {
                        return Err((Check::Leak, format!("{what} of {viewer:?} leaks {leaks:?}")));
                    }
                }
                let leaks = find_leaks(&events_json, &secrets);
                if !leaks.is_empty() {
                    return Err((Check::Leak, format!("events to {viewer:?} leak {leaks:?}")));
                }
            }
            // What the runner sends must be these very views (so the checks above hold
            // for it): every viewer at once, and each alone.
            let together = G::views_json(state, &viewers, &vctx).map_err(|e| (Check::ViewsJson, e.to_string()))?;
            for (viewer, json) in viewers.iter().zip(&together) {
                let view = serde_json::to_string(&G::view(state, *viewer, &vctx))
                    .map_err(|e| (Check::RoundTrip, format!("view: {e}")))?;
                let alone = G::views_json(state, &[*viewer], &vctx).map_err(|e| (Check::ViewsJson, e.to_string()))?;
                if *json != view || alone.first() != Some(&view) {
                    return Err((Check::ViewsJson, format!("views_json of {viewer:?} is {json}, view is {view}")));
                }
            }
        }

        // A finished game times nobody out (the runner stops its timer).
        let timeout_players = if G::result(state).is_some() { Vec::new() } else { G::timeout_players(state) };
        let timeout_now = G::timeout_not_before(state).map_or(now, |nb| nb.max(now));
        for p in timeout_players {
            let input = G::on_timeout(state, &p);
            if let Err(r) = G::validate(state, &Actor::Player(p.clone()), &input, &Ctx::at(timeout_now)) {
                return Err((
                    Check::TimeoutLegality,
                    format!(
                        "on_timeout({p}) = {input:?} refused: {} ({})",
                        crate::game::Reject::code(&r),
                        crate::game::Reject::reason(&r)
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_replay(
        &self,
        seed: u64,
        game_seed: Seed,
        setup: &SetupCtx<'_, G::Options>,
        initial: &G::State,
        log: &[Step<G>],
    ) -> Result<(), Failure> {
        let fail = |step: usize, message: String| Failure { seed, step, check: Check::Determinism, message };
        let mut rng = Rng::from_seed(game_seed);
        let mut state = G::setup(setup.clone(), &mut rng).map_err(|e| fail(0, e.to_string()))?;
        if &state != initial {
            return Err(fail(0, "setup gave a different state from the same seed".into()));
        }
        for (i, step) in log.iter().enumerate() {
            let applied =
                G::apply(&state, &step.actor, &step.input, &step.ctx, &mut rng).map_err(|e| fail(i, e.to_string()))?;
            if applied.state != step.state {
                return Err(fail(i, format!("replaying {:?} gave a different state", step.input)));
            }
            if applied.events != step.events {
                return Err(fail(i, format!("replaying {:?} gave different events", step.input)));
            }
            state = applied.state;
        }
        Ok(())
    }
}

fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + fmt::Debug>(
    value: &T,
) -> Result<(), String> {
    let text = serde_json::to_string(value).map_err(|e| format!("does not serialize: {e}"))?;
    let back: T = serde_json::from_str(&text).map_err(|e| format!("does not deserialize: {e} in {text}"))?;
    if &back != value {
        return Err(format!("changes through JSON: {value:?} became {back:?}"));
    }
    Ok(())
}
