//! `soak`: thousands of short connect / play / disconnect cycles against a roomd you run
//! yourself, sampling the server's memory, to show whether it stays flat over time. A
//! documented command, not a CI test: see the "Soak" section of `benches/README.md`.
//!
//! Only point it at servers you run: it connects to `--url` and nowhere else.
//!
//! One cycle: guest sessions for 1–4 people, the first creates a room (`tally` with a small
//! target, `halli-galli` with short timers, or `cockroach-poker` with a 3-card loss; some
//! with a bot), the others sit, everyone connects and `sub`s, the host starts, and the
//! people play to the `result`. In some cycles one player drops its TCP connection
//! mid-game without a close frame (half with a reset, half with a plain FIN), and some of
//! those come back (new socket, `sub`, `sync`) and play on. After the result everyone
//! leaves: most with a close frame (some `unsub` first), some abruptly.
//!
//! Every await is bounded: HTTP calls and handshakes by their own deadlines, each socket
//! read by an idle timeout, each send by a send timeout, and each whole cycle by
//! `--cycle-timeout`. A cycle that runs out of time is counted as an error, with the
//! step each of its players was in, and its sockets are dropped; it is never waited for.

use anyhow::{anyhow, bail, Context};
use benches::loadgen::{self, ErrorTally, HgView, Session};
use engine::{Rng, Seed};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One HTTP call (request and body) or one WebSocket handshake up to `sync`.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// One frame written (and flushed) to a socket.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence on a socket while waiting for the game (the server pings every 2 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A graceful close: our close frame out, the server's back.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Rejected actions one player may collect before the cycle is called broken.
const MAX_REJECTS: u32 = 200;
/// `room_unavailable` answers one player may resend (same `cs`) before giving up.
const MAX_RESENDS: u32 = 50;
/// Wait before resending after `room_unavailable`.
const RESEND_AFTER: Duration = Duration::from_millis(200);
/// After this long in play, the halli-galli player who ends the game does so anyway.
const HG_END_AFTER: Duration = Duration::from_secs(12);

const USAGE: &str = "usage: soak [--url URL] [--pid PID] [--cycles N] [--concurrency C] [--max-seconds S]
            [--cycle-timeout S] [--sample-secs S] [--progress-secs S] [--settle-secs S]
            [--mix tally=W,halli-galli=W,cockroach-poker=W] [--drop-rate P] [--reconnect-rate P]
            [--warmup P] [--max-growth-mib-per-10k MIB] [--max-error-rate P] [--seed N]

  --url             base URL of YOUR OWN roomd (default http://127.0.0.1:8080)
  --pid             that server's process id: its VmRSS / VmHWM are sampled from /proc
  --cycles          cycles to run (default 10000)
  --concurrency     cycles in flight at once (default 32)
  --max-seconds     stop starting cycles after this long (default 900)
  --cycle-timeout   a cycle not done by then is an error (default 120)
  --sample-secs     RSS sample interval (default 2)
  --progress-secs   progress line interval (default 10)
  --settle-secs     wait after the last cycle before the final sample (default 5)
  --mix             relative weights of the games (default tally=80,halli-galli=10,cockroach-poker=10)
  --drop-rate       chance per cycle that one player drops its connection mid-game (default 0.3)
  --reconnect-rate  chance that a dropped player reconnects (default 0.5; the host always does)
  --warmup          fraction of the cycles counted as warm-up (default 0.1)
  --max-growth-mib-per-10k
                    exit 1 if RSS grows faster than this over the second half (default 8)
  --max-error-rate  exit 2 if more than this fraction of cycles failed (default 0.01)
  --seed            seed of the cycles' choices (default 1)";

#[derive(Clone, Debug)]
struct Args {
    url: String,
    pid: Option<u32>,
    cycles: usize,
    concurrency: usize,
    max_seconds: f64,
    cycle_timeout: Duration,
    sample_every: Duration,
    progress_every: Duration,
    settle: Duration,
    mix: [u32; 3],
    drop_rate: f64,
    reconnect_rate: f64,
    warmup: f64,
    max_growth_mib_per_10k: f64,
    max_error_rate: f64,
    seed: u64,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            url: "http://127.0.0.1:8080".into(),
            pid: None,
            cycles: 10_000,
            concurrency: 32,
            max_seconds: 900.0,
            cycle_timeout: Duration::from_secs(120),
            sample_every: Duration::from_secs(2),
            progress_every: Duration::from_secs(10),
            settle: Duration::from_secs(5),
            mix: [80, 10, 10],
            drop_rate: 0.3,
            reconnect_rate: 0.5,
            warmup: 0.1,
            max_growth_mib_per_10k: 8.0,
            max_error_rate: 0.01,
            seed: 1,
        }
    }
}

