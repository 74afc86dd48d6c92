//! Logs with `tracing-subscriber`: pretty for people, JSON for log pipelines.
//!
//! Writing logs never blocks or breaks the node: lines go through `tracing-appender`'s
//! non-blocking writer in lossy mode (a thread writes them to stdout; when it cannot keep
//! up — a full pipe, a stalled log shipper — lines are dropped instead of blocking the
//! node), and write errors (a closed stdout/stderr: the reader died) are ignored rather
//! than reported with `eprintln!`, which would panic on a closed stderr.

use crate::config::{Log, LogFormat};
use std::time::Duration;
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Lines buffered for the writer thread before new ones are dropped.
const BUFFERED_LINES: usize = 16_384;
/// How long the node waits at exit for buffered lines to be written.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(1);

/// Keeps the log writer thread; [`LogGuard::flush_and_close`] at exit.
pub struct LogGuard(Option<WorkerGuard>);

impl LogGuard {
    /// Flushes what is buffered, waiting at most [`FLUSH_AT_EXIT`]: the writer's own
    /// shutdown may print to (and so block on) a stdout nobody reads, so it runs on a
    /// thread of its own that the exit does not wait for beyond the bound.
    pub fn flush_and_close(mut self) {
        let Some(guard) = self.0.take() else { return };
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("log-flush".into()).spawn(move || {
            drop(guard);
            let _ = tx.send(());
        });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(FLUSH_AT_EXIT);
        }
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        // Not flushed explicitly: never block here (see `flush_and_close`).
        if let Some(guard) = self.0.take() {
            std::mem::forget(guard);
        }
    }
}

pub fn init(log: &Log) -> LogGuard {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(BUFFERED_LINES)
        .thread_name("log-writer")
        .finish(std::io::stdout());
    // Repeated warnings are held back past a burst per place (`log_flood.rs`).
    let gate = crate::log_flood::FloodGate::new();
    let lines = tracing_subscriber::fmt::layer().with_writer(writer).log_internal_errors(false);
    let installed = match log.format {
        LogFormat::Pretty => {
            tracing_subscriber::registry().with(filter).with(lines.with_filter(gate.clone())).try_init()
        }
        LogFormat::Json => tracing_subscriber::registry()
            .with(filter)
            .with(lines.json().flatten_event(true).with_current_span(true).with_filter(gate.clone()))
            .try_init(),
    };
    if installed.is_ok() {
        gate.report_every_period();
    }
    LogGuard(Some(guard))
}
