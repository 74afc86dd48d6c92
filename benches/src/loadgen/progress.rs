//! The live view on a terminal (indicatif): during the ramp, sockets connected of the
//! target and failures; during the window, the rate achieved, p99 so far, errors, late and
//! missed actions. Draws nothing when stderr is not a terminal (CI logs, `run.sh`) or
//! when switched off.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// Visible only when `enabled` and stderr is a terminal.
    pub fn new(enabled: bool) -> Progress {
        let bar = if enabled && std::io::stderr().is_terminal() {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4))
        } else {
            ProgressBar::hidden()
        };
        Progress { bar }
    }

    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }

    fn style(template: &str) -> ProgressStyle {
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
    }

    /// The ramp begins: `sockets` to connect.
    pub fn ramp(&self, sockets: u64) {
        self.bar.set_style(Self::style("ramp   [{bar:30}] {pos}/{len} sockets {msg} ({elapsed})"));
        self.bar.set_length(sockets);
        self.bar.set_position(0);
        self.bar.enable_steady_tick(Duration::from_millis(250));
    }

    pub fn ramp_update(&self, connected: u64, failures: u64) {
        self.bar.set_position(connected);
        self.bar.set_message(if failures > 0 { format!("· {failures} failed") } else { String::new() });
    }

    /// The window begins: `secs` long.
    pub fn window(&self, secs: u64) {
        self.bar.set_style(Self::style("window [{bar:30}] {pos}/{len} s {msg}"));
        self.bar.set_length(secs.max(1));
        self.bar.set_position(0);
    }

    pub fn window_update(&self, s: &Live) {
        self.bar.set_position(s.elapsed_s);
        self.bar.set_message(s.line());
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// One refresh of the window's line.
#[derive(Clone, Debug, Default)]
pub struct Live {
    pub elapsed_s: u64,
    pub rate: f64,
    pub target_rate: Option<f64>,
    pub p99_ms: f64,
    pub errors: u64,
    pub late: u64,
    pub missed: u64,
    pub sockets: u64,
}

impl Live {
    pub fn line(&self) -> String {
        let target = self.target_rate.map(|t| format!(" of {t:.0}")).unwrap_or_default();
        format!(
            "{:.0}{target} acks/s · p99 {:.1} ms · errors {} · late {} · missed {} · {} sockets",
            self.rate, self.p99_ms, self.errors, self.late, self.missed, self.sockets
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_hidden_when_switched_off_and_the_line_says_what_matters() {
        assert!(Progress::new(false).is_hidden());
        let l = Live { rate: 950.4, target_rate: Some(1000.0), p99_ms: 12.34, errors: 2, ..Live::default() };
        assert_eq!(l.line(), "950 of 1000 acks/s · p99 12.3 ms · errors 2 · late 0 · missed 0 · 0 sockets");
    }
}
