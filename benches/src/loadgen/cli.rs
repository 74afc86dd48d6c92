//! `loadgen`'s command line and TOML scenario files (the same settings, one per key).

use super::spec::{parse_duration, parse_stages, Threshold};
use super::{Config, GameKind, LoopMode, Target};
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
loadgen: plays real games against YOUR OWN roomd (or limit_server) and reports throughput,
rejects and action→update latency from each action's scheduled time (open loop).

usage: loadgen [FLAGS]
  e.g. loadgen --url http://127.0.0.1:8080 --rooms 100 --rate 4000 --duration 30s \\
               --threshold 'p99<50ms' --threshold 'errors<0.1%' --report out.html

servers
  --url URL[,URL…]      base URLs of servers you run, comma-separated; rooms (and the
                        players of each room) are spread over them round-robin; https://
                        URLs use wss:// sockets          [default http://127.0.0.1:8080]
                        e.g. --url http://127.0.0.1:18080,http://127.0.0.1:18081
  --direct              connect every player of a room to its owner node, when room info
                        names one (`nodeUrl`, set by ROOMD__NODE__PUBLIC_URL) that is one
                        of the --urls; otherwise players are spread over the --urls
                        e.g. --url http://127.0.0.1:18080,http://127.0.0.1:18081 --direct
  --whole-rooms         keep every player of a room on the URL that made it (sessions,
                        seats and sockets): for servers that are not one cluster, e.g.
                        two embedded nodes sharing a machine
                        e.g. --url http://127.0.0.1:18080,http://127.0.0.1:18081 --whole-rooms
  --insecure            accept any TLS certificate (a self-signed test proxy)
                        e.g. --url https://127.0.0.1:8443 --insecure
  --limit               the servers are limit_server: no HTTP, tally only
                        e.g. --limit --url http://127.0.0.1:18090
  --server-pid PID[,…]  local server processes (every node and Redis): their summed CPU
                        and RSS per second and in the window, deliveries/CPU-s, players
                        per core, KiB per room/connection (from /proc)
                        e.g. --server-pid \"$(pgrep -n roomd)\"
  --redis-stats URLS    the Redis the servers use: its commands, command time and CPU per
                        acknowledged action in the window (INFO commandstats, INFO cpu);
                        a comma-separated list (a Redis Cluster's processes) is summed
                        e.g. --redis-stats redis://127.0.0.1:18379/

load
  --game GAME           tally (bumps on a schedule; option target null), halli-galli
                        (flip on turn, ring on five) or cockroach-poker (offer, peek,
                        pass, call at random); in both games each room starts moving
                        at a random point of the window's first second [default tally]
                        e.g. --game halli-galli
  --rooms N             rooms to create, 4 player sockets each         [default 10]
                        e.g. --rooms 1000
  --duration DUR        measured window after the ramp (s, or 500ms/30s/2m) [default 10s]
                        e.g. --duration 30s
  --rate N              tally: actions/s for the whole run, open loop, spread over the
                        clients (default: one bump per client per --interval-ms)
                        e.g. --rate 4000
  --interval-ms MS      tally: per-client interval when no --rate      [default 1000]
                        e.g. --interval-ms 100
  --stages SPEC         DURATION:TARGET,… moving linearly from the previous target
                        (rates start at --rate or 0, sockets at 0); their total length
                        is the window                            e.g. --stages 30s:1000,60s:4000,30s:0
  --stages-of WHAT      rate (tally bumps/s) or sockets (rooms of four set up and torn
                        down while measuring; no separate ramp)
                        [default rate for tally, sockets for the other games]
                        e.g. --stages 1m:4000 --stages-of sockets
  --closed-loop         old pacing, for comparison: a tick per --interval-ms, skipped while
                        --max-in-flight are unanswered, latency from the actual send (this
                        hides queueing: coordinated omission)   e.g. --closed-loop
  --max-in-flight N     closed loop: unanswered bumps per client before a tick is skipped
                        [default 16]                            e.g. --max-in-flight 1
  --late-ms MS          an action sent this long after its scheduled time counts as late
                        [default 10]                            e.g. --late-ms 5
  --concurrency N       rooms set up at once during the ramp           [default 32]
                        e.g. --concurrency 64
  --ramp-timeout DUR    longest ramp                                   [default 120s]
                        e.g. --ramp-timeout 5m
  --reaction-ms MS      halli-galli / cockroach-poker reaction delay (+0..50% jitter) [default 250]
                        e.g. --reaction-ms 400
  --bad-ring-rate P     halli-galli chance per update of a wrong or stale ring [default 0.05]
                        e.g. --bad-ring-rate 0
  --seed N              seed for jitter, bad rings and schedule offsets [default 1]
                        e.g. --seed 7

results
  --threshold EXPR      fail the run (exit 99, naming it) unless EXPR holds; repeatable.
                        Metrics: p50 p90 p99 p99.9 max mean (with a unit: us ms s),
                        errors rejects late (a count, or % of actions sent), missed
                        (count or % of actions scheduled), rate (acks/s); < <= > >=
                        e.g. --threshold 'p99<50ms' --threshold 'errors<0.1%' --threshold 'rate>=3900'
  --scenario FILE.toml  settings from a file: the flags' names as keys (threshold as an
                        array); flags given on the command line win
                        e.g. --scenario benches/scenarios/tally.toml, holding
                        url = \"http://127.0.0.1:8080\"  rooms = 100  rate = 4000
                        duration = \"30s\"  threshold = [\"p99<50ms\", \"errors<0.1%\"]
  --report FILE.html    a self-contained HTML report (no network): SVG plots of rate and
                        latency percentiles over time, the latency histogram, server
                        CPU/RSS, the parameters                 e.g. --report out.html
  --json                print the report as JSON instead of text   e.g. --json > run.json
  --quiet               no live progress (drawn only on a terminal anyway)  e.g. --quiet
  -h, --help            this text

