//! When a batch is worth waiting for. The append queues (`redis/append/queue.rs`) and the bus
//! outboxes (`cluster/outbox.rs`) send what gathered while their previous round trip was
//! in flight (group commit). A batch window (`ROOMD__CLUSTER__BATCH_WINDOW_MS`) can make a
//! batch wait after its first item for more, which at a steady rate cuts the cluster's
//! round trips, Redis CPU and system calls per action by a large part (docs/bench-history-2026-12.md),
//! but on a quiet queue it only adds the window to every item's latency, because nothing
//! else comes.
//!
//! So the window is taken only where it pays: a queue waits when its recent arrival rate
//! brings [`MIN_ARRIVALS`] more items within the window **and** its current item came within
//! the window of the queue being free (it is busy now, not after a quiet spell). Otherwise
//! the batch goes after the rest of the thread's tick, as with no window at all.
//!
//! And it waits only as long as its rate takes to bring [`WAIT_ARRIVALS`] more items, the
//! window being the most it ever waits, and stops waiting as soon as those items have come
//! ([`gather`]): a batch of several items is what saves the round trips, and a longer wait
//! only adds latency. The same window then suits a busy tally queue (2,500 items a second:
//! 2 ms) and a Halli Galli queue of a node with a thousand rooms (~600 a second: the whole
//! window of 5 ms), where one fixed length would either make the first wait longer than it
//! pays or the second never wait (docs/bench-history-2026-12.md, "A wait as long as the queue's rate
//! needs").
//!
//! An outbox whose destination is on a peer link never waits (`cluster/outbox.rs`): a link
//! write saves no Redis round trip, and the updates a busy owner sends come out bunched
//! already, behind the append batch that stored their actions; the window there only
//! added its length to every crossing (docs/bench-history-2026-12.md, "Frames on a peer link wait for
//! no window").
//!
//! The rate is an exponentially weighted mean of items per cycle (first item taken to
//! first item taken), weighted by time (`1 - e^(-dt/τ)`, τ = [`RATE_MEMORY`]): a cycle
//! after a long pause replaces what came before it, a burst of short ones moves it a
//! little each.

use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How far back the arrival rate remembers (τ of its time-weighted mean).
pub const RATE_MEMORY: Duration = Duration::from_millis(50);

/// How many more arrivals the window must be expected to bring before a batch waits for
/// it: a batch that would only double saves a round trip per two items for a window of
/// latency on both; from three up the saving is what a busy node needs (at 1 ms: 2,000
/// arrivals a second per queue, which a two-node cluster's queues pass at about 4,000
/// actions a second; docs/bench-history-2026-12.md).
pub const MIN_ARRIVALS: f64 = 2.0;

/// How many more arrivals a batch waits for, at its queue's recent rate (at most the
/// window). Measured (docs/bench-history-2026-12.md): waiting for 2.5 gave a Halli Galli cluster
/// about half of what a fixed 5 ms window gave and a tally cluster nothing; waiting for
/// five gave both more deliveries per CPU-second at a p99 a few milliseconds longer.
pub const WAIT_ARRIVALS: f64 = 5.0;

/// One queue's pacing: its window and what it has seen.
#[derive(Debug)]
pub struct Pace {
    window: Duration,
    /// How many more arrivals a batch waits for ([`WAIT_ARRIVALS`] unless
    /// [`Pace::gathering`] said otherwise).
    arrivals: f64,
    /// Items per second, recently.
    rate: f64,
    /// When the previous batch's first item was taken.
    last_taken: Option<Instant>,
    /// Its items.
    last_items: usize,
    /// Since when the queue has had no batch in flight.
    free_since: Instant,
}

impl Pace {
    /// A queue that waits at most `window` (zero: never).
    pub fn new(window: Duration) -> Pace {
        Pace::gathering(window, WAIT_ARRIVALS)
    }

