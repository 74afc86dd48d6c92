//! The load generator's core: rooms created through the HTTP API, four WebSocket players
//! per room speaking `PROTOCOL.md`, and one [`Report`] at the end.
//!
//! It only ever connects to the URLs in [`Config::urls`]; point it at your own servers.
//!
//! A run has two phases. The ramp sets rooms up with at most [`Config::concurrency`]
//! rooms in flight (guest session per client, the host creates the room, the other three
//! sit, every client connects and `sub`s, the host starts). Once every room is ready (or
//! the ramp timeout passes) the measured window of [`Config::duration`] begins: clients act
//! and everything is counted. After the window clients stop acting and wait up to
//! [`DRAIN`] for the answers to actions still in flight.
//!
//! Latency is action → update as the sender sees it: from sending `act` with `cs` to
//! receiving the `update` whose `seq` the `ack` for that `cs` names (the room sends the
//! update before the ack, so the update is looked up among the recent ones).

use anyhow::{anyhow, bail, Context};
use engine::{Rng, Seed};
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio::time::{sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long clients wait after the window for answers to actions in flight.
pub const DRAIN: Duration = Duration::from_secs(3);
/// Players per room.
pub const PLAYERS: usize = 4;
/// Recent updates a client remembers to match acks against.
const RECENT_UPDATES: usize = 256;
/// Actions one tally client may have unanswered before it skips a tick.
const MAX_IN_FLIGHT: usize = 16;
/// Deadline for one HTTP call or one WebSocket handshake during the ramp.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Error messages kept verbatim in the report.
const ERROR_SAMPLES: usize = 10;

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Which game the rooms play.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GameKind {
    /// Every client bumps at a fixed interval: pure framework overhead.
    Tally,
    /// Clients flip on their turn and ring on five of a fruit.
    HalliGalli,
}

impl GameKind {
    pub fn id(self) -> &'static str {
        match self {
            GameKind::Tally => "tally",
            GameKind::HalliGalli => "halli-galli",
        }
    }
}

impl std::str::FromStr for GameKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<GameKind> {
        match s {
            "tally" => Ok(GameKind::Tally),
            "halli-galli" => Ok(GameKind::HalliGalli),
            other => bail!("unknown game {other:?} (tally or halli-galli)"),
        }
    }
}

/// What the servers at the URLs are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// roomd: rooms through the HTTP API.
    Roomd,
    /// The reference limit server (`limit_server`): no HTTP, rooms exist on `sub`.
    Limit,
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Base URLs (`http://host:port`); rooms are spread over them round-robin.
    pub urls: Vec<String>,
    pub target: Target,
    pub game: GameKind,
    pub rooms: usize,
    /// The measured window.
    pub duration: Duration,
    /// Rooms being set up at once during the ramp.
    pub concurrency: usize,
    /// Longest the ramp may take; rooms not ready by then are left out (and counted).
    pub ramp_timeout: Duration,
    /// Tally: each client bumps this often.
    pub interval: Duration,
    /// Halli-galli: delay between seeing a table and acting on it.
    pub reaction: Duration,
    /// Halli-galli: chance per update that a client rings wrongly or with a stale version.
    pub bad_ring_rate: f64,
    /// Seed for the clients' choices (jitter, bad rings).
    pub seed: u64,
    /// The server processes on this machine (a cluster: every node and Redis) whose CPU
    /// time (utime+stime) and RSS are read from `/proc`, summed, at the start, when the
    /// window opens and when it closes.
    pub server_pids: Vec<u32>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            urls: vec!["http://127.0.0.1:8080".into()],
            target: Target::Roomd,
            game: GameKind::Tally,
            rooms: 10,
            duration: Duration::from_secs(10),
            concurrency: 32,
            ramp_timeout: Duration::from_secs(120),
            interval: Duration::from_millis(1000),
            reaction: Duration::from_millis(250),
            bad_ring_rate: 0.05,
            seed: 1,
            server_pids: Vec::new(),
        }
    }
}

