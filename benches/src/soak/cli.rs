//! The soak's command line: every flag, its default and its bounds.

use crate::loadgen;
use anyhow::{bail, Context};
use std::time::Duration;

pub const USAGE: &str = "usage: soak [--url URL] [--pid PID] [--cycles N] [--concurrency C] [--max-seconds S]
            [--cycle-timeout S] [--sample-secs S] [--progress-secs S] [--settle-secs S]
            [--mix tally=W,halli-galli=W,cockroach-poker=W] [--drop-rate P] [--reconnect-rate P]
            [--warmup P] [--max-growth-mib-per-10k MIB] [--max-error-rate P] [--seed N]

  --url             base URL of YOUR OWN roomd (default http://127.0.0.1:8080)
  --pid             that server's process id: its VmRSS / VmHWM are sampled from /proc
  --cycles          cycles to run (default 10000)
  --concurrency     cycles in flight at once (default 32)
  --max-seconds     stop starting cycles after this long (default 900)
  --cycle-timeout   a cycle not done by then is an error (default 120)
  --sample-secs     RSS sample interval (default 2)
  --progress-secs   progress line interval (default 10)
  --settle-secs     wait after the last cycle before the final sample (default 5)
  --mix             relative weights of the games (default tally=80,halli-galli=10,cockroach-poker=10)
  --drop-rate       chance per cycle that one player drops its connection mid-game (default 0.3)
  --reconnect-rate  chance that a dropped player reconnects (default 0.5; the host always does)
  --warmup          fraction of the cycles counted as warm-up (default 0.1)
  --max-growth-mib-per-10k
                    exit 1 if RSS grows faster than this over the second half (default 8)
  --max-error-rate  exit 2 if more than this fraction of cycles failed (default 0.01)
  --seed            seed of the cycles' choices (default 1)";

#[derive(Clone, Debug)]
pub struct Args {
    pub url: String,
    pub pid: Option<u32>,
    pub cycles: usize,
    pub concurrency: usize,
    pub max_seconds: f64,
    pub cycle_timeout: Duration,
    pub sample_every: Duration,
    pub progress_every: Duration,
    pub settle: Duration,
    pub mix: [u32; 3],
    pub drop_rate: f64,
    pub reconnect_rate: f64,
    pub warmup: f64,
    pub max_growth_mib_per_10k: f64,
    pub max_error_rate: f64,
    pub seed: u64,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            url: "http://127.0.0.1:8080".into(),
            pid: None,
            cycles: 10_000,
            concurrency: 32,
            max_seconds: 900.0,
            cycle_timeout: Duration::from_secs(120),
            sample_every: Duration::from_secs(2),
            progress_every: Duration::from_secs(10),
            settle: Duration::from_secs(5),
            mix: [80, 10, 10],
            drop_rate: 0.3,
            reconnect_rate: 0.5,
            warmup: 0.1,
            max_growth_mib_per_10k: 8.0,
            max_error_rate: 0.01,
            seed: 1,
        }
    }
}

pub fn parse_args(args: &[String]) -> anyhow::Result<Args> {
    let mut a = Args::default();
    let mut it = args.iter();
    let secs = |v: &str| -> anyhow::Result<Duration> { Ok(Duration::from_secs_f64(v.parse::<f64>()?.max(0.001))) };
    while let Some(flag) = it.next() {
        let mut value = || it.next().map(String::as_str).with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = value()?.trim().trim_end_matches('/').to_owned(),
            "--pid" => a.pid = Some(value()?.parse()?),
            "--cycles" => a.cycles = value()?.parse()?,
            "--concurrency" => a.concurrency = value()?.parse::<usize>()?.max(1),
            "--max-seconds" => a.max_seconds = value()?.parse()?,
            "--cycle-timeout" => a.cycle_timeout = secs(value()?)?,
            "--sample-secs" => a.sample_every = secs(value()?)?,
            "--progress-secs" => a.progress_every = secs(value()?)?,
            "--settle-secs" => a.settle = secs(value()?)?,
            "--mix" => a.mix = parse_mix(value()?)?,
            "--drop-rate" => a.drop_rate = value()?.parse()?,
            "--reconnect-rate" => a.reconnect_rate = value()?.parse()?,
            "--warmup" => a.warmup = value()?.parse()?,
            "--max-growth-mib-per-10k" => a.max_growth_mib_per_10k = value()?.parse()?,
            "--max-error-rate" => a.max_error_rate = value()?.parse()?,
            "--seed" => a.seed = value()?.parse()?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    loadgen::ws_url(&a.url, "x")?;
    if a.cycles == 0 || a.cycles > 10_000_000 {
        bail!("--cycles between 1 and 10,000,000");
    }
    if !(0.0..0.9).contains(&a.warmup) {
        bail!("--warmup is a fraction below 0.9");
    }
    Ok(a)
}

fn parse_mix(text: &str) -> anyhow::Result<[u32; 3]> {
    let mut mix = [0; 3];
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (name, weight) = part.split_once('=').with_context(|| format!("--mix: {part:?} is not game=weight"))?;
        let slot = match name.trim() {
            "tally" => 0,
            "halli-galli" => 1,
            "cockroach-poker" => 2,
            other => bail!("--mix: unknown game {other:?}"),
        };
        mix[slot] = weight.trim().parse()?;
    }
    if mix.iter().sum::<u32>() == 0 {
        bail!("--mix: every weight is zero");
    }
    Ok(mix)
}