Load tests from one address must raise roomd's per-address limits, e.g.
  ROOMD__HTTP__ADDR_RATE_PER_MIN=1000000 ROOMD__HTTP__ADDR_BURST=1000000
  ROOMD__HTTP__ADDR_MAX_SOCKETS=1000000
(and any connection cap above the sockets you open). Exit codes: 0 ok, 1 could not run,
99 a threshold failed.";

/// Everything the command line asks for.
#[derive(Clone, Debug, Default)]
pub struct Cli {
    pub cfg: Config,
    pub json: bool,
    pub report: Option<PathBuf>,
    pub thresholds: Vec<Threshold>,
    pub help: bool,
    /// `--stages` before `--stages-of` decides what they are.
    stages: Option<String>,
    stages_of: Option<String>,
}

fn list<T: std::str::FromStr>(v: &str) -> anyhow::Result<Vec<T>>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    v.split(',').map(|p| p.trim().parse::<T>().with_context(|| format!("bad list item {p:?}"))).collect()
}

impl Cli {
    /// The settings that shaped the run, for the report's parameter table.
    pub fn params(&self) -> std::collections::BTreeMap<String, String> {
        let c = &self.cfg;
        let mut p = std::collections::BTreeMap::new();
        let mut put = |k: &str, v: String| {
            p.insert(k.to_owned(), v);
        };
        put("url", c.urls.join(","));
        put("target", format!("{:?}", c.target).to_lowercase());
        put("game", c.game.id().to_owned());
        put("rooms", c.rooms.to_string());
        if self.stages.is_none() {
            put("duration", format!("{:?}", c.duration));
        }
        put("loop", format!("{:?}", c.mode).to_lowercase());
        if let Some(r) = c.rate {
            put("rate", r.to_string());
        }
        put("interval", format!("{:?}", c.interval));
        if let Some(s) = &self.stages {
            put("stages", format!("{s} ({})", if c.socket_stages.is_some() { "sockets" } else { "rate" }));
        }
        put("late after", format!("{:?}", c.late_after));
        if c.mode == LoopMode::Closed {
            put("max in flight", c.max_in_flight.to_string());
        }
        put("concurrency", c.concurrency.to_string());
        put("ramp timeout", format!("{:?}", c.ramp_timeout));
        if c.game != GameKind::Tally {
            put("reaction", format!("{:?}", c.reaction));
            put("bad ring rate", c.bad_ring_rate.to_string());
        }
        put("seed", c.seed.to_string());
        if !c.server_pids.is_empty() {
            put("server pids", c.server_pids.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
        }
        if let Some(url) = &c.redis_stats {
            put("redis stats", url.clone());
        }
        put("insecure", c.insecure.to_string());
        put("direct", c.direct.to_string());
        put("whole rooms", c.whole_rooms.to_string());
        put("thresholds", self.thresholds.iter().map(|t| t.text.clone()).collect::<Vec<_>>().join("  "));
        put("machine", machine());
        p
    }
}

/// Cores and CPU model of this machine.
fn machine() -> String {
    // /proc/cpuinfo, not available_parallelism: loadgen often runs pinned to one core.
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    let model = Some(info.as_str())
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
        })
        .unwrap_or_default();
    format!("{cores} cores {model}")
}