/// Action → update latency quantiles (milliseconds).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// What a run saw.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub target: String,
    pub game: String,
    pub rooms_requested: usize,
    pub rooms_ready: usize,
    /// Clients connected and subscribed when the window opened.
    pub connected_clients: usize,
    /// Clients whose socket was still open at the end of the window.
    pub connected_at_end: usize,
    pub ramp_s: f64,
    pub window_s: f64,
    pub actions_sent: u64,
    pub acks: u64,
    pub actions_per_s: f64,
    pub updates: u64,
    pub updates_per_s: f64,
    pub rejects: BTreeMap<String, u64>,
    pub latency: Latency,
    /// Actions with neither ack nor reject after the drain.
    pub unanswered: u64,
    pub games_finished: u64,
    pub errors: u64,
    /// Errors by kind (the message up to its first digit or colon).
    pub error_kinds: BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
    /// Loadgen's own CPU seconds in the window: near the window length means the load
    /// generator, not the server, bounds the figures (and the latency).
    pub loadgen_cpu_s: Option<f64>,
    /// Seconds the server's and loadgen's threads spent runnable but waiting for a CPU in
    /// the window (`/proc/<pid>/schedstat`, summed over threads): other work on the same
    /// cores shows up here, and in the latency.
    pub server_runqueue_wait_s: Option<f64>,
    pub loadgen_runqueue_wait_s: Option<f64>,
    /// With `server_pids`: the servers' CPU seconds within the window.
    pub server_cpu_s: Option<f64>,
    /// Updates delivered per server CPU-second (within the window).
    pub deliveries_per_cpu_s: Option<f64>,
    /// Connected players per server CPU core busy in the window.
    pub players_per_core: Option<f64>,
    /// Server RSS before the ramp, when the window opened and when it closed (KiB).
    pub server_rss_kb: Option<[u64; 3]>,
    /// (RSS at window open − RSS before the ramp) per room and per connection (KiB).
    pub kb_per_room: Option<f64>,
    pub kb_per_connection: Option<f64>,
}

/// A process's CPU seconds (utime + stime) and resident set (KiB), from `/proc`.
pub fn proc_sample(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields resume after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after `) `.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    // USER_HZ is 100 on every Linux this runs on (sysconf(_SC_CLK_TCK)).
    Some((ticks as f64 / 100.0, rss))
}

/// [`proc_sample`] summed over `pids`; `None` when empty or one cannot be read.
fn sample_all(pids: &[u32]) -> Option<(f64, u64)> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().try_fold((0.0, 0), |(cpu, rss), pid| proc_sample(*pid).map(|(c, r)| (cpu + c, rss + r)))
}

/// [`runqueue_wait_s`] summed over `pids`.
fn wait_all(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().try_fold(0.0, |sum, pid| runqueue_wait_s(*pid).map(|w| sum + w))
}

/// Seconds all threads of `pid` have waited on a run queue (`/proc/<pid>/task/*/schedstat`).
pub fn runqueue_wait_s(pid: u32) -> Option<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let text = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        ns += text.split_whitespace().nth(1).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    }
    Some(ns as f64 / 1e9)
}

/// One client's counters.
#[derive(Default)]
struct Stats {
    sent: u64,
    acks: u64,
    updates: u64,
    rejects: BTreeMap<String, u64>,
    latencies_us: Vec<u32>,
    unanswered: u64,
    results: u64,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    error_samples: Vec<String>,
    open_at_end: bool,
}

/// A short, count-friendly name for an error message.
fn error_kind(message: &str) -> String {
    let end = message.find(|c: char| c == ':' || c.is_ascii_digit()).unwrap_or(message.len()).min(60);
    message[..end].trim().to_owned()
}

impl Stats {
    fn error(&mut self, message: String) {
        *self.error_kinds.entry(error_kind(&message)).or_default() += 1;
        self.errors += 1;
        if self.error_samples.len() < ERROR_SAMPLES {
            self.error_samples.push(message);
        }
    }
}

/// A guest session.
#[derive(Clone, Debug)]
pub struct Session {
    pub user_id: String,
    pub token: String,
}

/// A connected, subscribed player of one room.
struct Player {
    ws: Ws,
    me: String,
    room: String,
    /// The host restarts the game when it ends.
    restart: Option<Restart>,
}

