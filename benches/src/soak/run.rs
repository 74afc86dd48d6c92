//! The run: workers in flight, the sampler and progress lines until they are done, the
//! settle, then the report.

use super::cli::Args;
use super::counts::Counts;
use super::cycle::{worker, Shared};
use super::report::{self, Outcome};
use super::sample::{mib, scrape, Sample};
use crate::loadgen::procfs;
use anyhow::anyhow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{sleep, Instant};

/// Runs the soak against `a.url`; the exit code (0 flat, 1 RSS grows, 2 too many
/// failed cycles).
pub async fn soak(a: Args) -> anyhow::Result<u8> {
    // Idle pooled connections are dropped well before the server's keep-alive (5 s) closes them.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(a.concurrency)
        .pool_idle_timeout(Duration::from_secs(1))
        .build()?;
    let metrics_start = scrape(&http, &a.url).await.ok_or_else(|| anyhow!("no /metrics at {}", a.url))?;
    let pid = a.pid;
    let start_mem = match pid {
        Some(p) => Some(procfs::memory(p).ok_or_else(|| anyhow!("cannot read /proc/{p}/status"))?),
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
        let mem = pid.and_then(procfs::memory);
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
    let end_mem = pid.and_then(procfs::memory);
    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    let totals = shared.totals.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default();

    Ok(report::print(Outcome {
        a: &a,
        done,
        elapsed,
        samples,
        totals,
        metrics_start,
        middle_metrics,
        metrics_end,
        start_mem,
        end_mem,
    }))
}
