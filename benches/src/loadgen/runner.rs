//! One run: the ramp (or socket stages), the window with its per-second ticker (series,
//! server CPU/RSS, live progress), the drain, and the [`Report`].

use super::net::{setup_room, Tls};
use super::play::{Client, Go, Hold};
use super::procfs::{proc_sample, runqueue_wait_s, sample_all, wait_all};
use super::progress::{Live, Progress};
use super::redis_stats;
use super::report::{Bucket, Report};
use super::spec::Schedule;
use super::stats::{error_kind, Latency, Recorder};
use super::{Config, GameKind, LoopMode, PLAYERS};
use anyhow::{anyhow, bail, Context};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout, Instant};

type Shared = Arc<Mutex<Recorder>>;

fn lock(rec: &Shared) -> std::sync::MutexGuard<'_, Recorder> {
    rec.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Checks what the flags alone cannot.
pub fn validate(cfg: &Config) -> anyhow::Result<()> {
    if cfg.urls.is_empty() {
        bail!("no --url given");
    }
    for url in &cfg.urls {
        super::net::ws_url(url, "x")?;
    }
    let tally = cfg.game == GameKind::Tally;
    if (cfg.rate.is_some() || cfg.rate_stages.is_some()) && !tally {
        bail!("--rate and rate stages pace tally bumps; the other games play at their own pace (use socket stages)");
    }
    if cfg.mode == LoopMode::Closed && (cfg.rate_stages.is_some() || cfg.rate.is_some()) {
        bail!("--closed-loop paces by --interval-ms; --rate and rate stages are open loop");
    }
    if cfg.rate_stages.is_some() && cfg.socket_stages.is_some() {
        bail!("stages are either rates or sockets, not both");
    }
    if cfg.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        bail!("--rate must be above 0");
    }
    Ok(())
}

