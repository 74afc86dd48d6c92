//! `loadgen`: plays real games against roomd (or the limit server) and reports
//! throughput, rejects and action→update latency. See `benches/README.md`.
//!
//! Only point it at servers you run yourself: it connects to the `--url`s given and
//! nowhere else (default http://127.0.0.1:8080).

use anyhow::{bail, Context};
use benches::loadgen::{self, Config, Target};
use std::time::Duration;

const USAGE: &str = "usage: loadgen [--url URL[,URL…]] [--game tally|halli-galli] [--rooms N] [--duration SECS]
               [--concurrency N] [--ramp-timeout SECS] [--interval-ms MS] [--reaction-ms MS]
               [--bad-ring-rate P] [--seed N] [--server-pid PID] [--limit] [--json]

  --url           base URL(s) of YOUR OWN servers, comma-separated (default http://127.0.0.1:8080);
                  rooms are spread over them round-robin
  --game          tally (every client bumps every --interval-ms; target null) or halli-galli
  --rooms         rooms to create, 4 player sockets each (default 10)
  --duration      measured window in seconds after the ramp (default 10)
  --concurrency   rooms set up at once during the ramp (default 32)
  --ramp-timeout  longest ramp in seconds (default 120)
  --reaction-ms   halli-galli reaction delay (default 250; +0..50% jitter)
  --bad-ring-rate halli-galli chance per update of a wrong or stale ring (default 0.05)
  --server-pid    local server processes (PID[,PID...], e.g. every node and Redis): report
                  their summed CPU-s in the window, deliveries/CPU-s, players/core and RSS
                  growth per room and connection (from /proc)
  --limit         the servers are limit_server: skip HTTP, tally only
  --json          print the report as JSON";

fn parse(args: &[String]) -> anyhow::Result<(Config, bool)> {
    let mut cfg = Config::default();
    let mut json = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => cfg.urls = value()?.split(',').map(|u| u.trim().trim_end_matches('/').to_owned()).collect(),
            "--game" => cfg.game = value()?.parse()?,
            "--rooms" => cfg.rooms = value()?.parse()?,
            "--duration" => cfg.duration = Duration::from_secs_f64(value()?.parse()?),
            "--concurrency" => cfg.concurrency = value()?.parse()?,
            "--ramp-timeout" => cfg.ramp_timeout = Duration::from_secs_f64(value()?.parse()?),
            "--interval-ms" => cfg.interval = Duration::from_millis(value()?.parse()?),
            "--reaction-ms" => cfg.reaction = Duration::from_millis(value()?.parse()?),
            "--bad-ring-rate" => cfg.bad_ring_rate = value()?.parse()?,
            "--seed" => cfg.seed = value()?.parse()?,
            "--server-pid" => {
                cfg.server_pids = value()?.split(',').map(|p| p.trim().parse()).collect::<Result<_, _>>()?;
            }
            "--limit" => cfg.target = Target::Limit,
            "--json" => json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    if cfg.target == Target::Limit && cfg.game != loadgen::GameKind::Tally {
        bail!("--limit speaks tally only");
    }
    if cfg.duration > Duration::from_secs(3600) || cfg.rooms > 100_000 || cfg.interval.is_zero() {
        bail!("--duration at most 3600 s, --rooms at most 100000, --interval-ms above 0");
    }
    Ok((cfg, json))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cfg, json) = parse(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = rt.block_on(loadgen::run(cfg))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.text());
    }
    Ok(())
}
