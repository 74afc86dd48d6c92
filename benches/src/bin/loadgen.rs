//! `loadgen`: plays real games against roomd (or the limit server) and reports
//! throughput, rejects and action→update latency from each action's scheduled time.
//! See `loadgen --help` and `benches/README.md`.
//!
//! Only point it at servers you run yourself: it connects to the `--url`s given and
//! nowhere else (default http://127.0.0.1:8080).

use anyhow::Context;
use benches::loadgen::{self, cli};
use std::process::ExitCode;

// jemalloc, as roomd: loadgen allocates and frees every message it parses, and glibc's
// free was its largest single symbol on one core at 4,500 Halli Galli rooms.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit code when a threshold fails (as k6 does).
const THRESHOLD_FAILED: u8 = 99;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", cli::USAGE);
        return Ok(ExitCode::SUCCESS);
    }
    let cli = cli::parse(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let started_at = loadgen::report::utc_now();
    let mut report = rt.block_on(loadgen::run(cli.cfg.clone()))?;
    report.started_at = started_at;
    report.command = std::iter::once("loadgen".to_owned()).chain(args.iter().cloned()).collect::<Vec<_>>().join(" ");
    report.params = cli.params();
    let failed = report.check(&cli.thresholds);
    if let Some(path) = &cli.report {
        let html = loadgen::html::render(&report)?;
        std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("report: {}", path.display());
    }
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.text());
    }
    if failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for v in &failed {
        eprintln!("threshold failed: {} (observed {:.3}{})", v.threshold, v.observed, v.unit);
    }
    Ok(ExitCode::from(THRESHOLD_FAILED))
}