/// Runs one load test and reports what it saw.
pub async fn run(cfg: Config) -> anyhow::Result<Report> {
    validate(&cfg)?;
    let cfg = Arc::new(cfg);
    let tls = Tls::new(cfg.insecure)?;
    let http = tls.http(cfg.concurrency)?;
    let rec: Shared = Arc::new(Mutex::new(Recorder::new(cfg.late_after)?));
    let progress = Arc::new(Progress::new(cfg.progress));
    let pids = cfg.server_pids.clone();
    let at_start = sample_all(&pids);
    let mut report = Report {
        target: format!("{:?}", cfg.target).to_lowercase(),
        game: cfg.game.id().into(),
        mode: if cfg.mode == LoopMode::Open { "open" } else { "closed" }.into(),
        rooms_requested: cfg.rooms,
        late_after_ms: cfg.late_after.as_secs_f64() * 1000.0,
        ..Report::default()
    };
    let ramp_started = Instant::now();
    let (clients, window) = if let Some(stages) = &cfg.socket_stages {
        let sockets = Schedule::staged(0.0, stages);
        report.rooms_requested = (sockets.peak() / PLAYERS as f64).ceil() as usize;
        staged_sockets(&cfg, &http, &tls, &rec, &progress, &pids, sockets, &mut report).await?
    } else {
        ramp_then_window(&cfg, &http, &tls, &rec, &progress, &pids, ramp_started, &mut report).await?
    };
    let (window_start, window_len, at_open, waits_open, self_open) = window;
    let redis_open = match &cfg.redis_stats {
        Some(url) => Some(redis_stats::sample(url).await?),
        None => None,
    };
    let me = std::process::id();
    let close = window_start + window_len;
    let ticker = tokio::spawn(tick(rec.clone(), progress.clone(), pids.clone(), window_start, report.target_rate));
    let at_close = {
        let pids = pids.clone();
        let redis = cfg.redis_stats.clone();
        tokio::spawn(async move {
            sleep_until(close).await;
            let waits = (wait_all(&pids), runqueue_wait_s(me));
            let sampled = (sample_all(&pids), proc_sample(me), waits);
            let redis = match redis {
                Some(url) => Some(redis_stats::sample(&url).await),
                None => None,
            };
            (sampled, redis)
        })
    };
    for c in clients {
        c.await.map_err(|e| anyhow!("client task: {e}"))?;
    }
    let ((at_close, self_close, waits_close), redis_close) = at_close.await.map_err(|e| anyhow!("sampler: {e}"))?;
    ticker.abort();
    progress.finish();
    if let ((Some(s0), Some(l0)), (Some(s1), Some(l1))) = (waits_open, waits_close) {
        report.server_runqueue_wait_s = Some(s1 - s0);
        report.loadgen_runqueue_wait_s = Some(l1 - l0);
    }
    if let (Some(open), Some(close)) = (self_open, self_close) {
        report.loadgen_cpu_s = Some(close.0 - open.0);
    }
    let window = window_len.as_secs_f64();
    report.window_s = window;
    {
        let mut r = lock(&rec);
        r.roll(Instant::now());
        report.scheduled = r.scheduled;
        report.actions_sent = r.sent;
        report.acks = r.acks;
        report.updates = r.updates;
        report.late = r.late;
        report.missed = r.missed;
        report.skipped = r.skipped;
        report.rejects = r.rejects.clone();
        report.unanswered = r.unanswered;
        report.connected_at_end = r.open_at_end as usize;
        // Each of the four players sees every result.
        report.games_finished = r.results / PLAYERS as u64;
        report.errors = r.errors.errors;
        report.error_kinds = r.errors.error_kinds.clone();
        report.error_samples = r.errors.error_samples.clone();
        report.latency = Latency::of(&r.latency);
        report.send_lag = Latency::of(&r.send_lag);
        report.series = r.series.clone();
        report.histogram = r
            .latency
            .iter_log(10, 1.25)
            .filter(|v| v.count_since_last_iteration() > 0)
            .map(|v| Bucket { le_ms: v.value_iterated_to() as f64 / 1000.0, count: v.count_since_last_iteration() })
            .collect();
    }
    if let (Some(open), Some(close)) = (redis_open, redis_close) {
        report.redis = Some(redis_stats::budget(&open, &close?, report.acks));
    }
    report.actions_per_s = report.acks as f64 / window.max(1e-9);
    report.updates_per_s = report.updates as f64 / window.max(1e-9);
    if let (Some(start), Some(open), Some(close)) = (at_start, at_open, at_close) {
        let cpu = close.0 - open.0;
        report.server_cpu_s = Some(cpu);
        report.server_rss_kb = Some([start.1, open.1, close.1]);
        if cpu > 0.0 {
            report.deliveries_per_cpu_s = Some(report.updates as f64 / cpu);
            report.players_per_core = Some(report.connected_clients as f64 / (cpu / window));
        }
        let grown = open.1.saturating_sub(start.1) as f64;
        if report.rooms_ready > 0 && cfg.socket_stages.is_none() {
            report.kb_per_room = Some(grown / report.rooms_ready as f64);
            report.kb_per_connection = Some(grown / report.connected_clients.max(1) as f64);
        }
    }
    Ok(report)
}

/// What the window starts with: its start, length, and the samples taken as it opened.
type WindowStart = (Instant, Duration, Option<(f64, u64)>, (Option<f64>, Option<f64>), Option<(f64, u64)>);

fn open_window(rec: &Shared, pids: &[u32], start: Instant, len: Duration) -> WindowStart {
    let at_open = sample_all(pids);
    let me = std::process::id();
    let waits = (wait_all(pids), runqueue_wait_s(me));
    lock(rec).open(start);
    (start, len, at_open, waits, proc_sample(me))
}

/// Starts the four clients of a ready room.
fn start_clients(
    cfg: &Arc<Config>,
    rec: &Shared,
    players: Vec<super::net::Player>,
    room: usize,
    go: &watch::Receiver<Option<Go>>,
    stop: &watch::Receiver<bool>,
    hold: &Arc<Hold>,
) -> Vec<JoinHandle<()>> {
    lock(rec).sockets += players.len() as u64;
    players
        .into_iter()
        .enumerate()
        .map(|(k, p)| {
            let seed = (u128::from(cfg.seed) << 64) | ((room * PLAYERS + k) as u128);
            let client = Client::new(cfg.clone(), p, seed, rec.clone(), hold.clone());
            tokio::spawn(client.run(go.clone(), stop.clone()))
        })
        .collect()
}

