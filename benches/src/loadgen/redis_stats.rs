//! The Redis command budget of a cluster run (`--redis-stats URL`): `INFO commandstats`
//! and `INFO cpu` read as the window opens and as it closes, so the report says how many
//! Redis commands, how much command time and how much Redis CPU each acknowledged action
//! cost. The cluster's hot path is mostly Redis work; this keeps it from regressing
//! unseen. The `INFO` calls of the sampling itself are left out of the counts.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One reading of a Redis server's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RedisSample {
    /// Calls and microseconds of command time, by command (lower case, e.g. `evalsha`).
    pub calls: BTreeMap<String, (u64, u64)>,
    /// `used_cpu_sys + used_cpu_user`: the server's CPU seconds (all its threads).
    pub cpu_s: f64,
}

/// What Redis did within the window, per acknowledged action.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct RedisBudget {
    /// Calls in the window by command (the sampler's own `info` left out).
    pub calls: BTreeMap<String, u64>,
    pub commands: u64,
    pub command_usec: u64,
    pub cpu_s: f64,
    pub acks: u64,
    pub commands_per_ack: f64,
    pub command_us_per_ack: f64,
    pub cpu_us_per_ack: f64,
}

impl RedisBudget {
    /// The commands that make up most of the budget, as `name n.nn` per action.
    pub fn top(&self, n: usize) -> String {
        let mut by: Vec<(&String, &u64)> = self.calls.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let acks = self.acks.max(1) as f64;
        by.iter().take(n).map(|(c, k)| format!("{c} {:.2}", **k as f64 / acks)).collect::<Vec<_>>().join(", ")
    }
}

/// Parses the text of `INFO commandstats` and `INFO cpu`.
pub fn parse(commandstats: &str, cpu: &str) -> RedisSample {
    let mut calls = BTreeMap::new();
    for line in commandstats.lines() {
        // cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,rejected_calls=0,failed_calls=0
        let Some((name, fields)) = line.trim().strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        let field = |key: &str| {
            fields.split(',').find_map(|f| f.strip_prefix(key)?.strip_prefix('=')?.parse::<u64>().ok()).unwrap_or(0)
        };
        calls.insert(name.to_lowercase(), (field("calls"), field("usec")));
    }
    let cpu_field = |key: &str| {
        cpu.lines().find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':')?.parse::<f64>().ok()).unwrap_or(0.0)
    };
    RedisSample { calls, cpu_s: cpu_field("used_cpu_sys") + cpu_field("used_cpu_user") }
}

/// What happened between two readings, per acknowledged action.
pub fn budget(open: &RedisSample, close: &RedisSample, acks: u64) -> RedisBudget {
    let mut b = RedisBudget { acks, cpu_s: (close.cpu_s - open.cpu_s).max(0.0), ..RedisBudget::default() };
    for (name, (calls, usec)) in &close.calls {
        if name == "info" {
            continue;
        }
        let (c0, u0) = open.calls.get(name).copied().unwrap_or((0, 0));
        let calls = calls.saturating_sub(c0);
        if calls > 0 {
            b.calls.insert(name.clone(), calls);
        }
        b.commands += calls;
        b.command_usec += usec.saturating_sub(u0);
    }
    let per = |v: f64| if acks == 0 { 0.0 } else { v / acks as f64 };
    b.commands_per_ack = per(b.commands as f64);
    b.command_us_per_ack = per(b.command_usec as f64);
    b.cpu_us_per_ack = per(b.cpu_s * 1e6);
    b
}

/// Reads the counters of the Redis at `urls` (one short connection each): one URL, or a
/// comma-separated list (every process of a Redis Cluster), whose readings are summed.
pub async fn sample(urls: &str) -> anyhow::Result<RedisSample> {
    let mut total = RedisSample::default();
    for url in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let client = redis::Client::open(url).with_context(|| format!("--redis-stats {url}"))?;
        let mut con =
            client.get_multiplexed_async_connection().await.with_context(|| format!("connecting to {url}"))?;
        let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut con).await?;
        let cpu: String = redis::cmd("INFO").arg("cpu").query_async(&mut con).await?;
        total.add(&parse(&stats, &cpu));
    }
    Ok(total)
}

impl RedisSample {
    /// Adds another server's reading to this one.
    pub fn add(&mut self, other: &RedisSample) {
        for (name, (calls, usec)) in &other.calls {
            let entry = self.calls.entry(name.clone()).or_insert((0, 0));
            entry.0 += calls;
            entry.1 += usec;
        }
        self.cpu_s += other.cpu_s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: &str =
        "# Commandstats\r\ncmdstat_evalsha:calls=100,usec=2000,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n\
                        cmdstat_publish:calls=50,usec=100,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
                        cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n";
    const CLOSE: &str = "# Commandstats\r\ncmdstat_evalsha:calls=1100,usec=24000,usec_per_call=21.8,rejected_calls=0,failed_calls=0\r\n\
                         cmdstat_publish:calls=1150,usec=2300,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
                         cmdstat_xrange:calls=2,usec=10,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\
                         cmdstat_info:calls=9,usec=300,usec_per_call=33.3,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn the_budget_is_the_window_s_commands_and_cpu_per_acknowledged_action() {
        let open = parse(OPEN, "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.500000\r\n");
        let close = parse(CLOSE, "# CPU\r\nused_cpu_sys:2.000000\r\nused_cpu_user:0.750000\r\n");
        assert_eq!(open.calls["evalsha"], (100, 2000));
        let b = budget(&open, &close, 1000);
        // 1000 evalsha + 1100 publish + 2 xrange; the sampler's own INFO calls left out.
        assert_eq!(b.commands, 2102);
        assert_eq!(b.calls.get("info"), None);
        assert!((b.commands_per_ack - 2.102).abs() < 1e-9);
        assert!((b.command_us_per_ack - 24.21).abs() < 1e-9, "{}", b.command_us_per_ack);
        assert!((b.cpu_us_per_ack - 750.0).abs() < 1e-6, "{}", b.cpu_us_per_ack);
        assert_eq!(b.top(2), "publish 1.10, evalsha 1.00");
        // The processes of a Redis Cluster are summed.
        let mut both = open.clone();
        both.add(&close);
        assert_eq!(both.calls["evalsha"], (1200, 26000));
        assert!((both.cpu_s - 4.75).abs() < 1e-9);
        assert_eq!(budget(&open, &close, 0).commands_per_ack, 0.0, "no acks: no ratio, no division by zero");
    }
}