#[derive(Clone)]
struct Restart {
    http: reqwest::Client,
    base: String,
    token: String,
}

pub fn ws_url(base: &str, token: &str) -> anyhow::Result<String> {
    let rest = base
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("url must start with http:// (got {base:?}): loadgen speaks plain HTTP only"))?;
    Ok(format!("ws://{}/ws?token={token}", rest.trim_end_matches('/')))
}

pub async fn post(http: &reqwest::Client, url: String, token: Option<&str>, body: Value) -> anyhow::Result<Value> {
    let mut req = http.post(&url).json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = match timeout(SETUP_TIMEOUT, req.send()).await.context("timed out")? {
        Ok(res) => res,
        // The connection failed before a response: send once more on a fresh one.
        Err(e) if e.is_connect() || e.is_request() => {
            let mut again = http.post(&url).json(&body);
            if let Some(t) = token {
                again = again.bearer_auth(t);
            }
            timeout(SETUP_TIMEOUT, again.send()).await.context("timed out")?.with_context(|| format!("POST {url}"))?
        }
        Err(e) => return Err(e).with_context(|| format!("POST {url}")),
    };
    let status = res.status();
    let v: Value = res.json().await.with_context(|| format!("POST {url}: body"))?;
    if !status.is_success() {
        bail!("POST {url}: {status} {v}");
    }
    Ok(v)
}

pub async fn session(http: &reqwest::Client, base: &str, name: String) -> anyhow::Result<Session> {
    let v = post(http, format!("{base}/api/session"), None, json!({ "name": name })).await?;
    let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| anyhow!("session: no {k}"));
    Ok(Session { user_id: field("userId")?, token: field("token")? })
}

/// Small socket buffers: tungstenite's default 128 KiB read buffer per socket would make
/// loadgen's memory (and page faults) the limit long before the server's.
pub fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(8 * 1024).write_buffer_size(0)
}

/// Connects, sends `sub` and waits for the `sync`.
async fn join(base: &str, token: &str, room: &str) -> anyhow::Result<Ws> {
    let url = ws_url(base, token)?;
    let (mut ws, _) =
        timeout(SETUP_TIMEOUT, tokio_tungstenite::connect_async_with_config(url.as_str(), Some(ws_config()), true))
            .await
            .context("connect timed out")?
            .context("connect")?;
    ws.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await?;
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        let msg = timeout(deadline.saturating_duration_since(Instant::now()), ws.next())
            .await
            .context("no sync")?
            .ok_or_else(|| anyhow!("closed before sync"))??;
        if let Message::Text(text) = msg {
            let env: Envelope = serde_json::from_str(text.as_str())?;
            match env.t.as_str() {
                "sync" => return Ok(ws),
                "error" | "reject" => bail!("sub refused: {}", text.as_str()),
                _ => {}
            }
        }
    }
}

/// Sets up room `i` on `base`: four players connected and subscribed, game started.
async fn setup_room(cfg: &Config, http: &reqwest::Client, base: &str, i: usize) -> anyhow::Result<Vec<Player>> {
    if cfg.target == Target::Limit {
        let room = format!("L{i}");
        let mut players = Vec::with_capacity(PLAYERS);
        for k in 0..PLAYERS {
            let me = format!("u_{i}_{k}");
            let ws = join(base, &me, &room).await?;
            players.push(Player { ws, me, room: room.clone(), restart: None });
        }
        return Ok(players);
    }
    // With several `--url`s the players of one room are spread over the nodes (player k
    // of room i on node i + k), so in a cluster most of a room's traffic crosses nodes.
    let node_of = |k: usize| cfg.urls.get((i + k) % cfg.urls.len().max(1)).map_or(base, String::as_str);
    let mut sessions = Vec::with_capacity(PLAYERS);
    for k in 0..PLAYERS {
        sessions.push(session(http, node_of(k), format!("lg{i}-{k}")).await?);
    }
    let options = match cfg.game {
        GameKind::Tally => json!({"target": null}),
        GameKind::HalliGalli => json!({}),
    };
    let host = &sessions[0];
    let created =
        post(http, format!("{base}/api/rooms"), Some(&host.token), json!({"game": cfg.game.id(), "options": options}))
            .await?;
    let room = created.get("roomId").and_then(Value::as_str).ok_or_else(|| anyhow!("no roomId"))?.to_owned();
    for (k, s) in sessions.iter().enumerate().skip(1) {
        post(http, format!("{}/api/rooms/{room}/seats", node_of(k)), Some(&s.token), json!({})).await?;
    }
    let mut players = Vec::with_capacity(PLAYERS);
    for (k, s) in sessions.iter().enumerate() {
        let ws = join(node_of(k), &s.token, &room).await?;
        let restart =
            (k == 0).then(|| Restart { http: http.clone(), base: node_of(k).to_owned(), token: s.token.clone() });
        players.push(Player { ws, me: s.user_id.clone(), room: room.clone(), restart });
    }
    post(http, format!("{base}/api/rooms/{room}/start"), Some(&host.token), json!({})).await?;
    Ok(players)
}

