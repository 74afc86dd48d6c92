//! The threads a node's rooms and sockets run on: the HTTP server's workers, each an actix
//! arbiter. The gateway registers every worker as it starts; a cluster node then runs
//! its bus receiver there, so a frame from another node reaches the rooms and sockets
//! it is for without a hop through the node's main thread (`ClusterNode::run`).

use actix::ArbiterHandle;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;
use tokio::sync::watch;

/// The node's worker threads, in the order they registered.
pub struct RoomThreads {
    arbiters: Mutex<Vec<(ThreadId, ArbiterHandle)>>,
    count: watch::Sender<usize>,
    /// The next worker [`RoomThreads::elsewhere`] hands out.
    next: AtomicUsize,
}

impl Default for RoomThreads {
    fn default() -> RoomThreads {
        RoomThreads { arbiters: Mutex::default(), count: watch::Sender::new(0), next: AtomicUsize::new(0) }
    }
}

impl RoomThreads {
    pub fn new() -> RoomThreads {
        RoomThreads::default()
    }

    /// Registers the calling thread's arbiter (call it on a worker, inside its actix
    /// runtime); a thread registers once, whatever how often it asks.
    pub fn register_current(&self) {
        let thread = std::thread::current().id();
        let Ok(mut arbiters) = self.arbiters.lock() else { return };
        if arbiters.iter().any(|(t, _)| *t == thread) {
            return;
        }
        arbiters.push((thread, actix::Arbiter::current()));
        let n = arbiters.len();
        self.count.send_replace(n);
    }

    /// The first worker to register that still runs, once one has (a worker's arbiter
    /// can stop while the node goes on: the task that ran there starts on the next).
    pub async fn first(&self) -> Option<ArbiterHandle> {
        let mut count = self.count.subscribe();
        count.wait_for(|n| *n > 0).await.ok()?;
        self.arbiters.lock().ok()?.iter().map(|(_, a)| a).find(|a| a.alive()).cloned()
    }

    /// A worker for something started by a thread that is not one (the node's own tasks:
    /// failover scans, a drain's takeover), the workers in turn; `None` when the caller
    /// is a worker (start it there) or none has registered.
    pub fn elsewhere(&self) -> Option<ArbiterHandle> {
        let thread = std::thread::current().id();
        let arbiters = self.arbiters.lock().ok()?;
        if arbiters.is_empty() || arbiters.iter().any(|(t, _)| *t == thread) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % arbiters.len();
        arbiters.get(i).map(|(_, a)| a.clone())
    }

    /// How many workers registered.
    pub fn len(&self) -> usize {
        self.arbiters.lock().map(|a| a.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[actix::test]
    async fn a_worker_registers_once_and_the_first_is_handed_out() {
        let threads = Arc::new(RoomThreads::new());
        let waiting = {
            let threads = threads.clone();
            tokio::spawn(async move { threads.first().await.is_some() })
        };
        let worker = actix::Arbiter::new();
        let on_worker = threads.clone();
        let (done, registered) = tokio::sync::oneshot::channel();
        worker.spawn_fn(move || {
            on_worker.register_current();
            on_worker.register_current();
            let _ = done.send(());
        });
        registered.await.unwrap();
        assert_eq!(threads.len(), 1);
        assert!(waiting.await.unwrap());
        // A task spawned on the handed-out arbiter runs on the worker's thread.
        let (tx, rx) = tokio::sync::oneshot::channel();
        threads.first().await.unwrap().spawn_fn(move || {
            let _ = tx.send(std::thread::current().id());
        });
        assert_ne!(rx.await.unwrap(), std::thread::current().id());
        // Off the workers, work is sent to one; on a worker it stays there.
        assert!(threads.elsewhere().is_some());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let on_worker = threads.clone();
        worker.spawn_fn(move || {
            let _ = tx.send(on_worker.elsewhere().is_none());
        });
        assert!(rx.await.unwrap(), "a worker keeps what it starts");
        worker.stop();
    }
}
