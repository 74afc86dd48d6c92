//! What cycles saw, summed over the run (errors by kind as loadgen counts them), and
//! where a cycle is, so a timed-out one says what it was waiting for.

use crate::loadgen::ErrorTally;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What one cycle (or the whole run) saw.
#[derive(Default, Debug)]
pub(super) struct Counts {
    pub(super) ok: u64,
    pub(super) failed: u64,
    pub(super) by_game: BTreeMap<&'static str, (u64, u64)>,
    pub(super) drops_rst: u64,
    pub(super) drops_fin: u64,
    pub(super) reconnects: u64,
    pub(super) leaves: u64,
    /// `room_unavailable` answers (each action resent with its cs).
    pub(super) unavailable: u64,
    pub(super) results: u64,
    pub(super) sent: u64,
    pub(super) acks: u64,
    pub(super) updates: u64,
    pub(super) rejects: BTreeMap<String, u64>,
    pub(super) final_graceful: u64,
    pub(super) final_abrupt: u64,
    /// Errors by kind, counted as loadgen counts them.
    pub(super) errors: ErrorTally,
}

impl Counts {
    pub(super) fn error(&mut self, message: String) {
        self.errors.error(message);
    }

    pub(super) fn add(&mut self, o: Counts) {
        self.ok += o.ok;
        self.failed += o.failed;
        for (g, (ok, failed)) in o.by_game {
            let e = self.by_game.entry(g).or_default();
            e.0 += ok;
            e.1 += failed;
        }
        self.drops_rst += o.drops_rst;
        self.drops_fin += o.drops_fin;
        self.reconnects += o.reconnects;
        self.leaves += o.leaves;
        self.unavailable += o.unavailable;
        self.results += o.results;
        self.sent += o.sent;
        self.acks += o.acks;
        self.updates += o.updates;
        for (c, n) in o.rejects {
            *self.rejects.entry(c).or_default() += n;
        }
        self.final_graceful += o.final_graceful;
        self.final_abrupt += o.final_abrupt;
        self.errors.merge(o.errors);
    }
}

/// Where each part of a cycle is, so a timed-out cycle says what it was waiting for.
pub(super) struct Progress {
    cycle: Mutex<&'static str>,
    players: Vec<Mutex<&'static str>>,
}

impl Progress {
    pub(super) fn new(players: usize) -> Progress {
        Progress { cycle: Mutex::new("start"), players: (0..players).map(|_| Mutex::new("-")).collect() }
    }

    pub(super) fn set(&self, step: &'static str) {
        if let Ok(mut s) = self.cycle.lock() {
            *s = step;
        }
    }

    pub(super) fn player(&self, k: usize, step: &'static str) {
        if let Some(Ok(mut s)) = self.players.get(k).map(|m| m.lock()) {
            *s = step;
        }
    }

    pub(super) fn describe(&self) -> String {
        let cycle = self.cycle.lock().map(|s| *s).unwrap_or("?");
        let players: Vec<String> = self
            .players
            .iter()
            .enumerate()
            .map(|(k, m)| format!("p{k} {}", m.lock().map(|s| *s).unwrap_or("?")))
            .collect();
        format!("{cycle} [{}]", players.join(", "))
    }
}