/// A scenario file as command-line arguments (its keys are the flags' names).
pub fn scenario_args(text: &str) -> anyhow::Result<Vec<String>> {
    let table: toml::Table = text.parse().context("scenario file is not TOML")?;
    let mut args = Vec::new();
    for (key, value) in table {
        let key = if key == "thresholds" { "threshold".to_owned() } else { key.replace('_', "-") };
        if key == "scenario" {
            bail!("a scenario file cannot name another scenario");
        }
        let flag = format!("--{key}");
        let scalar = |v: &toml::Value| -> anyhow::Result<String> {
            Ok(match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                other => bail!("scenario key {key:?}: unsupported value {other}"),
            })
        };
        match &value {
            toml::Value::Boolean(true) => args.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) if key == "threshold" => {
                for item in items {
                    args.push(flag.clone());
                    args.push(scalar(item)?);
                }
            }
            toml::Value::Array(items) => {
                args.push(flag);
                args.push(items.iter().map(scalar).collect::<anyhow::Result<Vec<_>>>()?.join(","));
            }
            v => {
                args.push(flag);
                args.push(scalar(v)?);
            }
        }
    }
    Ok(args)
}

/// Parses the command line (after the program name).
pub fn parse(args: &[String]) -> anyhow::Result<Cli> {
    let mut cli = Cli { cfg: Config { progress: true, ..Config::default() }, ..Cli::default() };
    // A scenario file first, so the flags on the command line override it.
    if let Some(i) = args.iter().position(|a| a == "--scenario") {
        let path = args.get(i + 1).context("--scenario needs a file")?;
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        let from_file = scenario_args(&text).with_context(|| format!("in {path}"))?;
        apply(&mut cli, &from_file).with_context(|| format!("in {path}"))?;
    }
    apply(&mut cli, args)?;
    finish(cli)
}

