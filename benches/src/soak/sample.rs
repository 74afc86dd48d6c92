//! What the soak measures on the server: its RSS (from `/proc`), a few gauges and
//! counters from `/metrics`, and the RSS slope over cycles.

use super::net::CALL_TIMEOUT;
use std::collections::BTreeMap;
use tokio::time::timeout;

/// One RSS sample of the server.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    pub(super) at_s: f64,
    pub(super) done: usize,
    pub(super) rss_kib: u64,
}

pub(super) const METRICS: [&str; 5] =
    ["roomd_rooms", "roomd_sessions", "roomd_games_started_total", "roomd_games_finished_total", "series"];

/// The gauges and counters the report shows, from `/metrics` (`series`: how many lines of
/// samples the page has, to see label cardinality grow).
pub(super) async fn scrape(http: &reqwest::Client, base: &str) -> Option<BTreeMap<&'static str, f64>> {
    let text = timeout(CALL_TIMEOUT, async { http.get(format!("{base}/metrics")).send().await?.text().await })
        .await
        .ok()?
        .ok()?;
    let mut out = BTreeMap::new();
    let mut series = 0.0;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        series += 1.0;
        let mut parts = line.split_whitespace();
        if let (Some(name), Some(value)) = (parts.next(), parts.next()) {
            if let Some(key) = METRICS.iter().find(|m| **m == name) {
                out.insert(*key, value.parse().unwrap_or(f64::NAN));
            }
        }
    }
    out.insert("series", series);
    Some(out)
}

/// Least-squares slope of y over x.
pub(super) fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    Some(points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx)
}

pub(super) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}
