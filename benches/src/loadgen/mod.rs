//! The load generator: rooms created through the HTTP API, four WebSocket players per
//! room speaking `PROTOCOL.md`, an open-loop schedule, HDR histograms, live progress,
//! thresholds and a self-contained HTML report.
//!
//! It only ever connects to the URLs in [`Config::urls`]; point it at your own servers.
//!
//! A run has two phases. The ramp sets rooms up with at most [`Config::concurrency`]
//! rooms in flight (guest session per client, the host creates the room, the other three
//! sit, every client connects and `sub`s, the host starts). Once every room is ready (or
//! the ramp timeout passes) the measured window begins: clients act and everything is
//! counted. After the window clients stop acting and wait up to [`DRAIN`] for the answers
//! to actions still in flight, and every client stays connected until the last one has
//! them ([`play::Hold`]): the run's sockets closing at once is not timed into the answers
//! still due. With socket stages ([`Config::socket_stages`]) there is no
//! separate ramp: rooms are set up and torn down while the window runs.
//!
//! Latency is action → update as the sender sees it: from the time the action was
//! *scheduled* (open loop) to receiving the `update` whose `seq` the `ack` for that `cs`
//! names (the room sends the update before the ack, so the update is looked up among the
//! recent ones).
//!
//! Layout: [`cli`] (flags, scenario files), [`spec`] (durations, stages, schedules,
//! thresholds), [`net`] (HTTP/WS/TLS, room setup), [`play`] (the clients and their
//! games), [`stats`] (histograms, series), [`runner`] (the run), [`procfs`] (server
//! CPU/RSS), [`progress`] (the terminal display), [`report`] (JSON/text) and [`html`]
//! (the HTML report with SVG plots).

pub mod cli;
pub mod html;
pub mod net;
pub mod play;
pub mod procfs;
pub mod progress;
pub mod redis_stats;
pub mod report;
pub mod runner;
pub mod spec;
pub mod stats;

pub use net::{post, session, ws_config, ws_url, Session, Ws};
pub use play::{HgView, DRAIN};
pub use procfs::{proc_sample, runqueue_wait_s};
pub use report::Report;
pub use runner::run;
pub use spec::{Stage, Threshold};
pub use stats::{error_kind, ErrorTally, Latency};

use anyhow::bail;
use serde::Serialize;
use std::time::Duration;

/// Players per room.
pub const PLAYERS: usize = 4;

/// Which game the rooms play.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GameKind {
    /// Every client bumps on a schedule: pure framework overhead.
    Tally,
    /// Clients flip on their turn and ring on five of a fruit.
    HalliGalli,
    /// The player whose move it is offers, peeks, passes or calls at random.
    CockroachPoker,
}

impl GameKind {
    pub fn id(self) -> &'static str {
        match self {
            GameKind::Tally => "tally",
            GameKind::HalliGalli => "halli-galli",
            GameKind::CockroachPoker => "cockroach-poker",
        }
    }
}

impl std::str::FromStr for GameKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<GameKind> {
        match s {
            "tally" => Ok(GameKind::Tally),
            "halli-galli" => Ok(GameKind::HalliGalli),
            "cockroach-poker" => Ok(GameKind::CockroachPoker),
            other => bail!("unknown game {other:?} (tally, halli-galli or cockroach-poker)"),
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

/// How tally bumps are paced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoopMode {
    /// On a schedule that does not wait for answers; latency from the scheduled time.
    Open,
    /// A tick per interval, skipped while `max_in_flight` are unanswered; latency from the
    /// actual send (hides queueing: for comparison only).
    Closed,
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Base URLs (`http://host:port` or `https://…`); rooms are spread over them round-robin.
    pub urls: Vec<String>,
    pub target: Target,
    pub game: GameKind,
    pub rooms: usize,
    /// The measured window (ignored with stages: their total length is the window).
    pub duration: Duration,
    /// Rooms being set up at once during the ramp.
    pub concurrency: usize,
    /// Longest the ramp may take; rooms not ready by then are left out (and counted).
    pub ramp_timeout: Duration,
    /// Tally: each client bumps this often (when no `rate` is given).
    pub interval: Duration,
    /// Tally, open loop: actions per second for the whole run, spread over the clients.
    pub rate: Option<f64>,
    /// Tally, open loop: the run's rate over time (from `rate`, or 0, to each target).
    pub rate_stages: Option<Vec<Stage>>,
    /// Sockets over time (from 0 to each target; rooms of four are set up and torn down).
    pub socket_stages: Option<Vec<Stage>>,
    pub mode: LoopMode,
    /// Closed loop: actions a client may have unanswered before it skips a tick.
    pub max_in_flight: usize,
    /// Sends later than this after their scheduled time are counted as late.
    pub late_after: Duration,
    /// Halli-galli: delay between seeing a table and acting on it.
    pub reaction: Duration,
    /// Halli-galli: chance per update that a client rings wrongly or with a stale version.
    pub bad_ring_rate: f64,
    /// Seed for the clients' choices (jitter, bad rings, schedule offsets).
    pub seed: u64,
    /// The server processes on this machine (a cluster: every node and Redis) whose CPU
    /// time (utime+stime) and RSS are read from `/proc`, summed, at the start, every
    /// second of the window, when the window opens and when it closes.
    pub server_pids: Vec<u32>,
    /// A Redis whose command counts and CPU are read as the window opens and closes (the
    /// cluster's Redis): the report's Redis budget per acknowledged action.
    pub redis_stats: Option<String>,
    /// Connect each room's players to the room's owner (`nodeUrl` in room info) when it
    /// is one of `urls`, instead of spreading them over the nodes.
    pub direct: bool,
    /// Keep every player of room `i` on `urls[i % n]` (sessions, seats, sockets): servers
    /// that share nothing, each room whole on one of them.
    pub whole_rooms: bool,
    /// Accept any TLS certificate (self-signed test proxies).
    pub insecure: bool,
    /// Draw live progress on stderr (only when it is a terminal).
    pub progress: bool,
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
            rate: None,
            rate_stages: None,
            socket_stages: None,
            mode: LoopMode::Open,
            max_in_flight: 16,
            late_after: Duration::from_millis(10),
            reaction: Duration::from_millis(250),
            bad_ring_rate: 0.05,
            seed: 1,
            server_pids: Vec::new(),
            redis_stats: None,
            direct: false,
            whole_rooms: false,
            insecure: false,
            progress: false,
        }
    }
}