fn count_setup_error(rec: &Shared, e: &anyhow::Error) {
    let kind = format!("setup: {}", error_kind(&format!("{:#}", e.root_cause())));
    lock(rec).setup_error(kind, format!("{e:#}"));
}

/// The classic shape: set every room up, then open the window for all at once.
#[allow(clippy::too_many_arguments)]
async fn ramp_then_window(
    cfg: &Arc<Config>,
    http: &reqwest::Client,
    tls: &Tls,
    rec: &Shared,
    progress: &Progress,
    pids: &[u32],
    ramp_started: Instant,
    report: &mut Report,
) -> anyhow::Result<(Vec<JoinHandle<()>>, WindowStart)> {
    let (go_tx, go_rx) = watch::channel(None::<Go>);
    let (_stop_tx, stop_rx) = watch::channel(false);
    let hold = Hold::new();
    let permits = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let ramp_deadline = ramp_started + cfg.ramp_timeout;
    progress.ramp((cfg.rooms * PLAYERS) as u64);
    let mut setups = Vec::with_capacity(cfg.rooms);
    for i in 0..cfg.rooms {
        let (cfg, http, tls, permits, go, stop, rec, hold) = (
            cfg.clone(),
            http.clone(),
            tls.clone(),
            permits.clone(),
            go_rx.clone(),
            stop_rx.clone(),
            rec.clone(),
            hold.clone(),
        );
        setups.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await.map_err(|e| anyhow!("{e}"))?;
            let base = &cfg.urls[i % cfg.urls.len()];
            let left = ramp_deadline.saturating_duration_since(Instant::now());
            let players = timeout(left, setup_room(&cfg, &http, &tls, base, i))
                .await
                .map_err(|_| anyhow!("room {i}: not ready before the ramp timeout"))?
                .with_context(|| format!("room {i}"))?;
            anyhow::Ok(start_clients(&cfg, &rec, players, i, &go, &stop, &hold))
        }));
    }
    drop(go_rx);
    let mut clients = Vec::new();
    for setup in setups {
        match setup.await {
            Ok(Ok(cs)) => {
                report.rooms_ready += 1;
                clients.extend(cs);
            }
            Ok(Err(e)) => count_setup_error(rec, &e),
            Err(e) => bail!("setup task: {e}"),
        }
        let failures = lock(rec).setup_failures;
        progress.ramp_update(clients.len() as u64, failures);
    }
    if clients.is_empty() {
        let r = lock(rec);
        let first = r.errors.error_samples.first().map_or("none recorded", String::as_str);
        bail!("no room was set up ({} setup failures; the first: {first})", r.setup_failures);
    }
    report.connected_clients = clients.len();
    report.ramp_s = ramp_started.elapsed().as_secs_f64();
    let n = clients.len().max(1) as f64;
    let start = Instant::now();
    // The run's schedule of bumps (tally, open loop), and each client's share of it.
    let run_schedule = match (&cfg.rate_stages, cfg.rate) {
        (Some(stages), start_rate) => Some(Schedule::staged(start_rate.unwrap_or(0.0), stages)),
        (None, Some(rate)) => Some(Schedule::constant(rate, cfg.duration)),
        (None, None) => Some(Schedule::constant(n / cfg.interval.as_secs_f64(), cfg.duration)),
    }
    .filter(|_| cfg.game == GameKind::Tally && cfg.mode == LoopMode::Open);
    let len = run_schedule.as_ref().filter(|_| cfg.rate_stages.is_some()).map_or(cfg.duration, Schedule::length);
    report.target_rate = run_schedule.as_ref().map(Schedule::peak);
    let window = open_window(rec, pids, start, len);
    progress.window(len.as_secs());
    let schedule = run_schedule.map(|s| Arc::new(s.scaled(1.0 / n)));
    go_tx.send(Some(Go { start, end: start + len, schedule })).map_err(|_| anyhow!("no client is listening"))?;
    Ok((clients, window))
}