fn parse_args(args: &[String]) -> anyhow::Result<Args> {
    let mut a = Args::default();
    let mut it = args.iter();
    let secs = |v: &str| -> anyhow::Result<Duration> { Ok(Duration::from_secs_f64(v.parse::<f64>()?.max(0.001))) };
    while let Some(flag) = it.next() {
        let mut value = || it.next().map(String::as_str).with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = value()?.trim().trim_end_matches('/').to_owned(),
            "--pid" => a.pid = Some(value()?.parse()?),
            "--cycles" => a.cycles = value()?.parse()?,
            "--concurrency" => a.concurrency = value()?.parse::<usize>()?.max(1),
            "--max-seconds" => a.max_seconds = value()?.parse()?,
            "--cycle-timeout" => a.cycle_timeout = secs(value()?)?,
            "--sample-secs" => a.sample_every = secs(value()?)?,
            "--progress-secs" => a.progress_every = secs(value()?)?,
            "--settle-secs" => a.settle = secs(value()?)?,
            "--mix" => a.mix = parse_mix(value()?)?,
            "--drop-rate" => a.drop_rate = value()?.parse()?,
            "--reconnect-rate" => a.reconnect_rate = value()?.parse()?,
            "--warmup" => a.warmup = value()?.parse()?,
            "--max-growth-mib-per-10k" => a.max_growth_mib_per_10k = value()?.parse()?,
            "--max-error-rate" => a.max_error_rate = value()?.parse()?,
            "--seed" => a.seed = value()?.parse()?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    loadgen::ws_url(&a.url, "x")?;
    if a.cycles == 0 || a.cycles > 10_000_000 {
        bail!("--cycles between 1 and 10,000,000");
    }
    if !(0.0..0.9).contains(&a.warmup) {
        bail!("--warmup is a fraction below 0.9");
    }
    Ok(a)
}

fn parse_mix(text: &str) -> anyhow::Result<[u32; 3]> {
    let mut mix = [0; 3];
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (name, weight) = part.split_once('=').with_context(|| format!("--mix: {part:?} is not game=weight"))?;
        let slot = match name.trim() {
            "tally" => 0,
            "halli-galli" => 1,
            "cockroach-poker" => 2,
            other => bail!("--mix: unknown game {other:?}"),
        };
        mix[slot] = weight.trim().parse()?;
    }
    if mix.iter().sum::<u32>() == 0 {
        bail!("--mix: every weight is zero");
    }
    Ok(mix)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Game {
    Tally,
    HalliGalli,
    Cockroach,
}

impl Game {
    const ALL: [Game; 3] = [Game::Tally, Game::HalliGalli, Game::Cockroach];

    fn id(self) -> &'static str {
        match self {
            Game::Tally => "tally",
            Game::HalliGalli => "halli-galli",
            Game::Cockroach => "cockroach-poker",
        }
    }
}

/// A planned mid-game drop of one player.
#[derive(Clone, Debug)]
struct DropPlan {
    /// Drop after this many `update`s.
    after_updates: u32,
    /// Reset (SO_LINGER 0) rather than a plain FIN; no close frame either way.
    rst: bool,
    /// Come back after this long, on a new socket.
    reconnect_after: Option<Duration>,
    /// Not coming back: leave the seat (`DELETE …/seats/me`) so the game stops waiting.
    leave: bool,
}

/// How one person in a cycle behaves.
#[derive(Clone, Debug)]
struct PlayerPlan {
    drop: Option<DropPlan>,
    /// Leave after the result without a close frame (and with a reset if `final_rst`).
    final_abrupt: bool,
    final_rst: bool,
    /// Send `unsub` before the close frame.
    unsub_first: bool,
    /// Halli-galli: this player ends the game (a wrong ring in a duel) after `quota` flips.
    ender: bool,
    quota: u32,
    /// Delay before acting (tally: between bumps), ms.
    reaction_ms: (u32, u32),
}