/// The fields of a server message every client reads (the view is skipped).
#[derive(Deserialize)]
struct Envelope {
    t: String,
    seq: Option<u64>,
    cs: Option<u64>,
    code: Option<String>,
}

#[derive(Deserialize)]
struct WithView<V> {
    view: V,
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

/// An action a client will send at `at`.
struct Planned {
    at: Instant,
    action: Value,
}

/// One client's play: reads everything, acts per its game, counts.
struct Client {
    cfg: Arc<Config>,
    player: Player,
    rng: Rng,
    stats: Stats,
    next_cs: u64,
    /// cs → (sent at, counted in the window).
    pending: HashMap<u64, (Instant, bool)>,
    recent: VecDeque<(u64, Instant)>,
    plans: Vec<Planned>,
    /// Halli-galli: a flip is planned or in flight.
    flip_planned: bool,
    /// Halli-galli: the table version a ring was last planned for.
    ring_planned_for: Option<u64>,
    last_view: Option<HgView>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ramp,
    Window,
    Drain,
}

impl Client {
    fn new(cfg: Arc<Config>, player: Player, seed: u128) -> Client {
        Client {
            cfg,
            player,
            rng: Rng::from_seed(Seed(seed)),
            stats: Stats::default(),
            next_cs: 1,
            pending: HashMap::new(),
            recent: VecDeque::with_capacity(RECENT_UPDATES),
            plans: Vec::new(),
            flip_planned: false,
            ring_planned_for: None,
            last_view: None,
        }
    }

