//! What a run counts: HDR histograms of latency (from each action's *scheduled* time),
//! send lag, errors by kind, rejects by code, and a per-second time series. Shared by all
//! clients of a run behind one mutex (never held across an await); the progress display
//! and the report read it.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// Error messages kept verbatim in the report.
pub const ERROR_SAMPLES: usize = 10;
/// Highest latency the histograms hold (µs); longer ones are clamped to it.
const MAX_US: u64 = 3_600_000_000;

/// A short, count-friendly name for an error message: up to its first digit, colon or
/// parenthesis (so `socket: reset (os error 104)` and `socket: timeout` are both `socket`).
pub fn error_kind(message: &str) -> String {
    let end = message.find(|c: char| c == ':' || c == '(' || c.is_ascii_digit()).unwrap_or(message.len()).min(60);
    message[..end].trim().to_owned()
}

/// Errors by kind with a few samples. Loadgen's clients and `soak` both count with it.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorTally {
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
}

impl ErrorTally {
    pub fn error(&mut self, message: String) {
        self.errors += 1;
        *self.error_kinds.entry(error_kind(&message)).or_default() += 1;
        if self.error_samples.len() < ERROR_SAMPLES {
            self.error_samples.push(message);
        }
    }

    /// Counts an error under an explicit kind (e.g. `setup: …`).
    pub fn error_as(&mut self, kind: String, message: String) {
        self.errors += 1;
        *self.error_kinds.entry(kind).or_default() += 1;
        if self.error_samples.len() < ERROR_SAMPLES {
            self.error_samples.push(message);
        }
    }

    pub fn merge(&mut self, other: ErrorTally) {
        self.errors += other.errors;
        for (k, n) in other.error_kinds {
            *self.error_kinds.entry(k).or_default() += n;
        }
        for s in other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(s);
            }
        }
    }
}

/// An empty histogram of microseconds (1 µs … 1 h) with 3 significant digits.
pub fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, MAX_US, 3)?)
}

/// Records `d` (clamped to the histogram's range).
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(MAX_US).clamp(1, MAX_US);
    let _ = h.record(us);
}

/// Quantiles of one histogram, milliseconds.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    pub samples: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            samples: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// One second of the run (by the time things happened, from the start of the window).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Second {
    /// Seconds since the window opened (this point covers [t, t+1)).
    pub t: u32,
    /// Actions the schedule asked for in this second (open loop) or ticks (closed loop).
    pub scheduled: u64,
    pub sent: u64,
    pub acks: u64,
    pub rejects: u64,
    pub errors: u64,
    /// Actions sent later than the late threshold after their scheduled time.
    pub late: u64,
    /// Latency quantiles of the actions answered in this second (ms).
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Sockets connected at the end of this second.
    pub sockets: u64,
    /// Server CPU use in this second (100 = one core busy) and RSS (MiB), with `--server-pid`.
    pub server_cpu_pct: Option<f64>,
    pub server_rss_mib: Option<f64>,
}

/// Everything counted in the window, shared by the clients of a run.
pub struct Recorder {
    /// When the window opened (the series' zero); `None` during the ramp.
    pub start: Option<Instant>,
    /// Action → update latency from the scheduled send time.
    pub latency: Histogram<u64>,
    /// Scheduled send time → actual send (the load generator's own lateness).
    pub send_lag: Histogram<u64>,
    second: Histogram<u64>,
    cur: Second,
    pub series: Vec<Second>,
    pub scheduled: u64,
    pub sent: u64,
    pub acks: u64,
    pub updates: u64,
    pub late: u64,
    /// Actions due in the window that were never sent (the client could not keep up).
    pub missed: u64,
    /// Closed loop only: ticks skipped because too many actions were in flight.
    pub skipped: u64,
    pub rejects: BTreeMap<String, u64>,
    pub errors: ErrorTally,
    pub results: u64,
    /// Actions sent in the window with neither ack nor reject after the drain.
    pub unanswered: u64,
    /// Clients whose socket was still open when the window closed.
    pub open_at_end: u64,
    /// Sockets connected now, and (ramp) sockets that failed to set up.
    pub sockets: u64,
    pub setup_failures: u64,
    /// Sends later than this after their scheduled time are `late`.
    late_after: Duration,
}

impl Recorder {
    pub fn new(late_after: Duration) -> anyhow::Result<Recorder> {
        Ok(Recorder {
            start: None,
            latency: histogram()?,
            send_lag: histogram()?,
            second: histogram()?,
            cur: Second::default(),
            series: Vec::new(),
            scheduled: 0,
            sent: 0,
            acks: 0,
            updates: 0,
            late: 0,
            missed: 0,
            skipped: 0,
            rejects: BTreeMap::new(),
            errors: ErrorTally::default(),
            results: 0,
            unanswered: 0,
            open_at_end: 0,
            sockets: 0,
            setup_failures: 0,
            late_after,
        })
    }

    /// Opens the window: from now on everything is counted and the series runs.
    pub fn open(&mut self, at: Instant) {
        self.start = Some(at);
        self.cur = Second { t: 0, ..Second::default() };
    }

    pub fn counting(&self) -> bool {
        self.start.is_some()
    }