    /// A queue that waits at most `window` for `arrivals` more items (the file store's
    /// commits, whose fixed cost per commit is far above a Redis round trip's).
    pub fn gathering(window: Duration, arrivals: f64) -> Pace {
        Pace { window, arrivals, rate: 0.0, last_taken: None, last_items: 0, free_since: Instant::now() }
    }

    /// How many more arrivals a batch waits for.
    pub fn arrivals(&self) -> f64 {
        self.arrivals
    }

    /// How long a batch whose first item was taken at `taken` waits for more: as long as
    /// the queue's rate takes to bring [`WAIT_ARRIVALS`] more items, at most the window,
    /// when the queue is busy (the item came within the window of the queue being free,
    /// [`Pace::done`]) and its rate brings [`MIN_ARRIVALS`] within the window; else
    /// nothing. Updates the rate with the cycle that ended at `taken`.
    pub fn wait(&mut self, taken: Instant) -> Option<Duration> {
        if let Some(last) = self.last_taken {
            let cycle = taken.saturating_duration_since(last).max(Duration::from_micros(1));
            let now_rate = self.last_items as f64 / cycle.as_secs_f64();
            let weight = 1.0 - (-cycle.as_secs_f64() / RATE_MEMORY.as_secs_f64()).exp();
            self.rate += weight * (now_rate - self.rate);
        }
        self.last_taken = Some(taken);
        self.last_items = 1;
        if self.window.is_zero() {
            return None;
        }
        if self.rate * self.window.as_secs_f64() < MIN_ARRIVALS {
            return None;
        }
        let busy = taken.saturating_duration_since(self.free_since) < self.window;
        busy.then(|| Duration::from_secs_f64(self.arrivals / self.rate).min(self.window))
    }

    /// Counts the batch cut: `items` in all, its first included (what arrived one by one:
    /// an outbox counts an update several sessions see once).
    pub fn cut(&mut self, items: usize) {
        self.last_items = items;
    }

    /// The batch in flight is done at `at`: the queue is free again.
    pub fn done(&mut self, at: Instant) {
        self.free_since = at;
    }