    async fn run(mut self, mut go: watch::Receiver<Option<Instant>>) -> Stats {
        let mut phase = Phase::Ramp;
        let mut deadline = Instant::now() + Duration::from_secs(24 * 3600);
        let mut tick = tokio::time::interval(self.cfg.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next_plan = self.plans.iter().map(|p| p.at).min();
            tokio::select! {
                changed = go.changed(), if phase == Phase::Ramp => {
                    let started = *go.borrow();
                    match (changed, started) {
                        (Ok(()), Some(end)) => {
                            phase = Phase::Window;
                            deadline = end;
                            // Stagger the tally clients over one interval.
                            let offset = self.cfg.interval.mul_f64(self.rng.next());
                            tick = tokio::time::interval_at(Instant::now() + offset, self.cfg.interval);
                            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                            if let Some(view) = self.last_view.take() {
                                self.on_view(view);
                            }
                        }
                        (Ok(()), None) => {}
                        (Err(_), _) => break,
                    }
                }
                _ = sleep_until(deadline) => {
                    match phase {
                        Phase::Window => {
                            phase = Phase::Drain;
                            self.plans.clear();
                            deadline = Instant::now() + DRAIN;
                            if self.pending.is_empty() {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
                _ = tick.tick(), if phase == Phase::Window && self.cfg.game == GameKind::Tally => {
                    if self.pending.len() < MAX_IN_FLIGHT {
                        self.send(json!({"type": "bump"})).await;
                    }
                }
                _ = sleep_until(next_plan.unwrap_or(deadline)), if phase == Phase::Window && next_plan.is_some() => {
                    let now = Instant::now();
                    let (due, later): (Vec<Planned>, Vec<Planned>) = self.plans.drain(..).partition(|p| p.at <= now);
                    self.plans = later;
                    for p in due {
                        self.send(p.action).await;
                    }
                }
                msg = self.player.ws.next() => {
                    match msg {
                        Some(Ok(Message::Text(text))) => self.on_text(text.as_str(), phase),
                        Some(Ok(Message::Close(frame))) => {
                            if phase != Phase::Drain {
                                self.stats.error(format!("server closed the socket: {frame:?}"));
                            }
                            break;
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            self.stats.error(format!("socket: {e}"));
                            break;
                        }
                        None => {
                            self.stats.error("socket ended".into());
                            break;
                        }
                    }
                    if phase == Phase::Drain && self.pending.is_empty() {
                        break;
                    }
                }
            }
        }
        self.stats.open_at_end = phase == Phase::Drain || phase == Phase::Window;
        self.stats.unanswered = self.pending.values().filter(|(_, counted)| *counted).count() as u64;
        let _ = self.player.ws.close(None).await;
        self.stats
    }

    async fn send(&mut self, action: Value) {
        let cs = self.next_cs;
        self.next_cs += 1;
        let text = json!({"t": "act", "room": self.player.room, "cs": cs, "a": action}).to_string();
        self.pending.insert(cs, (Instant::now(), true));
        self.stats.sent += 1;
        if let Err(e) = self.player.ws.send(Message::text(text)).await {
            self.pending.remove(&cs);
            self.stats.error(format!("send: {e}"));
        }
    }

    fn on_text(&mut self, text: &str, phase: Phase) {
        let received = Instant::now();
        let env: Envelope = match serde_json::from_str(text) {
            Ok(e) => e,
            Err(e) => return self.stats.error(format!("bad server message ({e}): {text:.200}")),
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
                        self.stats.updates += 1;
                    }
                }
                if self.cfg.game == GameKind::HalliGalli {
                    match serde_json::from_str::<WithView<HgView>>(text) {
                        Ok(v) if phase == Phase::Window => self.on_view(v.view),
                        Ok(v) => self.last_view = Some(v.view),
                        Err(e) => self.stats.error(format!("bad halli-galli view ({e})")),
                    }
                }
            }
            "ack" => {
                let (Some(cs), Some(seq)) = (env.cs, env.seq) else {
                    return self.stats.error(format!("ack without cs/seq: {text:.200}"));
                };
                let Some((sent, counted)) = self.pending.remove(&cs) else {
                    return self.stats.error(format!("ack for unknown cs {cs}"));
                };
                if counted && counting {
                    self.stats.acks += 1;
                    match self.recent.iter().rev().find(|(s, _)| *s == seq) {
                        Some((_, at)) => {
                            let us = at.saturating_duration_since(sent).as_micros();
                            self.stats.latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                        }
                        None => self.stats.error(format!("ack for seq {seq} without its update")),
                    }
                }
                self.after_answer(&env);
            }
            "reject" => {
                let Some(cs) = env.cs else {
                    return self.stats.error(format!("reject without cs: {text:.200}"));
                };
                if self.pending.remove(&cs).is_some() && counting {
                    *self.stats.rejects.entry(env.code.clone().unwrap_or_default()).or_default() += 1;
                }
                self.after_answer(&env);
            }
            "result" => {
                if counting {
                    self.stats.results += 1;
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
                self.stats.error(format!("server error: {text:.200}"));
            }
            other => self.stats.error(format!("unknown message type {other:?}")),
        }
    }

    /// After an ack or reject: a halli-galli flip is no longer in flight.
    fn after_answer(&mut self, env: &Envelope) {
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
        let now = Instant::now();
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

fn quantile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() - 1) as f64 * q).round() as usize;
    f64::from(sorted_us[i.min(sorted_us.len() - 1)]) / 1000.0
}

/// Runs one load test and reports what it saw.
pub async fn run(cfg: Config) -> anyhow::Result<Report> {
    if cfg.urls.is_empty() {
        bail!("no --url given");
    }
    for url in &cfg.urls {
        ws_url(url, "x")?;
    }
    let cfg = Arc::new(cfg);
    // Idle pooled connections are dropped well before the server's keep-alive (5 s in
    // actix-web) closes them, so a request is never sent on a connection being closed.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(cfg.concurrency.max(1))
        .pool_idle_timeout(Duration::from_secs(1))
        .build()?;
    let (go_tx, go_rx) = watch::channel(None::<Instant>);
    let permits = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let pids = cfg.server_pids.clone();
    let at_start = sample_all(&pids);
    let ramp_started = Instant::now();
    let ramp_deadline = ramp_started + cfg.ramp_timeout;
    let mut setups = Vec::with_capacity(cfg.rooms);
    for i in 0..cfg.rooms {
        let (cfg, http, permits, go) = (cfg.clone(), http.clone(), permits.clone(), go_rx.clone());
        setups.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await.map_err(|e| anyhow!("{e}"))?;
            let base = &cfg.urls[i % cfg.urls.len()];
            let left = ramp_deadline.saturating_duration_since(Instant::now());
            let players = timeout(left, setup_room(&cfg, &http, base, i))
                .await
                .map_err(|_| anyhow!("room {i}: not ready before the ramp timeout"))?
                .with_context(|| format!("room {i}"))?;
            let mut clients = Vec::with_capacity(players.len());
            for (k, p) in players.into_iter().enumerate() {
                let seed = (u128::from(cfg.seed) << 64) | ((i * PLAYERS + k) as u128);
                clients.push(tokio::spawn(Client::new(cfg.clone(), p, seed).run(go.clone())));
            }
            anyhow::Ok(clients)
        }));
    }
    drop(go_rx);
    let mut report = Report {
        target: format!("{:?}", cfg.target).to_lowercase(),
        game: cfg.game.id().into(),
        rooms_requested: cfg.rooms,
        ..Report::default()
    };
    let mut clients = Vec::new();
    for setup in setups {
        match setup.await {
            Ok(Ok(cs)) => {
                report.rooms_ready += 1;
                clients.extend(cs);
            }
            Ok(Err(e)) => {
                report.errors += 1;
                *report
                    .error_kinds
                    .entry(format!("setup: {}", error_kind(&format!("{:#}", e.root_cause()))))
                    .or_default() += 1;
                if report.error_samples.len() < ERROR_SAMPLES {
                    report.error_samples.push(format!("{e:#}"));
                }
            }
            Err(e) => bail!("setup task: {e}"),
        }
    }
    report.connected_clients = clients.len();
    report.ramp_s = ramp_started.elapsed().as_secs_f64();
    let window_start = Instant::now();
    let at_open = sample_all(&pids);
    let me = std::process::id();
    let self_open = proc_sample(me);
    let waits_open = (wait_all(&pids), runqueue_wait_s(me));
    go_tx.send(Some(window_start + cfg.duration)).map_err(|_| anyhow!("no client is listening"))?;
    let at_close = if pids.is_empty() {
        None
    } else {
        let close = window_start + cfg.duration;
        tokio::spawn(async move {
            sleep_until(close).await;
            let waits = (wait_all(&pids), runqueue_wait_s(me));
            (sample_all(&pids), proc_sample(me), waits)
        })
        .await
        .ok()
    };
    let (at_close, self_close, waits_close) = at_close.unwrap_or((None, None, (None, None)));
    if let ((Some(s0), Some(l0)), (Some(s1), Some(l1))) = (waits_open, waits_close) {
        report.server_runqueue_wait_s = Some(s1 - s0);
        report.loadgen_runqueue_wait_s = Some(l1 - l0);
    }
    if let (Some(open), Some(close)) = (self_open, self_close) {
        report.loadgen_cpu_s = Some(close.0 - open.0);
    }
    let mut latencies = Vec::new();
    for c in clients {
        let s = c.await.map_err(|e| anyhow!("client task: {e}"))?;
        report.actions_sent += s.sent;
        report.acks += s.acks;
        report.updates += s.updates;
        for (code, n) in s.rejects {
            *report.rejects.entry(code).or_default() += n;
        }
        report.unanswered += s.unanswered;
        report.games_finished += s.results;
        report.connected_at_end += usize::from(s.open_at_end);
        report.errors += s.errors;
        for (kind, n) in s.error_kinds {
            *report.error_kinds.entry(kind).or_default() += n;
        }
        for e in s.error_samples {
            if report.error_samples.len() < ERROR_SAMPLES {
                report.error_samples.push(e);
            }
        }
        latencies.extend(s.latencies_us);
    }
    // Each of the four players sees every result.
    report.games_finished /= PLAYERS as u64;
    let window = cfg.duration.as_secs_f64();
    report.window_s = window;
    report.actions_per_s = report.acks as f64 / window;
    report.updates_per_s = report.updates as f64 / window;
    if let (Some(start), Some(open), Some(close)) = (at_start, at_open, at_close) {
        let cpu = close.0 - open.0;
        report.server_cpu_s = Some(cpu);
        report.server_rss_kb = Some([start.1, open.1, close.1]);
        if cpu > 0.0 {
            report.deliveries_per_cpu_s = Some(report.updates as f64 / cpu);
            report.players_per_core = Some(report.connected_clients as f64 / (cpu / window));
        }
        let grown = open.1.saturating_sub(start.1) as f64;
        if report.rooms_ready > 0 {
            report.kb_per_room = Some(grown / report.rooms_ready as f64);
            report.kb_per_connection = Some(grown / report.connected_clients.max(1) as f64);
        }
    }
    latencies.sort_unstable();
    report.latency = Latency {
        samples: latencies.len(),
        p50_ms: quantile_ms(&latencies, 0.5),
        p99_ms: quantile_ms(&latencies, 0.99),
        p999_ms: quantile_ms(&latencies, 0.999),
        max_ms: latencies.last().map_or(0.0, |m| f64::from(*m) / 1000.0),
    };
    Ok(report)
}