    /// Closes the seconds that ended before `now`; returns how many were closed.
    pub fn roll(&mut self, now: Instant) -> usize {
        let Some(start) = self.start else { return 0 };
        let mut closed = 0;
        while now.saturating_duration_since(start) >= Duration::from_secs(u64::from(self.cur.t) + 1) {
            let mut done = std::mem::take(&mut self.cur);
            if !self.second.is_empty() {
                let q = Latency::of(&self.second);
                (done.p50_ms, done.p90_ms, done.p99_ms, done.max_ms) = (q.p50_ms, q.p90_ms, q.p99_ms, q.max_ms);
            }
            done.sockets = self.sockets;
            self.second.reset();
            self.cur.t = done.t + 1;
            self.series.push(done);
            closed += 1;
        }
        closed
    }

    /// An action went out; `scheduled` is when the schedule wanted it sent.
    pub fn sent(&mut self, scheduled: Instant, now: Instant) {
        if !self.counting() {
            return;
        }
        self.roll(now);
        self.scheduled += 1;
        self.cur.scheduled += 1;
        self.sent += 1;
        self.cur.sent += 1;
        let lag = now.saturating_duration_since(scheduled);
        record(&mut self.send_lag, lag);
        if lag > self.late_after {
            self.late += 1;
            self.cur.late += 1;
        }
    }

    /// An action was acked and its update seen `latency` after its scheduled time.
    pub fn ack(&mut self, latency: Option<Duration>, now: Instant) {
        if !self.counting() {
            return;
        }
        self.roll(now);
        self.acks += 1;
        self.cur.acks += 1;
        if let Some(l) = latency {
            record(&mut self.latency, l);
            record(&mut self.second, l);
        }
    }

    pub fn reject(&mut self, code: &str, now: Instant) {
        if !self.counting() {
            return;
        }
        self.roll(now);
        *self.rejects.entry(code.to_owned()).or_default() += 1;
        self.cur.rejects += 1;
    }

    /// Counts an error (also during the ramp: a failed setup is an error of the run).
    pub fn error(&mut self, message: String) {
        self.roll(Instant::now());
        self.errors.error(message);
        self.cur.errors += 1;
    }

    pub fn setup_error(&mut self, kind: String, message: String) {
        self.setup_failures += 1;
        self.errors.error_as(kind, message);
        self.cur.errors += 1;
    }

    /// Closed loop: a tick found too many actions in flight and sent nothing.
    pub fn skip(&mut self, now: Instant) {
        if !self.counting() {
            return;
        }
        self.roll(now);
        self.skipped += 1;
        self.scheduled += 1;
        self.cur.scheduled += 1;
    }

    /// Actions due in the window that were never sent.
    pub fn miss(&mut self, n: u64) {
        if self.counting() {
            self.missed += n;
            self.scheduled += n;
        }
    }

    /// A client's actions still unanswered when it stopped (only those sent in the window).
    pub fn unanswered_add(&mut self, n: u64, counting: bool) {
        if counting {
            self.unanswered += n;
        }
    }

    /// Achieved acks/s and p99 so far, for the live display.
    pub fn live(&self, now: Instant) -> (f64, f64) {
        let secs = self.start.map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64());
        let rate = if secs > 0.0 { self.acks as f64 / secs } else { 0.0 };
        let p99 = if self.latency.is_empty() { 0.0 } else { self.latency.value_at_quantile(0.99) as f64 / 1000.0 };
        (rate, p99)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn error_kinds_cut_at_the_first_digit_colon_or_parenthesis() {
        assert_eq!(error_kind("socket: Connection reset"), "socket");
        assert_eq!(error_kind("ack for seq 12 without its update"), "ack for seq");
        assert_eq!(error_kind("server closed the socket (code 1006)"), "server closed the socket");
    }

    #[test]
    fn the_series_has_one_point_per_second_with_that_seconds_quantiles() {
        let t0 = Instant::now();
        let mut r = Recorder::new(Duration::from_millis(10)).unwrap();
        r.ack(Some(Duration::from_millis(5)), t0); // before the window: not counted
        r.open(t0);
        r.sent(t0, t0 + Duration::from_millis(2));
        r.ack(Some(Duration::from_millis(4)), t0 + Duration::from_millis(10));
        r.sent(t0 + Duration::from_millis(1500), t0 + Duration::from_millis(1600)); // 100 ms late
        r.ack(Some(Duration::from_millis(900)), t0 + Duration::from_millis(2500));
        r.roll(t0 + Duration::from_millis(3100));
        assert_eq!(r.series.len(), 3);
        assert_eq!((r.series[0].sent, r.series[0].acks, r.series[0].late), (1, 1, 0));
        assert!((r.series[0].p99_ms - 4.0).abs() < 0.1, "{:?}", r.series[0]);
        assert_eq!((r.series[1].sent, r.series[1].late, r.series[1].acks), (1, 1, 0));
        assert!((r.series[2].p99_ms - 900.0).abs() < 1.0, "{:?}", r.series[2]);
        assert_eq!((r.acks, r.late), (2, 1));
        let q = Latency::of(&r.latency);
        assert!((q.max_ms - 900.0).abs() < 1.0 && q.p50_ms < 5.0, "{q:?}");
    }
}
