//! `roomd`: parses settings, sets up logs, serves until SIGINT/SIGTERM.

use anyhow::Context;
use gateway::config::Settings;

// jemalloc by default (docs/bench-history-2026-12.md, "The allocator": fewer CPU-seconds per delivery
// than glibc malloc, the same memory per socket); `--features mimalloc` takes precedence.
#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn config_arg() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--config" {
            return args.next();
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(path.to_owned());
        }
    }
    None
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::load(config_arg().as_deref()).context("reading settings")?;
    let logs = gateway::telemetry::init(&settings.log);
    let running = gateway::server::start_node(settings).await.context("starting roomd")?;
    let mode = if running.state.settings.redis.is_set() { "cluster" } else { "embedded single node" };
    tracing::info!(addr = %running.addr, node = %running.state.node_id, mode, allocator = allocator(), "roomd listening");
    {
        // The one line scripts read to learn the address. Written without `println!`,
        // which panics when nobody reads stdout any more: a dead reader is ignored.
        use std::io::Write;
        let data = running.state.rooms.data_file().map(|file| {
            let file = std::path::absolute(file).unwrap_or_else(|_| file.to_owned());
            tracing::info!(file = %file.display(), "data kept in");
            format!(", data {}", file.display())
        });
        let metrics = running.metrics_addr.map(|addr| format!(", metrics on http://{addr}/metrics"));
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "roomd listening on http://{} ({mode}, node {}{}{})",
            running.addr,
            running.state.node_id,
            data.unwrap_or_default(),
            metrics.unwrap_or_default()
        );
        let _ = out.flush();
    }
    // A drain (SIGTERM, or an operator's) ends this process within its bound.
    running.state.exit_after_drain.store(true, std::sync::atomic::Ordering::Relaxed);
    let server = running.server;
    let handle = server.handle();
    let state = running.state.clone();
    // Not started again if it dies: a drain half done cannot be resumed, and the process
    // was on its way out (see `room_actor::supervise::Policy::ExitOnFailure`).
    running.state.supervisor.spawn("signals", room_actor::supervise::Policy::ExitOnFailure, move || {
        let (state, handle) = (state.clone(), handle.clone());
        async move {
            let signal = wait_for_signal().await;
            tracing::info!(signal, "draining");
            gateway::server::exit_after_grace(&state);
            gateway::server::drain(&state).await;
            handle.stop(true).await;
        }
    });
    let served = server.await.context("serving");
    tracing::info!("stopped");
    logs.flush_and_close();
    served
}

/// The allocator roomd runs on, for the startup log line.
fn allocator() -> &'static str {
    if cfg!(feature = "mimalloc") {
        "mimalloc"
    } else if cfg!(feature = "jemalloc") {
        "jemalloc"
    } else {
        "system"
    }
}

/// SIGTERM (orchestrators) or SIGINT (Ctrl-C), whichever comes first.
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    }
}
