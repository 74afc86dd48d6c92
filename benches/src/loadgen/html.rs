//! The `--report` HTML: one self-contained page (no scripts, fonts or images fetched)
//! with SVG plots drawn by plotters — rate over time, latency percentiles over time, the
//! latency histogram, server CPU and RSS — and tables of the parameters, the summary,
//! the thresholds, rejects and errors. The report's JSON is embedded too
//! (`<script type="application/json" id="loadgen-report">`).

use super::report::Report;
use anyhow::anyhow;
use plotters::prelude::*;

const W: u32 = 900;
const H: u32 = 320;
const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(120, 120, 120),
];

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plot: {e:?}")
}

/// A line chart of `series` (name, points) over seconds; `log` for a logarithmic y axis.
pub fn line_chart(title: &str, y_desc: &str, series: &[(&str, Vec<(f64, f64)>)], log: bool) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let xmax = series.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x)).fold(1.0, f64::max);
        let ymax = series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)).fold(0.0, f64::max);
        let mut builder = ChartBuilder::on(&root);
        builder.caption(title, ("sans-serif", 18)).margin(12).x_label_area_size(36).y_label_area_size(64);
        macro_rules! draw {
            ($chart:expr, $floor:expr) => {{
                let mut chart = $chart;
                chart.configure_mesh().x_desc("seconds into the window").y_desc(y_desc).draw().map_err(err)?;
                for (i, (name, points)) in series.iter().enumerate() {
                    let color = COLORS[i % COLORS.len()];
                    let pts: Vec<(f64, f64)> = points.iter().map(|(x, y)| (*x, y.max($floor))).collect();
                    // The first series (e.g. the schedule) is drawn wide so lines on top of it stay visible.
                    let width = if i == 0 && series.len() > 1 { 5 } else { 2 };
                    chart
                        .draw_series(LineSeries::new(
                            pts,
                            color.mix(if width > 2 { 0.45 } else { 1.0 }).stroke_width(width),
                        ))
                        .map_err(err)?
                        .label(*name)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()
                    .map_err(err)?;
            }};
        }
        if log {
            let floor = 0.01;
            let chart =
                builder.build_cartesian_2d(0f64..xmax, (floor..(ymax * 1.5).max(1.0)).log_scale()).map_err(err)?;
            draw!(chart, floor);
        } else {
            let chart = builder.build_cartesian_2d(0f64..xmax, 0f64..(ymax * 1.1).max(1.0)).map_err(err)?;
            draw!(chart, 0.0);
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The latency histogram: bars over logarithmic millisecond buckets.
pub fn histogram_chart(r: &Report) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let lo = r.histogram.first().map_or(0.01, |b| b.le_ms / 1.25).max(0.001);
        let hi = r.histogram.last().map_or(1.0, |b| b.le_ms).max(lo * 2.0);
        let top = r.histogram.iter().map(|b| b.count).max().unwrap_or(1).max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("latency histogram ({} samples)", r.latency.samples), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..top * 1.1)
            .map_err(err)?;
        chart.configure_mesh().x_desc("latency (ms, log scale)").y_desc("actions").draw().map_err(err)?;
        let mut prev = lo;
        let bars: Vec<Rectangle<(f64, f64)>> = r
            .histogram
            .iter()
            .map(|b| {
                let from = prev.max(b.le_ms / 1.25);
                prev = b.le_ms;
                Rectangle::new([(from, 0.0), (b.le_ms, b.count as f64)], COLORS[0].filled())
            })
            .collect();
        chart.draw_series(bars).map_err(err)?;
        let marks = [("p50", r.latency.p50_ms), ("p99", r.latency.p99_ms), ("p99.9", r.latency.p999_ms)];
        for (i, (name, v)) in marks.into_iter().enumerate() {
            if v > 0.0 {
                let color = COLORS[(i + 1) % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(vec![(v, 0.0), (v, top * 1.05)], color.stroke_width(2)))
                    .map_err(err)?
                    .label(format!("{name} {v:.2} ms"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
            }
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).draw().map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Every plot of the report, in order.
pub fn plots(r: &Report) -> anyhow::Result<Vec<String>> {
    let t = |f: &dyn Fn(&super::stats::Second) -> f64| -> Vec<(f64, f64)> {
        r.series.iter().map(|s| (f64::from(s.t) + 0.5, f(s))).collect()
    };
    let mut out = vec![line_chart(
        "actions per second",
        "per second",
        &[
            ("scheduled", t(&|s| s.scheduled as f64)),
            ("sent", t(&|s| s.sent as f64)),
            ("acked", t(&|s| s.acks as f64)),
            ("errors", t(&|s| s.errors as f64)),
            ("late", t(&|s| s.late as f64)),
        ],
        false,
    )?];
    out.push(line_chart(
        "latency from the scheduled send, per second",
        "ms (log scale)",
        &[("p50", t(&|s| s.p50_ms)), ("p90", t(&|s| s.p90_ms)), ("p99", t(&|s| s.p99_ms)), ("max", t(&|s| s.max_ms))],
        true,
    )?);
    out.push(histogram_chart(r)?);
    if r.series.iter().any(|s| s.server_cpu_pct.is_some()) {
        out.push(line_chart(
            "server CPU (100 = one core) and RSS",
            "% / MiB",
            &[("CPU %", t(&|s| s.server_cpu_pct.unwrap_or(0.0))), ("RSS MiB", t(&|s| s.server_rss_mib.unwrap_or(0.0)))],
            false,
        )?);
    }
    if r.series.iter().any(|s| s.sockets > 0) {
        out.push(line_chart("sockets connected", "sockets", &[("sockets", t(&|s| s.sockets as f64))], false)?);
    }
    Ok(out)
}

fn row(k: &str, v: impl std::fmt::Display) -> String {
    format!("<tr><th>{}</th><td>{}</td></tr>\n", esc(k), esc(&v.to_string()))
}

fn opt(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.1}"))
}

/// The whole page.
pub fn render(r: &Report) -> anyhow::Result<String> {
    let l = &r.latency;
    let mut params = String::new();
    params.push_str(&row("command", &r.command));
    params.push_str(&row("started (UTC)", &r.started_at));
    for (k, v) in &r.params {
        params.push_str(&row(k, v));
    }
    let mut summary = String::new();
    summary.push_str(&row("target / game / loop", format!("{} / {} / {}", r.target, r.game, r.mode)));
    summary.push_str(&row("rooms ready / requested", format!("{} / {}", r.rooms_ready, r.rooms_requested)));
    summary.push_str(&row("clients (open at end)", format!("{} ({})", r.connected_clients, r.connected_at_end)));
    summary.push_str(&row("ramp / window (s)", format!("{:.1} / {:.1}", r.ramp_s, r.window_s)));
    summary.push_str(&row("target rate (/s)", opt(r.target_rate)));
    summary.push_str(&row(
        "scheduled / sent / acked",
        format!("{} / {} / {} ({:.1}/s)", r.scheduled, r.actions_sent, r.acks, r.actions_per_s),
    ));
    summary.push_str(&row(
        "late / missed / skipped",
        format!("{} (> {} ms) / {} / {}", r.late, r.late_after_ms, r.missed, r.skipped),
    ));
    summary.push_str(&row("updates delivered", format!("{} ({:.1}/s)", r.updates, r.updates_per_s)));
    summary.push_str(&row(
        "latency p50 / p90 / p99 / p99.9 / max (ms)",
        format!("{:.2} / {:.2} / {:.2} / {:.2} / {:.2}", l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms),
    ));
    summary.push_str(&row("send lag p99 / max (ms)", format!("{:.2} / {:.2}", r.send_lag.p99_ms, r.send_lag.max_ms)));
    summary.push_str(&row(
        "unanswered / games finished / errors",
        format!("{} / {} / {}", r.unanswered, r.games_finished, r.errors),
    ));
    summary.push_str(&row("server CPU-s in window", opt(r.server_cpu_s)));
    summary.push_str(&row("deliveries per server CPU-s", opt(r.deliveries_per_cpu_s)));
    if let Some(rss) = r.server_rss_kb {
        summary
            .push_str(&row("server RSS start / open / close (KiB)", format!("{} / {} / {}", rss[0], rss[1], rss[2])));
    }
    if let Some(b) = &r.redis {
        summary.push_str(&row(
            "Redis per acknowledged action: commands / command µs / CPU µs",
            format!("{:.2} / {:.1} / {:.1} ({})", b.commands_per_ack, b.command_us_per_ack, b.cpu_us_per_ack, b.top(4)),
        ));
    }
    summary.push_str(&row("loadgen CPU-s in window", opt(r.loadgen_cpu_s)));
    summary.push_str(&row(
        "run-queue wait s (server / loadgen)",
        format!("{} / {}", opt(r.server_runqueue_wait_s), opt(r.loadgen_runqueue_wait_s)),
    ));
    let mut thresholds = String::new();
    for v in &r.thresholds {
        thresholds.push_str(&format!(
            "<tr class=\"{}\"><th>{}</th><td>{} (observed {:.3}{})</td></tr>\n",
            if v.ok { "ok" } else { "fail" },
            esc(&v.threshold),
            if v.ok { "passed" } else { "FAILED" },
            v.observed,
            esc(&v.unit)
        ));
    }
    let mut counts = String::new();
    for (code, n) in &r.rejects {
        counts.push_str(&row(&format!("reject {code}"), n));
    }
    for (kind, n) in &r.error_kinds {
        counts.push_str(&row(&format!("error {kind}"), n));
    }
    for s in &r.error_samples {
        counts.push_str(&row("error sample", s));
    }
    let figures: String =
        plots(r)?.into_iter().map(|svg| format!("<figure>{svg}</figure>\n")).collect::<Vec<_>>().join("");
    // `<` only occurs inside JSON strings, where `\u003c` means the same.
    let json = serde_json::to_string(r)?.replace('<', "\\u003c");
    let title = format!("loadgen: {} {} ({} loop)", r.target, r.game, r.mode);
    Ok(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 960px; margin: 1em auto; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: .5em 0 1.5em; }}\n\
         th, td {{ text-align: left; padding: 2px 10px; border-bottom: 1px solid #ddd; vertical-align: top; }}\n\
         tr.ok td {{ color: #1a7f37; }} tr.fail td {{ color: #c62828; font-weight: bold; }}\n\
         figure {{ margin: 0 0 1em; }}\n</style></head><body>\n\
         <h1>{title}</h1>\n<h2>Summary</h2>\n<table>{summary}</table>\n\
         <h2>Thresholds</h2>\n<table>{thresholds}</table>\n<h2>Plots</h2>\n{figures}\
         <h2>Rejects and errors</h2>\n<table>{counts}</table>\n<h2>Parameters</h2>\n<table>{params}</table>\n\
         <script type=\"application/json\" id=\"loadgen-report\">{json}</script>\n</body></html>\n",
        title = esc(&title),
        thresholds = if thresholds.is_empty() { "<tr><td>none given</td></tr>".into() } else { thresholds },
        // An empty table under the heading read as a missing section, not as a clean run.
        counts = if counts.is_empty() { "<tr><td>none: no rejects and no errors</td></tr>".into() } else { counts },
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::loadgen::report::Bucket;
    use crate::loadgen::spec::Verdict;
    use crate::loadgen::stats::{Latency, Second};

    fn sample() -> Report {
        let series = (0..10u32)
            .map(|t| Second {
                t,
                scheduled: 100,
                sent: 100,
                acks: 98,
                p50_ms: 1.0 + f64::from(t),
                p90_ms: 2.0,
                p99_ms: 5.0 + f64::from(t),
                max_ms: 9.0,
                sockets: 40,
                server_cpu_pct: Some(35.0),
                server_rss_mib: Some(50.0),
                ..Second::default()
            })
            .collect();
        Report {
            target: "roomd".into(),
            game: "tally".into(),
            mode: "open".into(),
            command: "loadgen --rate 100 <script>".into(),
            latency: Latency {
                samples: 980,
                p50_ms: 3.0,
                p99_ms: 12.0,
                p999_ms: 14.0,
                max_ms: 15.0,
                ..Latency::default()
            },
            histogram: vec![
                Bucket { le_ms: 1.0, count: 10 },
                Bucket { le_ms: 3.0, count: 900 },
                Bucket { le_ms: 15.0, count: 70 },
            ],
            thresholds: vec![Verdict { threshold: "p99<10ms".into(), ok: false, observed: 12.0, unit: "ms".into() }],
            series,
            ..Report::default()
        }
    }

    #[test]
    fn the_report_is_one_page_with_its_svg_plots_and_no_network() {
        let html = render(&sample()).unwrap();
        assert!(html.starts_with("<!doctype html>"));
        // Rate, latency over time, histogram, server CPU/RSS, sockets.
        assert_eq!(html.matches("<svg").count(), 5, "{html:.2000}");
        assert!(html.contains("actions per second") && html.contains("latency histogram (980 samples)"));
        assert!(html.contains("p99&lt;10ms") && html.contains("FAILED"));
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"), "the command is escaped");
        assert!(!html.contains("src=") && !html.contains("href="), "nothing is fetched");
        let start = html.find("id=\"loadgen-report\">").unwrap() + "id=\"loadgen-report\">".len();
        let end = html[start..].find("</script>").unwrap() + start;
        let back: Report = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(back.latency.p99_ms, 12.0);
    }

    #[test]
    fn a_report_without_samples_still_renders() {
        let html = render(&Report::default()).unwrap();
        assert_eq!(html.matches("<svg").count(), 3);
    }

    #[test]
    fn rejects_and_errors_say_none_when_there_were_none() {
        let section = |html: &str| {
            let start = html.find("<h2>Rejects and errors</h2>").unwrap();
            let end = html[start..].find("<h2>Parameters</h2>").unwrap() + start;
            html[start..end].to_owned()
        };
        assert!(section(&render(&sample()).unwrap()).contains("none: no rejects and no errors"));
        let mut r = sample();
        r.rejects.insert("late".into(), 3);
        let with = section(&render(&r).unwrap());
        assert!(with.contains("reject late") && !with.contains("none:"), "{with}");
    }
}
