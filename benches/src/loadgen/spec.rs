//! The small languages of the command line: durations (`30s`, `500ms`, `2m`), stages
//! (`30s:1000,60s:4000,30s:0`), the open-loop schedule they describe, and thresholds
//! (`p99<50ms`, `errors<0.1%`, `rate>=1000`).

use anyhow::{anyhow, bail, Context};
use serde::Serialize;
use std::time::Duration;

/// `1.5s`, `500ms`, `2m`, `1h`, `250us`; a bare number is seconds.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().with_context(|| format!("bad duration {s:?} (e.g. 30s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => bail!("bad duration unit {other:?} in {s:?} (us, ms, s, m, h)"),
    };
    if !secs.is_finite() || secs < 0.0 {
        bail!("bad duration {s:?}");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// One stage: over `duration`, move linearly from the previous target to `target`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    pub target: f64,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// `30s:1000,60s:4000,30s:0`.
pub fn parse_stages(s: &str) -> anyhow::Result<Vec<Stage>> {
    let mut stages = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (d, t) =
            part.split_once(':').ok_or_else(|| anyhow!("stage {part:?} is not DURATION:TARGET (e.g. 30s:1000)"))?;
        let duration = parse_duration(d)?;
        let target: f64 = t.trim().parse().with_context(|| format!("stage {part:?}: target is not a number"))?;
        if !target.is_finite() || target < 0.0 {
            bail!("stage {part:?}: target must be 0 or more");
        }
        if duration.is_zero() {
            bail!("stage {part:?}: duration must be above 0");
        }
        stages.push(Stage { duration, target });
    }
    if stages.is_empty() {
        bail!("no stages in {s:?} (e.g. 30s:1000,60s:4000,30s:0)");
    }
    Ok(stages)
}

/// A target (rate or sockets) over time: piecewise linear, starting at `start`.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// (length, value at its start, value at its end).
    segments: Vec<(f64, f64, f64)>,
}

impl Schedule {
    pub fn constant(value: f64, over: Duration) -> Schedule {
        Schedule { segments: vec![(over.as_secs_f64(), value, value)] }
    }

    pub fn staged(start: f64, stages: &[Stage]) -> Schedule {
        let mut from = start;
        let segments = stages
            .iter()
            .map(|s| {
                let seg = (s.duration.as_secs_f64(), from, s.target);
                from = s.target;
                seg
            })
            .collect();
        Schedule { segments }
    }

    /// The same schedule with every value multiplied by `k` (a run's rate → one client's).
    pub fn scaled(&self, k: f64) -> Schedule {
        Schedule { segments: self.segments.iter().map(|(d, a, b)| (*d, a * k, b * k)).collect() }
    }

    pub fn length(&self) -> Duration {
        Duration::from_secs_f64(self.segments.iter().map(|s| s.0).sum())
    }

    /// The value at `t` (0 after the end).
    pub fn at(&self, t: Duration) -> f64 {
        let mut t = t.as_secs_f64();
        for (d, a, b) in &self.segments {
            if t < *d {
                return a + (b - a) * t / d;
            }
            t -= d;
        }
        0.0
    }

    /// When the running integral of the schedule (e.g. the number of actions it asked
    /// for) reaches `n`; `None` if it never does within the schedule.
    pub fn time_of(&self, n: f64) -> Option<Duration> {
        let mut elapsed = 0.0;
        let mut area = 0.0;
        for (d, a, b) in &self.segments {
            let seg = (a + b) / 2.0 * d;
            if n <= area + seg && seg > 0.0 {
                let x = n - area;
                // a·τ + (b−a)/(2d)·τ² = x, solved in the form that is stable when b ≈ a.
                let alpha = (b - a) / (2.0 * d);
                let denom = a + (a * a + 4.0 * alpha * x).max(0.0).sqrt();
                let tau = if denom > 0.0 { (2.0 * x / denom).min(*d) } else { 0.0 };
                return Some(Duration::from_secs_f64(elapsed + tau));
            }
            area += seg;
            elapsed += d;
        }
        None
    }

    /// The integral over the whole schedule.
    pub fn total(&self) -> f64 {
        self.segments.iter().map(|(d, a, b)| (a + b) / 2.0 * d).sum()
    }

    /// The largest value it reaches.
    pub fn peak(&self) -> f64 {
        self.segments.iter().map(|(_, a, b)| a.max(*b)).fold(0.0, f64::max)
    }
}