/// Socket stages: no separate ramp; rooms are set up and torn down as the target number
/// of sockets moves, and everything is counted from the start.
#[allow(clippy::too_many_arguments)]
async fn staged_sockets(
    cfg: &Arc<Config>,
    http: &reqwest::Client,
    tls: &Tls,
    rec: &Shared,
    progress: &Progress,
    pids: &[u32],
    sockets: Schedule,
    report: &mut Report,
) -> anyhow::Result<(Vec<JoinHandle<()>>, WindowStart)> {
    let start = Instant::now();
    let len = sockets.length();
    let end = start + len;
    let window = open_window(rec, pids, start, len);
    progress.window(len.as_secs());
    let permits = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let hold = Hold::new();
    let (ready_tx, mut ready_rx) =
        mpsc::unbounded_channel::<anyhow::Result<(Vec<JoinHandle<()>>, watch::Sender<bool>)>>();
    let mut active: Vec<watch::Sender<bool>> = Vec::new();
    let mut clients = Vec::new();
    let mut setting_up = 0usize;
    let mut next_room = 0usize;
    let mut setups = Vec::new();
    let mut peak = 0usize;
    loop {
        let now = Instant::now();
        while let Ok(ready) = ready_rx.try_recv() {
            setting_up -= 1;
            match ready {
                Ok((cs, stop)) => {
                    report.rooms_ready += 1;
                    clients.extend(cs);
                    active.push(stop);
                }
                Err(e) => count_setup_error(rec, &e),
            }
        }
        peak = peak.max(active.len() * PLAYERS);
        if now >= end {
            break;
        }
        let want = (sockets.at(now - start) / PLAYERS as f64).ceil() as usize;
        while active.len() + setting_up < want {
            let i = next_room;
            next_room += 1;
            setting_up += 1;
            let (cfg, http, tls, permits, rec, ready, hold) =
                (cfg.clone(), http.clone(), tls.clone(), permits.clone(), rec.clone(), ready_tx.clone(), hold.clone());
            setups.push(tokio::spawn(async move {
                let result = async {
                    let _permit = permits.acquire_owned().await.map_err(|e| anyhow!("{e}"))?;
                    let base = &cfg.urls[i % cfg.urls.len()];
                    let players = setup_room(&cfg, &http, &tls, base, i).await.with_context(|| format!("room {i}"))?;
                    let begin = Instant::now();
                    let schedule = (cfg.game == GameKind::Tally && cfg.mode == LoopMode::Open).then(|| {
                        let rest = end.saturating_duration_since(begin);
                        Arc::new(Schedule::constant(1.0 / cfg.interval.as_secs_f64(), rest))
                    });
                    let (_go_tx, go_rx) = watch::channel(Some(Go { start: begin, end, schedule }));
                    let (stop_tx, stop_rx) = watch::channel(false);
                    anyhow::Ok((start_clients(&cfg, &rec, players, i, &go_rx, &stop_rx, &hold), stop_tx))
                }
                .await;
                let _ = ready.send(result);
            }));
        }
        while active.len() > want {
            if let Some(stop) = active.pop() {
                let _ = stop.send(true);
            }
        }
        sleep(Duration::from_millis(100)).await;
    }
    for s in &setups {
        s.abort();
    }
    report.connected_clients = peak;
    Ok((clients, window))
}

/// Once a second of the window: close the second in the series, attach the servers' CPU
/// and RSS to it, and refresh the live line.
async fn tick(rec: Shared, progress: Arc<Progress>, pids: Vec<u32>, start: Instant, target_rate: Option<f64>) {
    let mut last = sample_all(&pids);
    for k in 1u64.. {
        sleep_until(start + Duration::from_secs(k)).await;
        let now = Instant::now();
        let sample = sample_all(&pids);
        let mut r = lock(&rec);
        r.roll(now);
        if let (Some(point), Some((cpu, rss)), Some((cpu0, _))) = (r.series.last_mut(), sample, last) {
            point.server_cpu_pct = Some((cpu - cpu0) * 100.0);
            point.server_rss_mib = Some(rss as f64 / 1024.0);
        }
        last = sample;
        let (rate, p99) = r.live(now);
        let live = Live {
            elapsed_s: k,
            rate,
            target_rate,
            p99_ms: p99,
            errors: r.errors.errors,
            late: r.late,
            missed: r.missed,
            sockets: r.sockets,
        };
        drop(r);
        progress.window_update(&live);
    }
}