fn apply(cli: &mut Cli, args: &[String]) -> anyhow::Result<()> {
    let cfg = &mut cli.cfg;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value (see --help)"));
        let ms = |v: &str| -> anyhow::Result<Duration> { Ok(Duration::from_millis(v.parse()?)) };
        match flag.as_str() {
            "--url" => cfg.urls = value()?.split(',').map(|u| u.trim().trim_end_matches('/').to_owned()).collect(),
            "--game" => cfg.game = value()?.parse()?,
            "--rooms" => cfg.rooms = value()?.parse().context("--rooms")?,
            "--duration" => cfg.duration = parse_duration(value()?)?,
            "--rate" => cfg.rate = Some(value()?.parse().context("--rate")?),
            "--interval-ms" => cfg.interval = ms(value()?).context("--interval-ms")?,
            "--stages" => cli.stages = Some(value()?.clone()),
            "--stages-of" => cli.stages_of = Some(value()?.clone()),
            "--closed-loop" => cfg.mode = LoopMode::Closed,
            "--max-in-flight" => cfg.max_in_flight = value()?.parse().context("--max-in-flight")?,
            "--late-ms" => cfg.late_after = ms(value()?).context("--late-ms")?,
            "--concurrency" => cfg.concurrency = value()?.parse().context("--concurrency")?,
            "--ramp-timeout" => cfg.ramp_timeout = parse_duration(value()?)?,
            "--reaction-ms" => cfg.reaction = ms(value()?).context("--reaction-ms")?,
            "--bad-ring-rate" => cfg.bad_ring_rate = value()?.parse().context("--bad-ring-rate")?,
            "--seed" => cfg.seed = value()?.parse().context("--seed")?,
            "--server-pid" => cfg.server_pids = list(value()?)?,
            "--redis-stats" => cfg.redis_stats = Some(value()?.clone()),
            "--limit" => cfg.target = Target::Limit,
            "--insecure" => cfg.insecure = true,
            "--direct" => cfg.direct = true,
            "--whole-rooms" => cfg.whole_rooms = true,
            "--threshold" => cli.thresholds.push(value()?.parse()?),
            "--scenario" => {
                value()?; // read first, in `parse`
            }
            "--report" => cli.report = Some(PathBuf::from(value()?)),
            "--json" => cli.json = true,
            "--quiet" => cfg.progress = false,
            "-h" | "--help" => cli.help = true,
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok(())
}

fn finish(mut cli: Cli) -> anyhow::Result<Cli> {
    let cfg = &mut cli.cfg;
    if let Some(spec) = &cli.stages {
        let stages = parse_stages(spec)?;
        let of = cli.stages_of.as_deref().unwrap_or(if cfg.game == GameKind::Tally { "rate" } else { "sockets" });
        match of {
            "rate" => cfg.rate_stages = Some(stages),
            "sockets" => cfg.socket_stages = Some(stages),
            other => bail!("--stages-of {other:?}: rate or sockets"),
        }
    } else if cli.stages_of.is_some() {
        bail!("--stages-of without --stages");
    }
    if cfg.target == Target::Limit && cfg.game != GameKind::Tally {
        bail!("--limit speaks tally only");
    }
    if cfg.duration > Duration::from_secs(3600) || cfg.rooms > 100_000 || cfg.interval.is_zero() {
        bail!("--duration at most 1h, --rooms at most 100000, --interval-ms above 0");
    }
    if cfg.max_in_flight == 0 {
        bail!("--max-in-flight at least 1");
    }
    super::runner::validate(cfg)?;
    Ok(cli)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::loadgen::spec::Metric;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn flags_set_the_config_and_thresholds_repeat() {
        let cli = parse(&args(
            "--url http://a:1/,https://b:2 --rooms 5 --rate 400 --duration 1.5s --threshold p99<50ms --threshold errors<0.1% --insecure --report r.html --whole-rooms",
        ))
        .unwrap();
        assert_eq!(cli.cfg.urls, vec!["http://a:1", "https://b:2"]);
        assert!(cli.cfg.whole_rooms && !cli.cfg.direct);
        assert_eq!((cli.cfg.rooms, cli.cfg.rate, cli.cfg.duration), (5, Some(400.0), Duration::from_millis(1500)));
        assert!(cli.cfg.insecure && cli.cfg.mode == LoopMode::Open);
        assert_eq!(cli.thresholds.iter().map(|t| t.metric).collect::<Vec<_>>(), vec![Metric::P99, Metric::Errors]);
        assert_eq!(cli.report, Some(PathBuf::from("r.html")));
    }

    #[test]
    fn stages_are_rates_for_tally_and_sockets_for_halli_galli_unless_told() {
        let t = parse(&args("--stages 30s:1000,60s:4000,30s:0")).unwrap();
        assert_eq!(t.cfg.rate_stages.as_ref().map(Vec::len), Some(3));
        assert!(t.cfg.socket_stages.is_none());
        let h = parse(&args("--game halli-galli --stages 10s:400")).unwrap();
        assert!(h.cfg.socket_stages.is_some() && h.cfg.rate_stages.is_none());
        let s = parse(&args("--stages 10s:40 --stages-of sockets")).unwrap();
        assert!(s.cfg.socket_stages.is_some());
        assert!(parse(&args("--stages 10s:40 --stages-of rooms")).is_err());
        assert!(parse(&args("--game halli-galli --rate 10")).is_err());
        assert!(parse(&args("--closed-loop --rate 10")).is_err());
        assert!(parse(&args("--threshold p99<fast")).is_err());
        assert!(parse(&args("--bogus")).is_err());
    }

    #[test]
    fn a_scenario_file_gives_defaults_the_command_line_overrides() {
        let text = r#"
            url = "http://127.0.0.1:9"
            rooms = 7
            rate = 700.5
            duration = "3s"
            insecure = true
            threshold = ["p99<50ms", "errors<1%"]
        "#;
        let from_file = scenario_args(text).unwrap();
        let dir = std::env::temp_dir().join(format!("loadgen-scenario-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.toml");
        std::fs::write(&path, text).unwrap();
        let cli = parse(&[
            "--scenario".into(),
            path.display().to_string(),
            "--rooms".into(),
            "9".into(),
            "--threshold".into(),
            "max<1s".into(),
        ])
        .unwrap();
        assert!(from_file.contains(&"--insecure".to_owned()));
        assert_eq!(cli.cfg.urls, vec!["http://127.0.0.1:9"]);
        assert_eq!((cli.cfg.rooms, cli.cfg.rate), (9, Some(700.5)));
        assert_eq!(cli.cfg.duration, Duration::from_secs(3));
        assert_eq!(cli.thresholds.len(), 3);
        assert!(scenario_args("scenario = \"x.toml\"").is_err());
        assert!(scenario_args("rooms = [").is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn help_names_every_flag_the_parser_knows_with_an_example() {
        for flag in [
            "--url",
            "--insecure",
            "--limit",
            "--server-pid",
            "--redis-stats",
            "--game",
            "--rooms",
            "--duration",
            "--rate",
            "--interval-ms",
            "--stages",
            "--stages-of",
            "--closed-loop",
            "--max-in-flight",
            "--late-ms",
            "--concurrency",
            "--ramp-timeout",
            "--reaction-ms",
            "--bad-ring-rate",
            "--seed",
            "--threshold",
            "--scenario",
            "--report",
            "--json",
            "--quiet",
            "--whole-rooms",
            "--direct",
        ] {
            assert!(USAGE.contains(&format!("  {flag} ")), "{flag} is not documented");
            let example = USAGE.lines().any(|l| l.contains("e.g.") && l.contains(flag));
            assert!(example, "{flag} has no example");
        }
    }
}