/// What a threshold is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    P50,
    P90,
    P99,
    P999,
    Max,
    Mean,
    /// Errors: a count, or with `%` a share of the actions sent.
    Errors,
    /// Rejects, the same way.
    Rejects,
    /// Actions sent later than the late threshold, the same way.
    Late,
    /// Actions due but never sent, the same way (of the actions scheduled).
    Missed,
    /// Acks per second in the window.
    Rate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Op {
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
}

/// `p99<50ms`: the metric, the comparison, the bound (ms for latencies; a fraction when
/// `percent`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Threshold {
    pub text: String,
    pub metric: Metric,
    pub op: Op,
    pub bound: f64,
    pub percent: bool,
}

/// The numbers a threshold is checked against.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    pub errors: u64,
    pub rejects: u64,
    pub late: u64,
    pub missed: u64,
    pub sent: u64,
    pub scheduled: u64,
    pub rate: f64,
}

/// A checked threshold.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub threshold: String,
    pub ok: bool,
    /// The observed value in the threshold's unit (ms, %, count or /s).
    pub observed: f64,
    pub unit: String,
}

impl std::str::FromStr for Threshold {
    type Err = anyhow::Error;
    fn from_str(text: &str) -> anyhow::Result<Threshold> {
        let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let at = t.find(['<', '>']).ok_or_else(|| anyhow!("threshold {text:?} has no < or > (e.g. p99<50ms)"))?;
        let (name, rest) = t.split_at(at);
        let (op, value) = if let Some(v) = rest.strip_prefix("<=") {
            (Op::Le, v)
        } else if let Some(v) = rest.strip_prefix(">=") {
            (Op::Ge, v)
        } else if let Some(v) = rest.strip_prefix('<') {
            (Op::Lt, v)
        } else if let Some(v) = rest.strip_prefix('>') {
            (Op::Gt, v)
        } else {
            bail!("threshold {text:?}: bad comparison");
        };
        let metric = match name.to_ascii_lowercase().as_str() {
            "p50" | "median" => Metric::P50,
            "p90" => Metric::P90,
            "p99" => Metric::P99,
            "p99.9" | "p999" => Metric::P999,
            "max" => Metric::Max,
            "mean" | "avg" => Metric::Mean,
            "errors" => Metric::Errors,
            "rejects" => Metric::Rejects,
            "late" => Metric::Late,
            "missed" => Metric::Missed,
            "rate" => Metric::Rate,
            other => bail!(
                "threshold {text:?}: unknown metric {other:?} (p50, p90, p99, p99.9, max, mean, errors, rejects, late, missed, rate)"
            ),
        };
        let latency =
            matches!(metric, Metric::P50 | Metric::P90 | Metric::P99 | Metric::P999 | Metric::Max | Metric::Mean);
        let (bound, percent) = if latency {
            let d = parse_duration(value).with_context(|| format!("threshold {text:?}: latency bound like 50ms"))?;
            if value.trim().chars().all(|c| c.is_ascii_digit() || c == '.') {
                bail!("threshold {text:?}: give the latency bound a unit (e.g. 50ms)");
            }
            (d.as_secs_f64() * 1000.0, false)
        } else if let Some(p) = value.strip_suffix('%') {
            let v: f64 = p.parse().with_context(|| format!("threshold {text:?}: bad percentage"))?;
            if metric == Metric::Rate {
                bail!("threshold {text:?}: rate is actions/s, not a percentage");
            }
            (v, true)
        } else {
            let v: f64 =
                value.trim_end_matches("/s").parse().with_context(|| format!("threshold {text:?}: bad number"))?;
            (v, false)
        };
        if !bound.is_finite() || bound < 0.0 {
            bail!("threshold {text:?}: bound must be 0 or more");
        }
        Ok(Threshold { text: text.trim().to_owned(), metric, op, bound, percent })
    }
}