impl Report {
    /// The human-readable summary.
    pub fn text(&self) -> String {
        let rejects: Vec<String> = self.rejects.iter().map(|(c, n)| format!("{c}={n}")).collect();
        let mut out = format!(
            "target {} game {}: rooms {}/{} ready in {:.1} s, {} clients connected ({} open at end)\n\
             window {:.1} s: {} actions sent, {} acked ({:.0}/s), {} updates delivered ({:.0}/s)\n\
             latency action→update ({} samples): p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms\n\
             rejects: {}; unanswered {}; games finished {}; errors {}",
            self.target,
            self.game,
            self.rooms_ready,
            self.rooms_requested,
            self.ramp_s,
            self.connected_clients,
            self.connected_at_end,
            self.window_s,
            self.actions_sent,
            self.acks,
            self.actions_per_s,
            self.updates,
            self.updates_per_s,
            self.latency.samples,
            self.latency.p50_ms,
            self.latency.p99_ms,
            self.latency.p999_ms,
            self.latency.max_ms,
            if rejects.is_empty() { "none".into() } else { rejects.join(", ") },
            self.unanswered,
            self.games_finished,
            self.errors,
        );
        if let (Some(cpu), Some(rss)) = (self.server_cpu_s, self.server_rss_kb) {
            out.push_str(&format!(
                "\nserver: {cpu:.2} CPU-s in the window, {:.0} deliveries/CPU-s, {:.0} players/core, RSS {} → {} → {} KiB ({:.1} KiB/room, {:.1} KiB/connection)",
                self.deliveries_per_cpu_s.unwrap_or(0.0),
                self.players_per_core.unwrap_or(0.0),
                rss[0],
                rss[1],
                rss[2],
                self.kb_per_room.unwrap_or(0.0),
                self.kb_per_connection.unwrap_or(0.0),
            ));
        }
        if let Some(cpu) = self.loadgen_cpu_s {
            out.push_str(&format!("\nloadgen: {cpu:.2} CPU-s in the window"));
        }
        if let (Some(s), Some(l)) = (self.server_runqueue_wait_s, self.loadgen_runqueue_wait_s) {
            out.push_str(&format!("\nrun-queue wait in the window: server {s:.2} s, loadgen {l:.2} s"));
        }
        for (kind, n) in &self.error_kinds {
            out.push_str(&format!("\n  errors {kind}: {n}"));
        }
        for e in &self.error_samples {
            out.push_str(&format!("\n  error: {e}"));
        }
        out
    }
}