    /// Items per second, recently (for tests and logs).
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// Waits before a batch is cut, as [`Pace::wait`] says: until the [`WAIT_ARRIVALS`] more
/// items it waits for have come, its timer being only the bound; then (or with no wait,
/// unless what `rx` holds already fills a batch of `max`) the rest of this thread's tick
/// adds what it has. `may_wait` false (a batch with no round trip to save) keeps the rate
/// current but never waits beyond the tick.
///
/// The wait ends when its items have come, not when its timer fires: tokio rounds a timer
/// up to its next millisecond, and the rate it was set from is a mean, so a batch cut by
/// its timer waited up to a millisecond longer than it took its items to come
/// (docs/bench-history-2026-12.md, "A batch cut when its items have come"). `take` adds an item that
/// came while waiting to the caller's batch, in order (ahead of anything still in `rx`),
/// and says how many of the batch's items count so far beyond its first: an outbox counts
/// an update several sessions see once, and a full batch counts as all it waits for
/// (`usize::MAX`).
pub(crate) async fn gather<T>(
    pace: &mut Pace,
    rx: &mut mpsc::UnboundedReceiver<T>,
    max: usize,
    may_wait: bool,
    mut take: impl FnMut(T) -> usize,
) {
    let wait = pace.wait(Instant::now()).filter(|_| may_wait);
    if rx.len() + 1 >= max {
        return;
    }
    if let Some(wait) = wait {
        let want = WAIT_ARRIVALS.ceil() as usize;
        let timer = tokio::time::sleep(wait);
        tokio::pin!(timer);
        let mut counted = 0;
        while counted < want {
            tokio::select! {
                biased;
                item = rx.recv() => match item {
                    Some(item) => counted = take(item),
                    None => return,
                },
                () = &mut timer => return,
            }
        }
    }
    let_the_tick_finish().await;
}

/// Lets the rest of this thread's tick run before a batch is cut: the tasks already
/// woken (rooms whose actions the same `epoll` round delivered) run first and add what
/// they have, and the reactor is polled once more. Without it a queue woken by the first
/// room of a tick sends that room's entry alone and the others wait for the next round
/// trip. It costs one task poll per batch and no timer, and adds no wait beyond the tick
/// itself (a yielded task is run again once the tasks ahead of it and one non-blocking
/// reactor poll are done). Its measured effect is in docs/bench-history-2026-12.md ("The
/// rest of the tick before a batch is cut").
pub(crate) async fn let_the_tick_finish() {
    tokio::task::yield_now().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Feeds `pace` a steady stream: a batch of `items` every `every`, each taken as soon
    /// as the one before was done `gap` earlier; the last decision.
    fn steady(
        pace: &mut Pace,
        start: Instant,
        every: Duration,
        gap: Duration,
        items: usize,
        n: u32,
    ) -> Option<Duration> {
        let mut wait = None;
        for i in 1..=n {
            let taken = start + every * i;
            pace.done(taken - gap);
            wait = pace.wait(taken);
            pace.cut(items);
        }
        wait
    }

    #[test]
    fn a_queue_that_has_seen_nothing_sends_its_first_item_at_once() {
        let now = Instant::now();
        let mut pace = Pace::new(Duration::from_secs(30));
        pace.done(now);
        assert_eq!(pace.wait(now), None);
    }

    /// `wait` is about `expected` (the rate is a running mean: within 3 %).
    fn about(wait: Option<Duration>, expected: Duration) -> bool {
        wait.is_some_and(|w| w.as_secs_f64() > expected.as_secs_f64() * 0.97 && w <= expected.mul_f64(1.03))
    }

    #[test]
    fn a_busy_queue_whose_rate_fills_the_window_waits_it_out() {
        let start = Instant::now();
        // 2,500 items a second one by one: 2.5 per millisecond window (and five more
        // would take 2 ms: the window is the most it waits).
        let mut pace = Pace::new(MS);
        let wait = steady(&mut pace, start, Duration::from_micros(400), Duration::from_micros(100), 1, 2_000);
        assert!((pace.rate() - 2_500.0).abs() < 50.0, "rate {}", pace.rate());
        assert!(about(wait, MS), "{wait:?}");
        // Batches of five every 2 ms: the same rate counted per batch.
        let mut pace = Pace::new(MS);
        let wait = steady(&mut pace, start, 2 * MS, Duration::ZERO, 5, 500);
        assert!((pace.rate() - 2_500.0).abs() < 50.0, "rate {}", pace.rate());
        assert!(about(wait, MS), "{wait:?}");
    }

    #[test]
    fn a_long_window_is_waited_only_as_long_as_the_rate_takes_to_bring_five_more() {
        let start = Instant::now();
        let window = 5 * MS;
        // 2,500 a second: five more items take 2 ms, not the window's five.
        let mut pace = Pace::new(window);
        let wait = steady(&mut pace, start, Duration::from_micros(400), Duration::from_micros(100), 1, 2_000);
        assert!(about(wait, 2 * MS), "{wait:?}");
        // 2,000 a second: two and a half milliseconds.
        let mut pace = Pace::new(window);
        let wait = steady(&mut pace, start, Duration::from_micros(500), Duration::from_micros(100), 1, 2_000);
        assert!(about(wait, Duration::from_micros(2_500)), "{wait:?}");
        // 600 a second (a Halli Galli node's queue): five more would take 8.3 ms, so the
        // whole window, which still brings more than two.
        let mut pace = Pace::new(window);
        let wait = steady(&mut pace, start, Duration::from_micros(1_667), Duration::from_micros(100), 1, 600);
        assert_eq!(wait, Some(window));
        // 350 a second: the window would bring fewer than two; no wait at all.
        let mut pace = Pace::new(window);
        let wait = steady(&mut pace, start, Duration::from_micros(2_857), Duration::from_micros(100), 1, 400);
        assert_eq!(wait, None);
    }

    #[test]
    fn a_queue_whose_rate_would_not_fill_the_window_never_waits() {
        let start = Instant::now();
        // 500 a second: half an item per window.
        let mut pace = Pace::new(MS);
        assert_eq!(steady(&mut pace, start, 2 * MS, Duration::from_micros(100), 1, 500), None);
        assert!(pace.rate() < 600.0, "rate {}", pace.rate());
        // 1,500 a second: busy, but the window would not even double the batch.
        let mut pace = Pace::new(MS);
        assert_eq!(steady(&mut pace, start, Duration::from_micros(667), Duration::from_micros(100), 1, 1_500), None);
        // The same rate fills a 2 ms window (five more would take 3.3 ms: all of it).
        let mut pace = Pace::new(2 * MS);
        let wait = steady(&mut pace, start, Duration::from_micros(667), Duration::from_micros(100), 1, 1_500);
        assert_eq!(wait, Some(2 * MS));
    }

    #[test]
    fn an_item_after_a_quiet_spell_goes_at_once_and_the_old_rate_is_forgotten() {
        let start = Instant::now();
        let mut pace = Pace::new(MS);
        // 10,000 a second: five more take half a millisecond.
        let wait = steady(&mut pace, start, Duration::from_micros(100), Duration::ZERO, 1, 2_000);
        assert!(about(wait, Duration::from_micros(500)), "{wait:?}");
        // The queue was free for 3 ms before this item: not busy, whatever the rate says.
        let later = start + Duration::from_millis(203);
        pace.done(later - 3 * MS);
        assert_eq!(pace.wait(later), None);
        pace.cut(1);
        // A second of silence: the cycle that ended with it is nearly all of the rate.
        let much_later = later + Duration::from_secs(1);
        pace.done(much_later);
        assert_eq!(pace.wait(much_later), None);
        assert!(pace.rate() < 2.0, "rate {}", pace.rate());
    }

    /// A pace that has seen 200 items a second, one by one, up to now and is busy: it
    /// waits about 25 ms (five more at that rate) of a 50 ms window.
    fn a_queue_at_200_a_second() -> Pace {
        let mut pace = Pace::new(50 * MS);
        let start = Instant::now() - Duration::from_secs(4);
        steady(&mut pace, start, 5 * MS, Duration::from_micros(100), 1, 800);
        pace
    }

    /// What [`gather`] took while it waited, in order, counting each item once.
    async fn taken(pace: &mut Pace, rx: &mut mpsc::UnboundedReceiver<u32>, max: usize, may_wait: bool) -> Vec<u32> {
        let mut early = Vec::new();
        gather(pace, rx, max, may_wait, |item| {
            early.push(item);
            if early.len() + 1 >= max {
                usize::MAX
            } else {
                early.len()
            }
        })
        .await;
        early
    }

    /// A queue that gets `items`, one a millisecond, and whose sender then stays open for
    /// `open` more.
    fn one_a_millisecond(items: impl IntoIterator<Item = u32>, open: Duration) -> mpsc::UnboundedReceiver<u32> {
        let (tx, rx) = mpsc::unbounded_channel();
        let items: Vec<u32> = items.into_iter().collect();
        tokio::spawn(async move {
            for i in items {
                tokio::time::sleep(MS).await;
                let _ = tx.send(i);
            }
            tokio::time::sleep(open).await;
        });
        rx
    }

    #[tokio::test(start_paused = true)]
    async fn a_counted_wait_ends_when_the_items_it_waits_for_have_come() {
        let mut pace = a_queue_at_200_a_second();
        // Now they come every millisecond: the five it waits for are there after 5 ms,
        // long before its 25 ms timer.
        let mut rx = one_a_millisecond(1..=8, Duration::ZERO);
        let start = tokio::time::Instant::now();
        let early = taken(&mut pace, &mut rx, 256, true).await;
        let waited = start.elapsed();
        assert_eq!(early, [1, 2, 3, 4, 5], "the items it waited for, in order");
        assert!(waited >= 5 * MS && waited < 7 * MS, "waited {waited:?}, not out to the timer");
        // What came after stays queued, in order.
        assert_eq!(rx.recv().await, Some(6));
    }

    #[tokio::test(start_paused = true)]
    async fn a_counted_wait_whose_items_do_not_come_ends_at_its_timer_with_what_came() {
        let mut pace = a_queue_at_200_a_second();
        // The sender stays open after its two: the queue is quiet, not closed.
        let mut rx = one_a_millisecond(1..=2, Duration::from_secs(1));
        let start = tokio::time::Instant::now();
        let early = taken(&mut pace, &mut rx, 256, true).await;
        let waited = start.elapsed();
        assert_eq!(early, [1, 2]);
        // Its timer: five more at the queue's rate, ~25 ms (the rate also took in the
        // moment between the last cycle and this one, so a little less).
        assert!(waited >= 20 * MS && waited < 27 * MS, "waited {waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_counted_wait_on_a_quiet_queue_or_a_full_batch_takes_nothing_early() {
        // A queue that has seen nothing does not wait.
        let mut pace = Pace::new(50 * MS);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        let early = taken(&mut pace, &mut rx, 256, true).await;
        assert!(early.is_empty() && start.elapsed() < MS);
        // A busy one whose queue already holds a full batch goes at once.
        let mut pace = a_queue_at_200_a_second();
        for i in 0..4u32 {
            let _ = tx.send(i);
        }
        let early = taken(&mut pace, &mut rx, 5, true).await;
        assert!(early.is_empty() && start.elapsed() < MS);
        assert_eq!(rx.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_counted_wait_counts_what_its_caller_counts() {
        let mut pace = a_queue_at_200_a_second();
        // Each value comes twice (an update two sessions see, in an outbox): the caller
        // counts values, so the wait ends when the fifth value has come, at 9 ms.
        let mut rx = one_a_millisecond([1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6], Duration::ZERO);
        let start = tokio::time::Instant::now();
        let mut early: Vec<u32> = Vec::new();
        gather(&mut pace, &mut rx, 256, true, |item| {
            early.push(item);
            let mut values = early.clone();
            values.dedup();
            values.len()
        })
        .await;
        let waited = start.elapsed();
        assert_eq!(early, [1, 1, 2, 2, 3, 3, 4, 4, 5]);
        assert!(waited >= 9 * MS && waited < 11 * MS, "waited {waited:?}");
        assert_eq!(rx.recv().await, Some(5), "the rest stays queued, in order");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_with_no_round_trip_to_save_waits_only_for_its_tick() {
        // A busy queue whose batch may not wait (an outbox on a peer link) takes nothing
        // that comes after its tick, however busy it is.
        let mut pace = a_queue_at_200_a_second();
        let before = pace.rate();
        let mut rx = one_a_millisecond(1..=8, Duration::ZERO);
        let start = tokio::time::Instant::now();
        let early = taken(&mut pace, &mut rx, 256, false).await;
        assert!(early.is_empty() && start.elapsed() < MS, "took {early:?} in {:?}", start.elapsed());
        assert_ne!(pace.rate(), before, "its rate is still kept");
        assert_eq!(rx.recv().await, Some(1));
    }

    #[test]
    fn a_zero_window_never_waits() {
        let start = Instant::now();
        let mut pace = Pace::new(Duration::ZERO);
        assert_eq!(steady(&mut pace, start, Duration::from_micros(10), Duration::ZERO, 8, 1_000), None);
        assert!(pace.rate() > 100_000.0, "it still measures: {}", pace.rate());
    }
}