impl Threshold {
    pub fn check(&self, o: &Observed) -> Verdict {
        let share = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 * 100.0 / of as f64 };
        let count = |n: u64, of: u64| if self.percent { (share(n, of), "%") } else { (n as f64, "") };
        let (observed, unit) = match self.metric {
            Metric::P50 => (o.p50_ms, "ms"),
            Metric::P90 => (o.p90_ms, "ms"),
            Metric::P99 => (o.p99_ms, "ms"),
            Metric::P999 => (o.p999_ms, "ms"),
            Metric::Max => (o.max_ms, "ms"),
            Metric::Mean => (o.mean_ms, "ms"),
            Metric::Errors => count(o.errors, o.sent),
            Metric::Rejects => count(o.rejects, o.sent),
            Metric::Late => count(o.late, o.sent),
            Metric::Missed => count(o.missed, o.scheduled),
            Metric::Rate => (o.rate, "/s"),
        };
        let ok = match self.op {
            Op::Lt => observed < self.bound,
            Op::Le => observed <= self.bound,
            Op::Gt => observed > self.bound,
            Op::Ge => observed >= self.bound,
        };
        Verdict { threshold: self.text.clone(), ok, observed, unit: unit.to_owned() }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn durations_take_units_and_bare_seconds() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn stages_parse_and_reject_nonsense() {
        let s = parse_stages("30s:1000, 60s:4000,30s:0").unwrap();
        assert_eq!(
            s,
            vec![
                Stage { duration: Duration::from_secs(30), target: 1000.0 },
                Stage { duration: Duration::from_secs(60), target: 4000.0 },
                Stage { duration: Duration::from_secs(30), target: 0.0 },
            ]
        );
        assert!(parse_stages("30s").is_err());
        assert!(parse_stages("30s:-1").is_err());
        assert!(parse_stages("0s:10").is_err());
        assert!(parse_stages("").is_err());
        assert!(parse_stages("abc:10").is_err());
    }

    #[test]
    fn a_staged_schedule_ramps_linearly_and_its_integral_inverts() {
        let s = Schedule::staged(0.0, &parse_stages("10s:100,10s:100,10s:0").unwrap());
        assert_eq!(s.length(), Duration::from_secs(30));
        assert!((s.at(Duration::from_secs(5)) - 50.0).abs() < 1e-9);
        assert!((s.at(Duration::from_secs(15)) - 100.0).abs() < 1e-9);
        assert!((s.at(Duration::from_secs(25)) - 50.0).abs() < 1e-9);
        assert_eq!(s.at(Duration::from_secs(31)), 0.0);
        assert!((s.total() - 2000.0).abs() < 1e-9); // 500 + 1000 + 500
                                                    // Ramp 0→100 over 10 s: the integral is 5·t², so 125 actions by t = 5 s.
        assert!((s.time_of(125.0).unwrap().as_secs_f64() - 5.0).abs() < 1e-6);
        assert!((s.time_of(1000.0).unwrap().as_secs_f64() - 15.0).abs() < 1e-6);
        // Ramp down: 1500 + (100·τ − 5τ²) = 1875 at τ = 5.
        assert!((s.time_of(1875.0).unwrap().as_secs_f64() - 25.0).abs() < 1e-6);
        assert_eq!(s.time_of(2001.0), None);
        let c = Schedule::constant(4.0, Duration::from_secs(10)).scaled(0.5);
        assert!((c.time_of(3.0).unwrap().as_secs_f64() - 1.5).abs() < 1e-9);
    }

    #[test]
    fn thresholds_parse_metric_comparison_and_unit() {
        let t: Threshold = "p99<50ms".parse().unwrap();
        assert_eq!((t.metric, t.op, t.bound, t.percent), (Metric::P99, Op::Lt, 50.0, false));
        let t: Threshold = "p99.9 <= 1s".parse().unwrap();
        assert_eq!((t.metric, t.op, t.bound), (Metric::P999, Op::Le, 1000.0));
        let t: Threshold = "errors<0.1%".parse().unwrap();
        assert_eq!((t.metric, t.bound, t.percent), (Metric::Errors, 0.1, true));
        let t: Threshold = "errors<5".parse().unwrap();
        assert_eq!((t.metric, t.bound, t.percent), (Metric::Errors, 5.0, false));
        let t: Threshold = "rate>=1000/s".parse().unwrap();
        assert_eq!((t.metric, t.op, t.bound), (Metric::Rate, Op::Ge, 1000.0));
        for bad in ["p99", "p98<5ms", "p99<50", "p99<fast", "errors<x%", "rate>5%", "p99=5ms"] {
            assert!(bad.parse::<Threshold>().is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn thresholds_check_against_what_was_observed() {
        let o = Observed { p99_ms: 73.0, errors: 2, sent: 1000, rate: 950.0, ..Observed::default() };
        let v = "p99<50ms".parse::<Threshold>().unwrap().check(&o);
        assert!(!v.ok && v.observed == 73.0 && v.unit == "ms", "{v:?}");
        assert!("p99<100ms".parse::<Threshold>().unwrap().check(&o).ok);
        let v = "errors<0.1%".parse::<Threshold>().unwrap().check(&o);
        assert!(!v.ok && (v.observed - 0.2).abs() < 1e-9, "{v:?}");
        assert!("errors<=2".parse::<Threshold>().unwrap().check(&o).ok);
        assert!(!"rate>=1000".parse::<Threshold>().unwrap().check(&o).ok);
        assert!("missed<1%".parse::<Threshold>().unwrap().check(&o).ok);
    }
}
