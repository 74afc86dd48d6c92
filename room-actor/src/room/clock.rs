//! Where rooms read the time, and the room's own time that never runs backwards.

use std::time::{SystemTime, UNIX_EPOCH};

/// Where rooms read the time.
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// The node's wall clock (production).
    System,
    /// `base_ms` plus tokio's clock since `start`: with tokio's time paused, tests play
    /// hours of timeouts in milliseconds while timers and `now` stay consistent.
    Tokio { base_ms: i64, start: tokio::time::Instant },
}

impl Clock {
    /// A tokio-driven clock starting at the current wall time.
    pub fn tokio() -> Clock {
        Clock::Tokio { base_ms: Clock::System.now_ms(), start: tokio::time::Instant::now() }
    }

    /// Epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0),
            Clock::Tokio { base_ms, start } => base_ms + start.elapsed().as_millis() as i64,
        }
    }
}

/// A room's time: the node's clock, but never below the last logged `at`.
pub(super) struct RoomTime {
    /// A copy of [`super::RoomDeps::clock`] (the clock is `Copy`).
    pub(super) clock: Clock,
    /// Time never runs backwards inside a room: `now` is at least the last logged `at`.
    pub(super) last_at: i64,
    /// No deadline is enforced before this (recovery + 30 s).
    pub(super) hold_until: i64,
}

impl RoomTime {
    /// Starting at `now` (read once by the caller, who stamps other things with it).
    pub(super) fn new(clock: Clock, now: i64) -> RoomTime {
        RoomTime { clock, last_at: now, hold_until: i64::MIN }
    }

    /// The room's time now, without stamping it (what timers and bots look at).
    pub(super) fn peek(&self) -> i64 {
        self.clock.now_ms().max(self.last_at)
    }

    /// The room's time now, stamped: nothing later in the room sees an earlier time.
    pub(super) fn now(&mut self) -> i64 {
        let now = self.peek();
        self.last_at = now;
        now
    }

    /// The node's clock, unclamped (for delays until a deadline).
    pub(super) fn wall_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}
