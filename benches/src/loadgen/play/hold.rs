//! [`Hold`]: the clients of a run stay connected until the last of them has drained.
//! Apart from the client because it is the run's, not one client's: every client joins
//! it and the last one done releases the others.

use std::sync::Arc;
use tokio::sync::watch;

/// Keeps the clients of a run connected until the last of them has drained, so the
/// answers to actions still in flight when the window closes are not timed against a
/// server busy closing every other socket of the run at once (the teardown is not the
/// load being measured: it put 150–290 ms answers at the top of Halli Galli's latency).
/// A client stopped during the window (socket stages) or whose socket failed leaves at
/// once; one that reached the end of the window waits for the others, at most [`DRAIN`]
/// more, reading (and dropping) what the server still sends.
pub struct Hold {
    /// Clients started and not yet done with their window and drain.
    playing: std::sync::atomic::AtomicUsize,
    all_done: watch::Sender<bool>,
}

impl Hold {
    pub fn new() -> Arc<Hold> {
        Arc::new(Hold { playing: std::sync::atomic::AtomicUsize::new(0), all_done: watch::Sender::new(false) })
    }

    /// A client starts playing.
    pub(super) fn join(&self) {
        if self.playing.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            self.all_done.send_replace(false);
        }
    }

    /// A client is done with its window and drain; the last one releases the others.
    pub(super) fn done(&self) {
        if self.playing.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.all_done.send_replace(true);
        }
    }

    pub(super) fn released(&self) -> watch::Receiver<bool> {
        self.all_done.subscribe()
    }
}
