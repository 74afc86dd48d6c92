//! The soak's report: one Markdown table (`| measure | value |`), the errors by kind and
//! a few samples, then the verdict line (`ok` or `FAIL: …`); `benches/soak.sh` prints it.

use super::cli::Args;
use super::counts::Counts;
use super::sample::{mib, slope, Sample, METRICS};
use std::collections::BTreeMap;

/// Everything a finished run hands to the report.
pub(super) struct Outcome<'a> {
    pub(super) a: &'a Args,
    pub(super) done: usize,
    pub(super) elapsed: f64,
    pub(super) samples: Vec<Sample>,
    pub(super) totals: Counts,
    pub(super) metrics_start: BTreeMap<&'static str, f64>,
    pub(super) middle_metrics: Option<BTreeMap<&'static str, f64>>,
    pub(super) metrics_end: BTreeMap<&'static str, f64>,
    pub(super) start_mem: Option<(u64, u64)>,
    pub(super) end_mem: Option<(u64, u64)>,
}

/// Prints the report; the exit code (0 ok, 1 RSS grows or cannot be judged, 2 too many
/// failed cycles).
pub(super) fn print(o: Outcome<'_>) -> u8 {
    let Outcome { a, done, elapsed, samples, totals, metrics_start, middle_metrics, metrics_end, start_mem, end_mem } =
        o;
    let pid = a.pid;
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
        return 2;
    }
    match (pid, slope_kib_per_1k) {
        (Some(_), Some(s)) if s > limit_kib_per_1k => {
            println!(
                "FAIL: RSS grows {:.2} MiB per 10k cycles over the second half (limit {})",
                s * 10.0 / 1024.0,
                a.max_growth_mib_per_10k
            );
            1
        }
        (Some(_), None) => {
            println!("FAIL: too few RSS samples in the second half to judge (lower --sample-secs)");
            1
        }
        _ => {
            println!("ok");
            0
        }
    }
}