#[derive(Clone, Debug)]
struct CyclePlan {
    game: Game,
    bots: usize,
    options: Value,
    players: Vec<PlayerPlan>,
    seed: u128,
}

fn plan_cycle(args: &Args, i: usize) -> CyclePlan {
    let seed = (u128::from(args.seed) << 64) | i as u128;
    let mut rng = Rng::from_seed(Seed(seed));
    let total: u32 = args.mix.iter().sum();
    let mut pick = rng.int(total);
    let mut game = Game::Tally;
    for (g, w) in Game::ALL.iter().zip(args.mix) {
        if pick < w {
            game = *g;
            break;
        }
        pick -= w;
    }
    let (humans, bots) = match game {
        Game::Tally => (2 + rng.index(3), usize::from(rng.chance(0.2))),
        // Two seats: the duel house rule makes a wrong ring end the game at once.
        Game::HalliGalli if rng.chance(0.5) => (2, 0),
        Game::HalliGalli => (1, 1),
        Game::Cockroach => (2 + rng.index(3), usize::from(rng.chance(0.3))),
    };
    let dropper = rng.chance(args.drop_rate).then(|| rng.index(humans));
    let options = match game {
        // A drop needs a game long enough to happen in.
        Game::Tally => json!({ "target": if dropper.is_some() { 100 } else { 10 } }),
        Game::HalliGalli => json!({
            "endMode": "lastStanding", "timeLimitMin": 5, "flipSeconds": 2, "flipGuardMs": 400,
            "wrongRingLockoutMs": 0, "duelWrongLoses": true
        }),
        Game::Cockroach => json!({ "loseCount": 3, "turnSeconds": 15 }),
    };
    let players = (0..humans)
        .map(|k| {
            let drop = (dropper == Some(k)).then(|| {
                let after_updates = match game {
                    Game::Tally => 1 + rng.int(4),
                    Game::HalliGalli => 2 + rng.int(8),
                    Game::Cockroach => 1 + rng.int(5),
                };
                // The host (player 0) ends halli-galli and always bumps tally on: it comes back.
                let back = k == 0 || rng.chance(args.reconnect_rate);
                let delay_ms = match game {
                    Game::Tally => 50 + rng.int(450),
                    _ => 200 + rng.int(1800),
                };
                DropPlan {
                    after_updates,
                    rst: rng.chance(0.5),
                    reconnect_after: back.then(|| Duration::from_millis(u64::from(delay_ms))),
                    // Cockroach poker waits up to 90 s for an away player's turns: one who
                    // is not coming back always leaves; elsewhere half of them do.
                    leave: !back && (game == Game::Cockroach || rng.chance(0.5)),
                }
            });
            let final_abrupt = rng.chance(0.25);
            PlayerPlan {
                drop,
                final_abrupt,
                final_rst: final_abrupt && rng.chance(0.5),
                unsub_first: !final_abrupt && rng.chance(0.2),
                ender: game == Game::HalliGalli && k == 0,
                quota: 2 + rng.int(5),
                reaction_ms: match game {
                    // At most 25 bumps/s per socket: under the 30/s rate limit.
                    Game::Tally => (40, 30),
                    Game::HalliGalli => (60, 120),
                    Game::Cockroach => (30, 100),
                },
            }
        })
        .collect();
    CyclePlan { game, bots, options, players, seed }
}

/// What one cycle (or the whole run) saw.
#[derive(Default, Debug)]
struct Counts {
    ok: u64,
    failed: u64,
    by_game: BTreeMap<&'static str, (u64, u64)>,
    drops_rst: u64,
    drops_fin: u64,
    reconnects: u64,
    leaves: u64,
    /// `room_unavailable` answers (each action resent with its cs).
    unavailable: u64,
    results: u64,
    sent: u64,
    acks: u64,
    updates: u64,
    rejects: BTreeMap<String, u64>,
    final_graceful: u64,
    final_abrupt: u64,
    /// Errors by kind, counted as loadgen counts them.
    errors: ErrorTally,
}

