//! Log floods held back: a warning or error repeated from one place (the same line of
//! the same crate: the same cause, over and over) is written [`BURST`] times per
//! [`PERIOD`]; the rest are counted, and one line per period says how many were held
//! back and where from. The redis crate's own warnings come through the `log` bridge and
//! are keyed the same way, by their real target and line (a Redis Cluster member down
//! made one node write 4,751 identical `Failed to connect to node` lines in 5 s).
//!
//! A place under [`BURST`] lines a period loses nothing: the per-room warnings of an
//! ordinary fault (a few rooms stopping, each once) are all written. Info and debug lines
//! are never held back (an operator who turns debug on asked for the volume), and the
//! counters on `/metrics` keep exact numbers whatever the log shows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{Event, Level, Metadata};
use tracing_log::NormalizeEvent;
use tracing_subscriber::layer::{Context, Filter};

/// Lines written in full per place per period.
pub const BURST: u64 = 10;
/// How often the lines held back are reported (the same period as the node's own
/// summarised warnings, `room_actor::summary`).
pub const PERIOD: Duration = room_actor::summary::SUMMARY_EVERY;

/// Where a line comes from: its crate's target and its source line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Place {
    target: String,
    file: Option<String>,
    line: Option<u32>,
}

struct Window {
    since: Instant,
    written: u64,
    held: u64,
}

/// The per-place counts; shared by the filter and the thread that reports.
#[derive(Clone, Default)]
pub struct FloodGate {
    places: Arc<Mutex<HashMap<Place, Window>>>,
}

impl FloodGate {
    pub fn new() -> FloodGate {
        FloodGate::default()
    }

    /// Whether a line from `place` at `now` is written (else it is counted).
    fn admit(&self, place: Place, now: Instant) -> bool {
        let Ok(mut places) = self.places.lock() else { return true };
        let window = places.entry(place).or_insert(Window { since: now, written: 0, held: 0 });
        // A window over starts again; one with lines held back waits for the reporter,
        // unless the reporter missed a whole period.
        let age = now.duration_since(window.since);
        if (age >= PERIOD && window.held == 0) || age >= PERIOD * 2 {
            *window = Window { since: now, written: 0, held: 0 };
        }
        if window.written < BURST {
            window.written += 1;
            true
        } else {
            window.held += 1;
            false
        }
    }

    /// The places whose lines were held back in a period now over, with how many; their
    /// windows start again. Places quiet for a whole period are forgotten.
    fn take_held(&self, now: Instant) -> Vec<(Place, u64)> {
        let Ok(mut places) = self.places.lock() else { return Vec::new() };
        let mut held = Vec::new();
        places.retain(|place, window| {
            if now.duration_since(window.since) < PERIOD {
                return true;
            }
            if window.held > 0 {
                held.push((place.clone(), window.held));
                *window = Window { since: now, written: 0, held: 0 };
                return true;
            }
            false
        });
        held.sort_by(|a, b| a.0.target.cmp(&b.0.target).then(a.0.line.cmp(&b.0.line)));
        held
    }

    /// Reports the lines held back, once a period, from a thread of its own (a line
    /// written from inside the filter would re-enter the subscriber).
    pub fn report_every_period(&self) {
        let gate = self.clone();
        let spawned = std::thread::Builder::new().name("log-flood".into()).spawn(move || loop {
            std::thread::sleep(PERIOD);
            for (place, held) in gate.take_held(Instant::now()) {
                tracing::warn!(
                    target: "roomd::log_flood",
                    from = %place.target,
                    file = place.file.as_deref().unwrap_or("?"),
                    line = place.line.unwrap_or(0),
                    held,
                    "{held} more lines like the ones above from this place in the last {}s were held back",
                    PERIOD.as_secs()
                );
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "the log flood reporter did not start: repeated lines are held back unreported");
        }
    }
}

fn place_of(meta: &Metadata<'_>) -> Place {
    Place { target: meta.target().to_owned(), file: meta.file().map(str::to_owned), line: meta.line() }
}

impl<S> Filter<S> for FloodGate {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        let meta = event.metadata();
        if *meta.level() > Level::WARN {
            return true;
        }
        // A line from the `log` bridge (the redis crate) carries its real place.
        let place = match event.normalized_metadata() {
            Some(normalized) => place_of(&normalized),
            None => place_of(meta),
        };
        self.admit(place, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(line: u32) -> Place {
        Place { target: "redis::cluster".into(), file: Some("a.rs".into()), line: Some(line) }
    }

    #[test]
    fn a_place_writes_its_burst_then_is_counted_and_reported_once_a_period() {
        let gate = FloodGate::new();
        let t = Instant::now();
        let written = (0..4751).filter(|_| gate.admit(place(7), t)).count();
        assert_eq!(written as u64, BURST);
        assert!(gate.admit(place(8), t), "another place has its own burst");
        assert!(gate.take_held(t + PERIOD / 2).is_empty(), "reported when the period is over");
        assert_eq!(gate.take_held(t + PERIOD), vec![(place(7), 4751 - BURST)]);
        // The next period starts afresh.
        assert!(gate.admit(place(7), t + PERIOD));
        assert!(gate.take_held(t + PERIOD * 2).is_empty());
    }

    #[test]
    fn a_place_under_its_burst_loses_nothing_and_quiet_places_are_forgotten() {
        let gate = FloodGate::new();
        let t = Instant::now();
        assert!((0..BURST).all(|_| gate.admit(place(1), t)));
        assert!(gate.take_held(t + PERIOD).is_empty());
        assert!(gate.places.lock().unwrap_or_else(|e| e.into_inner()).is_empty());
    }
}
