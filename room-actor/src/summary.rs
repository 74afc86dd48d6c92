//! Warnings that anyone on the network can repeat (a bad frame published on a node's
//! channel, connections to its peer port), summarised: the first is logged at once, the
//! rest of each period as one line with their count and the last one's detail. A flood
//! of them costs a line per period, not a line each (the probe of issue 55 wrote 17,553
//! lines in 5 s through the peer port's refusals); the counters (`metrics.rs`) keep the
//! exact numbers.

use std::sync::Mutex;
use std::time::Duration;
// Tokio's clock (the wall clock outside a runtime), so tests with paused time see periods
// pass as their timers do.
use tokio::time::Instant;

/// How often a repeated warning is logged at most.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// One kind of warning, logged at most once per [`SUMMARY_EVERY`] (a `static` per kind).
pub struct Summarised {
    /// Writes one line: how many came (1 for one logged at once) and the last one's
    /// detail. A function pointer, so the line can be written later by a timer.
    line: fn(u64, &str),
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Until when warnings are counted rather than logged (`None`: log the next at once).
    quiet_until: Option<Instant>,
    /// Counted since the last line, and the last one's detail.
    count: u64,
    last: String,
    /// A timer will write the count when the period ends.
    flushing: bool,
}

impl Summarised {
    pub const fn new(line: fn(u64, &str)) -> Summarised {
        Summarised {
            line,
            state: Mutex::new(State { quiet_until: None, count: 0, last: String::new(), flushing: false }),
        }
    }

    /// One more warning (`detail` is formatted only when it may be written): logged now if
    /// none was in the last period, else counted into the line written when the period
    /// ends (by a timer on the current tokio runtime; without one, with the next warning
    /// after the period).
    pub fn warn(&'static self, detail: impl FnOnce() -> String) {
        let now = Instant::now();
        let Ok(mut state) = self.state.lock() else { return };
        if state.quiet_until.is_none_or(|until| now >= until) {
            if state.count > 0 {
                (self.line)(state.count, &state.last);
                state.count = 0;
            }
            (self.line)(1, &detail());
            state.quiet_until = Some(now + SUMMARY_EVERY);
            return;
        }
        state.count += 1;
        state.last = detail();
        if !state.flushing {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                state.flushing = true;
                runtime.spawn(self.flush());
            }
        }
    }

    /// Writes the count at the end of each period while warnings keep coming; stops after
    /// a quiet one (the next warning is then logged at once).
    async fn flush(&'static self) {
        loop {
            let until = match self.state.lock() {
                Ok(state) => state.quiet_until,
                Err(_) => return,
            };
            if let Some(until) = until {
                tokio::time::sleep_until(until).await;
            }
            let Ok(mut state) = self.state.lock() else { return };
            if state.count == 0 {
                state.flushing = false;
                return;
            }
            (self.line)(state.count, &state.last);
            state.count = 0;
            state.quiet_until = Some(Instant::now() + SUMMARY_EVERY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static LINES: AtomicU64 = AtomicU64::new(0);
    static COUNTED: AtomicU64 = AtomicU64::new(0);
    static WARNING: Summarised = Summarised::new(|count, _| {
        LINES.fetch_add(1, Ordering::Relaxed);
        COUNTED.fetch_add(count, Ordering::Relaxed);
    });

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_warnings_is_a_line_per_period_with_the_count() {
        WARNING.warn(|| "first".into());
        assert_eq!((LINES.load(Ordering::Relaxed), COUNTED.load(Ordering::Relaxed)), (1, 1), "the first at once");
        for i in 0..10_000 {
            WARNING.warn(|| format!("{i}"));
        }
        assert_eq!(LINES.load(Ordering::Relaxed), 1, "the rest of the period is counted");
        tokio::time::sleep(SUMMARY_EVERY + Duration::from_secs(1)).await;
        assert_eq!((LINES.load(Ordering::Relaxed), COUNTED.load(Ordering::Relaxed)), (2, 10_001), "one line for them");
        // A quiet period later, nothing more is written.
        tokio::time::sleep(SUMMARY_EVERY * 3).await;
        assert_eq!(LINES.load(Ordering::Relaxed), 2);
    }
}
