//! One cycle (sessions, room, seats, sockets, start, play to the result, leave) and the
//! workers that run cycles until `--cycles` or `--max-seconds`.

use super::cli::Args;
use super::counts::{Counts, Progress};
use super::net::{call, connect_sub, CALL_TIMEOUT};
use super::plan::{plan_cycle, CyclePlan};
use super::player::Player;
use crate::loadgen;
use anyhow::{anyhow, Context};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::time::{timeout, Instant};

/// One cycle; the caller bounds it with `--cycle-timeout`.
pub(super) async fn run_cycle(
    http: &reqwest::Client,
    base: &str,
    i: usize,
    plan: &CyclePlan,
    progress: &Progress,
) -> Counts {
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
    // Unlisted: the soak's rooms never fill the players' lobby.
    let body = json!({"game": plan.game.id(), "options": plan.options, "graceSec": 5, "listed": false});
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
        let player = Player::new(k, plan, http, base, session, &room, progress);
        // The waiting-room sync was read by `connect_sub`; the game's sync follows the start.
        player.run(ws, None)
    });
    for c in futures_util::future::join_all(players).await {
        counts.add(c);
    }
    progress.set("done");
    Ok(())
}

pub(super) struct Shared {
    pub(super) args: Args,
    pub(super) http: reqwest::Client,
    pub(super) next: AtomicUsize,
    pub(super) done: AtomicUsize,
    pub(super) failed: AtomicUsize,
    pub(super) started: Instant,
    pub(super) totals: Mutex<Counts>,
}

pub(super) async fn worker(shared: Arc<Shared>) {
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