impl Counts {
    fn error(&mut self, message: String) {
        self.errors.error(message);
    }

    fn add(&mut self, o: Counts) {
        self.ok += o.ok;
        self.failed += o.failed;
        for (g, (ok, failed)) in o.by_game {
            let e = self.by_game.entry(g).or_default();
            e.0 += ok;
            e.1 += failed;
        }
        self.drops_rst += o.drops_rst;
        self.drops_fin += o.drops_fin;
        self.reconnects += o.reconnects;
        self.leaves += o.leaves;
        self.unavailable += o.unavailable;
        self.results += o.results;
        self.sent += o.sent;
        self.acks += o.acks;
        self.updates += o.updates;
        for (c, n) in o.rejects {
            *self.rejects.entry(c).or_default() += n;
        }
        self.final_graceful += o.final_graceful;
        self.final_abrupt += o.final_abrupt;
        self.errors.merge(o.errors);
    }
}

/// Where each part of a cycle is, so a timed-out cycle says what it was waiting for.
struct Progress {
    cycle: Mutex<&'static str>,
    players: Vec<Mutex<&'static str>>,
}

impl Progress {
    fn new(players: usize) -> Progress {
        Progress { cycle: Mutex::new("start"), players: (0..players).map(|_| Mutex::new("-")).collect() }
    }

    fn set(&self, step: &'static str) {
        if let Ok(mut s) = self.cycle.lock() {
            *s = step;
        }
    }

    fn player(&self, k: usize, step: &'static str) {
        if let Some(Ok(mut s)) = self.players.get(k).map(|m| m.lock()) {
            *s = step;
        }
    }

    fn describe(&self) -> String {
        let cycle = self.cycle.lock().map(|s| *s).unwrap_or("?");
        let players: Vec<String> = self
            .players
            .iter()
            .enumerate()
            .map(|(k, m)| format!("p{k} {}", m.lock().map(|s| *s).unwrap_or("?")))
            .collect();
        format!("{cycle} [{}]", players.join(", "))
    }
}

/// Connects, sends `sub` and waits for the `sync`; returns the socket and the sync's text.
async fn connect_sub(base: &str, token: &str, room: &str) -> anyhow::Result<(Ws, String)> {
    let url = loadgen::ws_url(base, token)?;
    let (mut ws, _) = timeout(
        CALL_TIMEOUT,
        tokio_tungstenite::connect_async_with_config(url.as_str(), Some(loadgen::ws_config()), true),
    )
    .await
    .context("connect timed out")?
    .context("connect")?;
    timeout(SEND_TIMEOUT, ws.send(Message::text(json!({"t": "sub", "room": room}).to_string())))
        .await
        .context("sub: send timed out")??;
    let deadline = Instant::now() + CALL_TIMEOUT;
    loop {
        let msg = timeout(deadline.saturating_duration_since(Instant::now()), ws.next())
            .await
            .context("no sync")?
            .ok_or_else(|| anyhow!("closed before sync"))??;
        if let Message::Text(text) = msg {
            let v: Value = serde_json::from_str(text.as_str())?;
            match v.get("t").and_then(Value::as_str) {
                Some("sync") => return Ok((ws, text.as_str().to_owned())),
                Some("error" | "reject") => bail!("sub refused: {}", text.as_str()),
                _ => {}
            }
        }
    }
}

/// Closes the TCP connection without a close frame: a reset (SO_LINGER 0) or a plain FIN.
fn drop_abruptly(ws: Ws, rst: bool) {
    if rst {
        if let MaybeTlsStream::Plain(tcp) = ws.get_ref() {
            let _ = tcp.set_zero_linger();
        }
    }
    drop(ws);
}

