//! What a run saw: the JSON report (`--json`, read by `run.sh` and `loadgen_results`) and
//! its text summary.

use super::spec::{Observed, Threshold, Verdict};
use super::stats::{Latency, Second};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One bucket of the latency histogram: latencies up to `le_ms` (and above the previous
/// bucket's bound).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bucket {
    pub le_ms: f64,
    pub count: u64,
}

/// What a run saw.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Report {
    pub target: String,
    pub game: String,
    /// `open` (latency from the scheduled send time) or `closed`.
    pub mode: String,
    /// When the run started (UTC, RFC 3339) and the command line that ran it.
    pub started_at: String,
    pub command: String,
    /// The run's settings as given (for the report's parameter table).
    pub params: BTreeMap<String, String>,
    pub rooms_requested: usize,
    pub rooms_ready: usize,
    /// Clients connected and subscribed when the window opened (socket stages: the most
    /// connected at once).
    pub connected_clients: usize,
    /// Clients whose socket was still open at the end of the window.
    pub connected_at_end: usize,
    pub ramp_s: f64,
    pub window_s: f64,
    /// Open loop: the rate the schedule asked for (peak, with stages).
    pub target_rate: Option<f64>,
    /// Actions the schedule asked for in the window (open loop) or ticks (closed loop).
    pub scheduled: u64,
    pub actions_sent: u64,
    pub acks: u64,
    pub actions_per_s: f64,
    pub updates: u64,
    pub updates_per_s: f64,
    /// Sent later than `lateAfterMs` after their scheduled time (their latency counts from
    /// the scheduled time).
    pub late: u64,
    pub late_after_ms: f64,
    /// Due in the window but never sent (the client could not keep up).
    pub missed: u64,
    /// Closed loop: ticks skipped because too many actions were in flight.
    pub skipped: u64,
    pub rejects: BTreeMap<String, u64>,
    pub latency: Latency,
    /// Scheduled time → actual send: the load generator's own lateness.
    pub send_lag: Latency,
    /// Actions with neither ack nor reject after the drain.
    pub unanswered: u64,
    pub games_finished: u64,
    pub errors: u64,
    /// Errors by kind (the message up to its first digit, colon or parenthesis).
    pub error_kinds: BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
    /// One point per second of the window (and of the drain).
    pub series: Vec<Second>,
    /// The latency histogram (logarithmic buckets, empty ones left out).
    pub histogram: Vec<Bucket>,
    pub thresholds: Vec<Verdict>,
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
    /// With `--redis-stats`: Redis commands, command time and CPU in the window, per
    /// acknowledged action.
    pub redis: Option<super::redis_stats::RedisBudget>,
}

impl Report {
    /// The numbers thresholds are checked against.
    pub fn observed(&self) -> Observed {
        Observed {
            p50_ms: self.latency.p50_ms,
            p90_ms: self.latency.p90_ms,
            p99_ms: self.latency.p99_ms,
            p999_ms: self.latency.p999_ms,
            max_ms: self.latency.max_ms,
            mean_ms: self.latency.mean_ms,
            errors: self.errors,
            rejects: self.rejects.values().sum(),
            late: self.late,
            missed: self.missed,
            sent: self.actions_sent,
            scheduled: self.scheduled,
            rate: self.actions_per_s,
        }
    }

    /// Checks `thresholds`, records the verdicts, and returns the failed ones.
    pub fn check(&mut self, thresholds: &[Threshold]) -> Vec<Verdict> {
        let o = self.observed();
        self.thresholds = thresholds.iter().map(|t| t.check(&o)).collect();
        self.thresholds.iter().filter(|v| !v.ok).cloned().collect()
    }

    /// The human-readable summary.
    pub fn text(&self) -> String {
        let rejects: Vec<String> = self.rejects.iter().map(|(c, n)| format!("{c}={n}")).collect();
        let l = &self.latency;
        let target = self.target_rate.map(|r| format!(", target {r:.0}/s")).unwrap_or_default();
        let mut out = format!(
            "target {} game {} ({} loop): rooms {}/{} ready in {:.1} s, {} clients connected ({} open at end)\n\
             window {:.1} s: {} scheduled, {} sent ({} late > {} ms, {} missed, {} skipped), {} acked ({:.0}/s{target}), \
             {} updates delivered ({:.0}/s)\n\
             latency action→update from the scheduled time ({} samples): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, \
             p99.9 {:.2} ms, max {:.2} ms\n\
             send lag: p99 {:.2} ms, max {:.2} ms\n\
             rejects: {}; unanswered {}; games finished {}; errors {}",
            self.target,
            self.game,
            self.mode,
            self.rooms_ready,
            self.rooms_requested,
            self.ramp_s,
            self.connected_clients,
            self.connected_at_end,
            self.window_s,
            self.scheduled,
            self.actions_sent,
            self.late,
            self.late_after_ms,
            self.missed,
            self.skipped,
            self.acks,
            self.actions_per_s,
            self.updates,
            self.updates_per_s,
            l.samples,
            l.p50_ms,
            l.p90_ms,
            l.p99_ms,
            l.p999_ms,
            l.max_ms,
            self.send_lag.p99_ms,
            self.send_lag.max_ms,
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
        for v in &self.thresholds {
            out.push_str(&format!(
                "\nthreshold {}: {} (observed {:.3}{})",
                v.threshold,
                if v.ok { "ok" } else { "FAILED" },
                v.observed,
                v.unit
            ));
        }
        out
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, proleptic Gregorian).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_098_500), "2026-12-01T04:15:00Z");
    }

    #[test]
    fn failed_thresholds_are_named_and_recorded() {
        let mut r = Report { errors: 3, actions_sent: 100, ..Report::default() };
        r.latency.p99_ms = 80.0;
        let ts: Vec<crate::loadgen::Threshold> = ["p99<50ms", "errors<5%", "errors<1%"]
            .iter()
            .map(|t| t.parse().unwrap_or_else(|_| unreachable!()))
            .collect();
        let failed = r.check(&ts);
        assert_eq!(failed.iter().map(|v| v.threshold.as_str()).collect::<Vec<_>>(), vec!["p99<50ms", "errors<1%"]);
        assert_eq!(r.thresholds.len(), 3);
        assert!(r.text().contains("threshold p99<50ms: FAILED"));
    }
}