/// A close frame out, then reads until the server's close (or the socket's end).
async fn close_gracefully(ws: &mut Ws) -> anyhow::Result<()> {
    timeout(CLOSE_TIMEOUT, ws.close(None)).await.context("close: send timed out")??;
    let deadline = Instant::now() + CLOSE_TIMEOUT;
    loop {
        match timeout(deadline.saturating_duration_since(Instant::now()), ws.next()).await {
            Err(_) => bail!("close: no answer"),
            Ok(None) | Ok(Some(Ok(Message::Close(_)))) => return Ok(()),
            // After our close frame the stream ends with this error (or None).
            Ok(Some(Err(tokio_tungstenite::tungstenite::Error::ConnectionClosed))) => return Ok(()),
            Ok(Some(Err(e))) => bail!("close: {e}"),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// What an action was, to know what to undo when it is rejected.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bump,
    Flip,
    Ring,
    WrongRing,
    Cockroach,
}

/// Per-game memory of a player between messages.
#[derive(Default)]
struct Brain {
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

struct Player<'a> {
    k: usize,
    plan: PlayerPlan,
    game: Game,
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
enum Ended {
    Result,
    Dropped,
}

impl<'a> Player<'a> {
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
            Game::Tally => {
                if !self.brain.bump_planned {
                    self.brain.bump_planned = true;
                    self.plan(Kind::Bump, json!({"type": "bump"}));
                }
            }
            Game::HalliGalli => self.think_hg()?,
            Game::Cockroach => self.think_cp(),
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
    async fn run(mut self, ws: Ws, first: Option<String>) -> Counts {
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

/// `DELETE /api/rooms/{room}/seats/me`; 409 (the game is over already) is fine too.
async fn leave_seat(http: &reqwest::Client, base: &str, token: &str, room: &str) -> anyhow::Result<()> {
    let url = format!("{base}/api/rooms/{room}/seats/me");
    timeout(CALL_TIMEOUT, async {
        let res = http.delete(&url).bearer_auth(token).send().await?;
        let status = res.status();
        let body = res.text().await?;
        if !status.is_success() && status != reqwest::StatusCode::CONFLICT {
            bail!("DELETE {url}: {status} {body:.200}");
        }
        anyhow::Ok(())
    })
    .await
    .context("leave: timed out")?
}

async fn call(http: &reqwest::Client, url: String, token: Option<&str>, body: Value) -> anyhow::Result<Value> {
    timeout(CALL_TIMEOUT, loadgen::post(http, url, token, body)).await.context("HTTP call timed out")?
}

/// One cycle; the caller bounds it with `--cycle-timeout`.
async fn run_cycle(http: &reqwest::Client, base: &str, i: usize, plan: &CyclePlan, progress: &Progress) -> Counts {
    let mut counts = Counts::default();
    if let Err(e) = cycle_inner(http, base, i, plan, progress, &mut counts).await {
        counts.error(format!("{} setup: {e:#}", plan.game.id()));
    }
    counts
}

async fn cycle_inner(
    http: &reqwest::Client,
    base: &str,
    i: usize,
    plan: &CyclePlan,
    progress: &Progress,
    counts: &mut Counts,
) -> anyhow::Result<()> {
    progress.set("sessions");
    let mut sessions = Vec::with_capacity(plan.players.len());
    for k in 0..plan.players.len() {
        sessions.push(
            timeout(CALL_TIMEOUT, loadgen::session(http, base, format!("soak{i}-{k}")))
                .await
                .context("session timed out")??,
        );
    }
    let host = sessions.first().ok_or_else(|| anyhow!("no players"))?.clone();
    progress.set("create room");
    let body = json!({"game": plan.game.id(), "options": plan.options, "graceSec": 5});
    let created = call(http, format!("{base}/api/rooms"), Some(&host.token), body).await?;
    let room = created.get("roomId").and_then(Value::as_str).ok_or_else(|| anyhow!("no roomId"))?.to_owned();
    progress.set("seats");
    for s in &sessions[1..] {
        call(http, format!("{base}/api/rooms/{room}/seats"), Some(&s.token), json!({})).await?;
    }
    for _ in 0..plan.bots {
        call(http, format!("{base}/api/rooms/{room}/seats"), Some(&host.token), json!({"bot": true})).await?;
    }
    progress.set("connect");
    let mut sockets = Vec::with_capacity(sessions.len());
    for (k, s) in sessions.iter().enumerate() {
        progress.player(k, "connecting");
        sockets.push(connect_sub(base, &s.token, &room).await?);
        progress.player(k, "connected");
    }
    progress.set("start");
    call(http, format!("{base}/api/rooms/{room}/start"), Some(&host.token), json!({})).await?;
    progress.set("play");
    let players = sessions.into_iter().zip(sockets).enumerate().map(|(k, (session, (ws, _)))| {
        let player = Player {
            k,
            plan: plan.players[k].clone(),
            game: plan.game,
            http,
            base,
            session,
            room: &room,
            rng: Rng::from_seed(Seed(plan.seed ^ ((k as u128 + 1) << 100))),
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
        };
        // The waiting-room sync was read by `connect_sub`; the game's sync follows the start.
        player.run(ws, None)
    });
    for c in futures_util::future::join_all(players).await {
        counts.add(c);
    }
    progress.set("done");
    Ok(())
}

/// One RSS sample of the server.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at_s: f64,
    done: usize,
    rss_kib: u64,
}

/// VmRSS and VmHWM (KiB) of `pid`.
fn memory_of(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status.lines().find_map(|l| l.strip_prefix(name))?.trim().trim_end_matches("kB").trim().parse().ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

const METRICS: [&str; 5] =
    ["roomd_rooms", "roomd_sessions", "roomd_games_started_total", "roomd_games_finished_total", "series"];

/// The gauges and counters the report shows, from `/metrics` (`series`: how many lines of
/// samples the page has, to see label cardinality grow).
async fn scrape(http: &reqwest::Client, base: &str) -> Option<BTreeMap<&'static str, f64>> {
    let text = timeout(CALL_TIMEOUT, async { http.get(format!("{base}/metrics")).send().await?.text().await })
        .await
        .ok()?
        .ok()?;
    let mut out = BTreeMap::new();
    let mut series = 0.0;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        series += 1.0;
        let mut parts = line.split_whitespace();
        if let (Some(name), Some(value)) = (parts.next(), parts.next()) {
            if let Some(key) = METRICS.iter().find(|m| **m == name) {
                out.insert(*key, value.parse().unwrap_or(f64::NAN));
            }
        }
    }
    out.insert("series", series);
    Some(out)
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    Some(points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

struct Shared {
    args: Args,
    http: reqwest::Client,
    next: AtomicUsize,
    done: AtomicUsize,
    failed: AtomicUsize,
    started: Instant,
    totals: Mutex<Counts>,
}

async fn worker(shared: Arc<Shared>) {
    let a = &shared.args;
    loop {
        if shared.started.elapsed().as_secs_f64() >= a.max_seconds {
            return;
        }
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if i >= a.cycles {
            return;
        }
        let plan = plan_cycle(a, i);
        let progress = Progress::new(plan.players.len());
        let mut counts = match timeout(a.cycle_timeout, run_cycle(&shared.http, &a.url, i, &plan, &progress)).await {
            Ok(c) => c,
            Err(_) => {
                let mut c = Counts::default();
                c.error(format!(
                    "{} cycle timed out after {} s in {}",
                    plan.game.id(),
                    a.cycle_timeout.as_secs(),
                    progress.describe()
                ));
                c
            }
        };
        let ok = counts.errors.errors == 0;
        let slot = counts.by_game.entry(plan.game.id()).or_default();
        if ok {
            slot.0 += 1;
            counts.ok += 1;
        } else {
            slot.1 += 1;
            counts.failed += 1;
            shared.failed.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut t) = shared.totals.lock() {
            t.add(counts);
        }
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = parse_args(&args).and_then(|a| {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(soak(a))
    });
    match result {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("soak: {e:#}");
            std::process::ExitCode::from(3)
        }
    }
}

async fn soak(a: Args) -> anyhow::Result<u8> {
    // Idle pooled connections are dropped well before the server's keep-alive (5 s) closes them.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(a.concurrency)
        .pool_idle_timeout(Duration::from_secs(1))
        .build()?;
    let metrics_start = scrape(&http, &a.url).await.ok_or_else(|| anyhow!("no /metrics at {}", a.url))?;
    let pid = a.pid;
    let start_mem = match pid {
        Some(p) => Some(memory_of(p).ok_or_else(|| anyhow!("cannot read /proc/{p}/status"))?),
        None => None,
    };
    eprintln!(
        "soak: {} cycles, {} at once, at most {} s, against {} (pid {}); mix tally/hg/cp {:?}, drop rate {}, reconnect rate {}",
        a.cycles,
        a.concurrency,
        a.max_seconds,
        a.url,
        pid.map_or("none".into(), |p| p.to_string()),
        a.mix,
        a.drop_rate,
        a.reconnect_rate
    );
    let shared = Arc::new(Shared {
        args: a.clone(),
        http: http.clone(),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
        started: Instant::now(),
        totals: Mutex::new(Counts::default()),
    });
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::new(Mutex::new(Vec::new()));
    if let Some((rss, _)) = start_mem {
        if let Ok(mut s) = samples.lock() {
            s.push(Sample { at_s: 0.0, done: 0, rss_kib: rss });
        }
    }
    let mut workers = Vec::with_capacity(a.concurrency);
    for _ in 0..a.concurrency {
        workers.push(tokio::spawn(worker(shared.clone())));
    }
    // Sampler and progress: until every worker is done.
    let mut middle_metrics: Option<BTreeMap<&'static str, f64>> = None;
    let mut tick = tokio::time::interval(a.sample_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_progress = Instant::now();
    let hard_stop = shared.started + Duration::from_secs_f64(a.max_seconds) + a.cycle_timeout + Duration::from_secs(30);
    loop {
        tick.tick().await;
        let done = shared.done.load(Ordering::Relaxed);
        let failed = shared.failed.load(Ordering::Relaxed);
        let at_s = shared.started.elapsed().as_secs_f64();
        let mem = pid.and_then(memory_of);
        if let (Some((rss, _)), Ok(mut s)) = (mem, samples.lock()) {
            s.push(Sample { at_s, done, rss_kib: rss });
        }
        let finished = workers.iter().all(|w| w.is_finished());
        if middle_metrics.is_none() && done * 2 >= a.cycles {
            middle_metrics = scrape(&http, &a.url).await;
        }
        if last_progress.elapsed() >= a.progress_every || finished {
            last_progress = Instant::now();
            let m = scrape(&http, &a.url).await.unwrap_or_default();
            let g = |k: &str| m.get(k).map_or("?".into(), |v| format!("{v:.0}"));
            let started = shared.next.load(Ordering::Relaxed).min(a.cycles);
            eprintln!(
                "[{at_s:6.0} s] cycles {done}/{} done ({failed} failed), {} in flight, {:.1}/s | RSS {} HWM {} | rooms {} sessions {} games finished {}",
                a.cycles,
                started.saturating_sub(done),
                done as f64 / at_s.max(0.001),
                mem.map_or("?".into(), |m| mib(m.0)),
                mem.map_or("?".into(), |m| mib(m.1)),
                g("roomd_rooms"),
                g("roomd_sessions"),
                g("roomd_games_finished_total"),
            );
        }
        if finished {
            break;
        }
        if Instant::now() > hard_stop {
            // Cannot happen while every cycle is bounded; report rather than hang.
            eprintln!("soak: workers still running past the hard stop; reporting what is done");
            for w in &workers {
                w.abort();
            }
            break;
        }
    }
    let elapsed = shared.started.elapsed().as_secs_f64();
    let done = shared.done.load(Ordering::Relaxed);
    eprintln!("soak: cycles finished after {elapsed:.0} s; settling {} s", a.settle.as_secs_f64());
    sleep(a.settle).await;
    let metrics_end = scrape(&http, &a.url).await.unwrap_or_default();
    let end_mem = pid.and_then(memory_of);
    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    let totals = shared.totals.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default();

    // The report.
    let at = |fraction: f64| samples.iter().find(|s| s.done as f64 >= fraction * done as f64 && s.done > 0).copied();
    let warm = at(a.warmup);
    let middle = at(0.5);
    let last_in_run = samples.last().copied();
    let second_half: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| (s.done as f64) >= 0.5 * done as f64 && s.done > 0)
        .map(|s| (s.done as f64, s.rss_kib as f64))
        .collect();
    let slope_kib_per_1k = slope(&second_half).map(|s| s * 1000.0);
    let whole: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| (s.done as f64) >= a.warmup * done as f64 && s.done > 0)
        .map(|s| (s.done as f64, s.rss_kib as f64))
        .collect();
    let slope_after_warmup = slope(&whole).map(|s| s * 1000.0);
    let limit_kib_per_1k = a.max_growth_mib_per_10k * 1024.0 / 10.0;

    let mut out = String::new();
    let mut row = |k: &str, v: String| out.push_str(&format!("| {k} | {v} |\n"));
    row("cycles done (ok / failed)", format!("{done} ({} / {})", totals.ok, totals.failed));
    let games: Vec<String> = totals.by_game.iter().map(|(g, (ok, failed))| format!("{g} {}", ok + failed)).collect();
    row("games played", games.join(", "));
    row(
        "duration",
        format!("{elapsed:.0} s ({:.1} cycles/s, {} at once)", done as f64 / elapsed.max(0.001), a.concurrency),
    );
    row(
        "mid-game drops RST / FIN, reconnects, seats left",
        format!("{} / {}, {}, {}", totals.drops_rst, totals.drops_fin, totals.reconnects, totals.leaves),
    );
    row("final leaves graceful / abrupt", format!("{} / {}", totals.final_graceful, totals.final_abrupt));
    let rejects: Vec<String> = totals.rejects.iter().map(|(c, n)| format!("{c}={n}")).collect();
    row(
        "actions sent / acked, rejects",
        format!(
            "{} / {}, {}",
            totals.sent,
            totals.acks,
            if rejects.is_empty() { "none".into() } else { rejects.join(" ") }
        ),
    );
    row("updates received, results seen", format!("{}, {}", totals.updates, totals.results));
    row("room_unavailable answers (resent with the same cs)", totals.unavailable.to_string());
    row("errors", totals.errors.errors.to_string());
    for key in METRICS {
        let v = |m: Option<&BTreeMap<&'static str, f64>>| {
            m.and_then(|m| m.get(key)).map_or("?".into(), |v| format!("{v:.0}"))
        };
        row(
            &format!("/metrics {key}: start → middle → end"),
            format!("{} → {} → {}", v(Some(&metrics_start)), v(middle_metrics.as_ref()), v(Some(&metrics_end))),
        );
    }
    if let (Some(start), Some(end)) = (start_mem, end_mem) {
        let s = |x: Option<Sample>| {
            x.map_or("?".into(), |x| format!("{} (at {} cycles, {:.0} s)", mib(x.rss_kib), x.done, x.at_s))
        };
        row("RSS at start", mib(start.0));
        row(&format!("RSS after warm-up ({:.0} %)", a.warmup * 100.0), s(warm));
        row("RSS at the middle (50 %)", s(middle));
        row("RSS at the last in-run sample", s(last_in_run));
        row(&format!("RSS at the end ({:.0} s after the last cycle)", a.settle.as_secs_f64()), mib(end.0));
        row("VmHWM", mib(end.1));
        row(
            "RSS slope, second half",
            slope_kib_per_1k.map_or("? (too few samples)".into(), |s| {
                format!(
                    "{s:.1} KiB per 1,000 cycles ({:.2} MiB per 10k; limit {})",
                    s * 10.0 / 1024.0,
                    a.max_growth_mib_per_10k
                )
            }),
        );
        row(
            "RSS slope, after warm-up",
            slope_after_warmup.map_or("?".into(), |s| format!("{s:.1} KiB per 1,000 cycles")),
        );
        row("RSS samples", samples.len().to_string());
    }
    println!("| measure | value |\n|---|---|\n{out}");
    for (kind, n) in &totals.errors.error_kinds {
        println!("errors {kind}: {n}");
    }
    for e in &totals.errors.error_samples {
        println!("error: {e}");
    }
    let error_rate = totals.failed as f64 / done.max(1) as f64;
    if done == 0 || error_rate > a.max_error_rate {
        println!("FAIL: {:.2} % of cycles failed (limit {:.2} %)", error_rate * 100.0, a.max_error_rate * 100.0);
        return Ok(2);
    }
    match (pid, slope_kib_per_1k) {
        (Some(_), Some(s)) if s > limit_kib_per_1k => {
            println!(
                "FAIL: RSS grows {:.2} MiB per 10k cycles over the second half (limit {})",
                s * 10.0 / 1024.0,
                a.max_growth_mib_per_10k
            );
            Ok(1)
        }
        (Some(_), None) => {
            println!("FAIL: too few RSS samples in the second half to judge (lower --sample-secs)");
            Ok(1)
        }
        _ => {
            println!("ok");
            Ok(0)
        }
    }
}
