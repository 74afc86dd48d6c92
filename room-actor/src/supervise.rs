//! Supervised core tasks: a node's loops that must run as long as it does (its bus
//! receiver, heartbeats, lease checks, failover scans, …) are started through a
//! [`Supervisor`], which notices when one ends — a panic, a return, or its thread gone —
//! and starts it again after a back-off, or, for a task that cannot safely start again
//! (or one that keeps ending), marks the node not ready and ends the process so its
//! orchestrator starts a fresh one. A node never goes on half-alive.
//!
//! Why this is needed: actix-rt 2 runs every future spawned on an arbiter as a tokio task
//! of its own (`Arbiter::spawn` hands it to `tokio::task::spawn_local`). A panic in one is
//! caught at the task's boundary: the default hook prints it, the task is gone, and the
//! arbiter's thread and every other task on it go on as if nothing happened. Nobody reads
//! the join handle. That is how one malformed bus frame once left a node with no bus
//! subscription, still answering `/readyz` 200 (issue 55, finding 2). actix-server itself
//! restarts a worker whose accept loop died (`Worker {idx} has died; restarting`), on a
//! new thread, while the old arbiter keeps running what it had (rooms, the bus receiver);
//! a handler's panic ends only that connection's task. So only the node's own long-lived
//! tasks need watching, and this is what watches them.
//!
//! What is not here: a room actor that panics outside its game's `apply` (which already
//! runs inside `catch_unwind`) stops alone, as before; the node goes on. Outbox and append
//! queue tasks (one per destination or thread) are replaced by the next message sent
//! their way once their channel is closed, so they need no supervisor.

use crate::threads::RoomThreads;
use futures_util::FutureExt;
use prometheus::{IntCounterVec, Opts, Registry};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::{error, warn};

/// The first restart's back-off; each further end within [`RESTART_WINDOW`] doubles it
/// (the last before the budget is spent waits 1.6 s). Short, because a core task's
/// absence is felt at once (no heartbeat, no bus), and a task that fails again at once
/// spends its budget anyway.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// How many times a task may end within [`RESTART_WINDOW`] and still be started again.
/// One more, and it is treated as a task that cannot restart: something it needs is
/// broken for good (a poisoned lock, state that fails it every time), and a fresh process
/// is the one way back. Five ends in a minute is no passing fault.
pub const RESTART_BUDGET: usize = 5;
/// The window [`RESTART_BUDGET`] counts ends in.
pub const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// The process's exit code when a core task cannot run (`EX_SOFTWARE` of sysexits.h: an
/// internal software error), so an orchestrator tells it from a clean stop.
pub const EXIT_CODE: i32 = 70;
/// How long a node that is about to exit stays up, not ready, first: the time for its
/// log line to be written by the log thread, and for a readiness probe to see 503.
pub const EXIT_GRACE: Duration = Duration::from_secs(1);

/// What the supervisor does when a task ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// A loop that runs as long as the node, holding nothing a fresh start cannot rebuild
    /// (its state lives in the node, or is a timer): whichever way it ends it is started
    /// again after a back-off; past [`RESTART_BUDGET`] the node exits.
    Restart,
    /// A task that cannot safely start again, because it was midway through something a
    /// new start could not resume (a drain): a panic, or its thread gone, marks the node
    /// not ready and ends the process. A return is its normal end.
    ExitOnFailure,
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Its future completed (a loop that should never have).
    Returned,
    /// It panicked, with this message.
    Panicked(String),
    /// It was dropped before it completed: its thread stopped, or it could not be started
    /// there.
    Lost,
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Returned => write!(f, "returned"),
            Ended::Panicked(message) => write!(f, "panicked: {message}"),
            Ended::Lost => write!(f, "was lost with its thread"),
        }
    }
}

/// What to do about a task that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after this back-off.
    Restart { after: Duration },
    /// It cannot run: the node is not ready, and the process exits.
    Exit,
    /// It is done (an [`Policy::ExitOnFailure`] task that returned).
    Done,
}

/// When one task ended lately, for its restart budget.
#[derive(Debug, Default)]
pub struct History {
    ends: VecDeque<Instant>,
}

/// What to do about a task under `policy` that just `ended` at `now`, given its
/// `history` (which this updates). Pure, so every path is tested without a process to
/// end.
pub fn decide(policy: Policy, ended: &Ended, history: &mut History, now: Instant) -> Decision {
    match policy {
        Policy::ExitOnFailure => match ended {
            Ended::Returned => Decision::Done,
            Ended::Panicked(_) | Ended::Lost => Decision::Exit,
        },
        Policy::Restart => {
            while history.ends.front().is_some_and(|at| now.saturating_duration_since(*at) >= RESTART_WINDOW) {
                history.ends.pop_front();
            }
            history.ends.push_back(now);
            let recent = history.ends.len();
            if recent > RESTART_BUDGET {
                return Decision::Exit;
            }
            // At most `RESTART_BUDGET - 1` doublings.
            let doublings = u32::try_from(recent - 1).unwrap_or(u32::MAX).min(16);
            Decision::Restart { after: FIRST_BACKOFF.saturating_mul(1 << doublings) }
        }
    }
}

/// A core task that is not running right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Down {
    /// It ended and waits out its back-off before it starts again.
    Restarting,
    /// It cannot run; the process is exiting.
    Gone,
}

/// What ends the process when a core task cannot run (`std::process::exit` in the
/// binary; a recorder in tests).
pub type ExitHook = Box<dyn Fn(&'static str, &Ended) + Send + Sync>;

/// Starts a node's core tasks and watches them (see the module doc).
pub struct Supervisor {
    /// `roomd_task_restarts_total{task}`.
    restarts: IntCounterVec,
    /// The core tasks not running right now, for readiness.
    down: Mutex<BTreeMap<&'static str, Down>>,
    /// Set once the node is stopping: tasks that end then are left ended.
    stopping: AtomicBool,
    exit: ExitHook,
    exit_grace: Duration,
}

impl Supervisor {
    /// A supervisor whose `exit` ends the process (called once a core task cannot run,
    /// after [`EXIT_GRACE`]).
    pub fn new(exit: impl Fn(&'static str, &Ended) + Send + Sync + 'static) -> Result<Supervisor, prometheus::Error> {
        Ok(Supervisor {
            restarts: IntCounterVec::new(
                Opts::new("roomd_task_restarts_total", "core tasks started again after they ended, by task"),
                &["task"],
            )?,
            down: Mutex::default(),
            stopping: AtomicBool::new(false),
            exit: Box::new(exit),
            exit_grace: EXIT_GRACE,
        })
    }

    /// The same with another grace before `exit` (tests).
    pub fn with_exit_grace(mut self, grace: Duration) -> Supervisor {
        self.exit_grace = grace;
        self
    }

    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.restarts.clone()))
    }

    /// The node is stopping (its drain is over): a task that ends from now on is not
    /// started again, and a worker thread stopped by the server's shutdown ends nothing.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// A core task that is not running (one that cannot run first), for readiness.
    pub fn down(&self) -> Option<(&'static str, Down)> {
        let down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        down.iter().find(|(_, d)| **d == Down::Gone).or_else(|| down.iter().next()).map(|(task, d)| (*task, *d))
    }

    /// How often `task` was started again.
    pub fn restarts(&self, task: &str) -> u64 {
        self.restarts.with_label_values(&[task]).get()
    }

    /// Counts a task that went on past a panic of its own (it caught it, so it did not
    /// end): as a restart, so one metric tells operators every core task that failed.
    pub fn count_contained(&self, task: &'static str) {
        self.restarts.with_label_values(&[task]).inc();
    }

    /// Makes `task`'s restart count exist, at zero, before its first restart (so it is
    /// scraped, and an increase over it starts from there). Supervised tasks are declared
    /// when they start.
    pub fn declare(&self, task: &'static str) {
        self.restarts.with_label_values(&[task]);
    }

    fn mark(&self, task: &'static str, state: Option<Down>) {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        match state {
            Some(state) => down.insert(task, state),
            None => down.remove(task),
        };
    }

    /// Runs `task` (each start a new future from `make`) on the current thread (an actix
    /// arbiter), supervised under `policy`.
    pub fn spawn<F, Fut>(self: &Arc<Self>, task: &'static str, policy: Policy, make: F)
    where
        F: Fn() -> Fut + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let make = std::rc::Rc::new(make);
        self.supervise(task, policy, move |report| {
            let make = make.clone();
            actix::spawn(watched(move || make(), report));
            Box::pin(std::future::ready(()))
        });
    }

    /// Runs `task` on the first of `threads` that still runs (each start looks again, so
    /// a task whose worker stopped starts on another), supervised from the current thread
    /// under `policy`. The future is made on the worker, so it need not be `Send`.
    pub fn spawn_on_worker<F, Fut>(
        self: &Arc<Self>,
        task: &'static str,
        policy: Policy,
        threads: Arc<RoomThreads>,
        make: F,
    ) where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let make = Arc::new(make);
        self.supervise(task, policy, move |report| {
            let (make, threads) = (make.clone(), threads.clone());
            Box::pin(async move {
                if let Some(worker) = threads.first().await {
                    // Not started (the worker stopped meanwhile): the report is dropped
                    // with the closure, and the task counts as lost.
                    worker.spawn_fn(move || {
                        actix::spawn(watched(move || make(), report));
                    });
                }
            })
        });
    }

    /// The supervising loop: `start` starts the task once, handing it the report it sends
    /// its end through.
    fn supervise<S>(self: &Arc<Self>, task: &'static str, policy: Policy, start: S)
    where
        S: Fn(Report) -> Pin<Box<dyn Future<Output = ()>>> + 'static,
    {
        self.declare(task);
        let supervisor = self.clone();
        actix::spawn(async move {
            let mut history = History::default();
            loop {
                let (tx, ended) = oneshot::channel();
                start(Report(Some(tx))).await;
                let ended = ended.await.unwrap_or(Ended::Lost);
                if supervisor.stopping() {
                    return;
                }
                match decide(policy, &ended, &mut history, Instant::now()) {
                    Decision::Done => return,
                    Decision::Restart { after } => {
                        warn!(task, ended = %ended, after = ?after, "a core task ended; it starts again after a back-off");
                        supervisor.restarts.with_label_values(&[task]).inc();
                        supervisor.mark(task, Some(Down::Restarting));
                        tokio::time::sleep(after).await;
                        if supervisor.stopping() {
                            return;
                        }
                        supervisor.mark(task, None);
                    }
                    Decision::Exit => {
                        supervisor.mark(task, Some(Down::Gone));
                        error!(
                            task,
                            ended = %ended,
                            code = EXIT_CODE,
                            "a core task ended and cannot be started again (or ended too often): the node is not \
                             ready and the process exits, so its orchestrator starts a fresh one"
                        );
                        tokio::time::sleep(supervisor.exit_grace).await;
                        (supervisor.exit)(task, &ended);
                        return;
                    }
                }
            }
        });
    }
}

/// Where a started task reports how it ended; dropped unsent (the task's future dropped
/// with its thread, or never started), it reports [`Ended::Lost`].
pub struct Report(Option<oneshot::Sender<Ended>>);

impl Report {
    fn send(mut self, ended: Ended) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(ended);
        }
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Ended::Lost);
        }
    }
}

/// Runs the future `start` makes (made inside, so a panic while making it counts too),
/// catching a panic, and reports how it ended.
async fn watched<S, Fut>(start: S, report: Report)
where
    S: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    // Unwind safety: whatever the task shared with others and left half-changed is the
    // restarted task's to cope with (a poisoned lock it cannot get past uses its budget up).
    let ended = match AssertUnwindSafe(async move { start().await }).catch_unwind().await {
        Ok(()) => Ended::Returned,
        Err(payload) => Ended::Panicked(panic_message(payload.as_ref())),
    };
    report.send(ended);
}

/// A panic's message (`panic!` with a literal or a formatted one), or a placeholder.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// A spawned task that is aborted when this is dropped (its owner ended, or gave it up),
/// and that can be awaited for its end.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Future for AbortOnDrop {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(drop)
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn check(policy: Policy, ends: &[(u64, Ended)], expected: &[Decision]) {
        let base = Instant::now();
        let mut history = History::default();
        let got: Vec<Decision> = ends
            .iter()
            .map(|(secs, ended)| decide(policy, ended, &mut history, base + Duration::from_secs(*secs)))
            .collect();
        assert_eq!(got, expected);
    }

    fn after(ms: u64) -> Decision {
        Decision::Restart { after: Duration::from_millis(ms) }
    }

    #[test]
    fn a_loop_that_ends_is_restarted_with_a_growing_back_off_until_its_budget_is_spent() {
        let panicked = || Ended::Panicked("boom".into());
        check(
            Policy::Restart,
            &[
                (0, panicked()),
                (1, Ended::Returned),
                (2, Ended::Lost),
                (3, panicked()),
                (4, panicked()),
                (5, panicked()),
            ],
            &[after(100), after(200), after(400), after(800), after(1600), Decision::Exit],
        );
    }

    #[test]
    fn ends_older_than_the_window_are_forgotten() {
        let panicked = || Ended::Panicked("boom".into());
        let window = RESTART_WINDOW.as_secs();
        // One end a window apart: always the first back-off, never the budget.
        let ends: Vec<(u64, Ended)> = (0..10).map(|i| (i * window, panicked())).collect();
        check(Policy::Restart, &ends, &[after(100); 10]);
        // Five within the window, then one after the first has aged out: still within budget.
        let mut ends: Vec<(u64, Ended)> = (0..5).map(|i| (i, panicked())).collect();
        ends.push((window, panicked()));
        let mut expected = vec![after(100), after(200), after(400), after(800), after(1600)];
        expected.push(after(1600));
        check(Policy::Restart, &ends, &expected);
    }

    #[test]
    fn a_task_that_must_not_restart_ends_the_process_unless_it_finished() {
        check(Policy::ExitOnFailure, &[(0, Ended::Panicked("boom".into()))], &[Decision::Exit]);
        check(Policy::ExitOnFailure, &[(0, Ended::Lost)], &[Decision::Exit]);
        check(Policy::ExitOnFailure, &[(0, Ended::Returned)], &[Decision::Done]);
    }

    /// The exits a recording supervisor was asked for.
    type Exits = Arc<Mutex<Vec<(&'static str, Ended)>>>;

    /// A supervisor whose exit hook records instead of exiting.
    fn recording() -> (Arc<Supervisor>, Exits) {
        let exits: Exits = Arc::default();
        let recorded = exits.clone();
        let supervisor = Supervisor::new(move |task, ended| recorded.lock().unwrap().push((task, ended.clone())))
            .unwrap()
            .with_exit_grace(Duration::ZERO);
        (Arc::new(supervisor), exits)
    }

    /// Waits (in real time: the back-offs are short) until `done` holds.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[actix::test]
    async fn a_task_that_panics_is_restarted_and_counted() {
        let (supervisor, exits) = recording();
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        supervisor.spawn("looping", Policy::Restart, move || {
            let start = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if start == 0 {
                    panic!("the first run dies");
                }
                std::future::pending::<()>().await;
            }
        });
        until("started again", || starts.load(Ordering::SeqCst) == 2).await;
        assert_eq!(supervisor.restarts("looping"), 1);
        assert_eq!(supervisor.down(), None, "running again");
        assert!(exits.lock().unwrap().is_empty());
    }

    #[actix::test]
    async fn a_task_down_for_its_back_off_makes_the_node_not_ready_meanwhile() {
        let (supervisor, _) = recording();
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        supervisor.spawn("looping", Policy::Restart, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { panic!("dies every time") }
        });
        until("down", || supervisor.down().is_some()).await;
        assert_eq!(supervisor.down(), Some(("looping", Down::Restarting)));
    }

    #[actix::test]
    async fn a_task_that_keeps_ending_ends_the_process_once_its_budget_is_spent() {
        let (supervisor, exits) = recording();
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        // Returns at once every time: 0.1 + 0.2 + 0.4 + 0.8 + 1.6 s of back-offs.
        supervisor.spawn("returning", Policy::Restart, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async {}
        });
        until("given up", || !exits.lock().unwrap().is_empty()).await;
        assert_eq!(starts.load(Ordering::SeqCst), RESTART_BUDGET + 1);
        assert_eq!(supervisor.restarts("returning"), RESTART_BUDGET as u64);
        assert_eq!(*exits.lock().unwrap(), [("returning", Ended::Returned)]);
        assert_eq!(supervisor.down(), Some(("returning", Down::Gone)));
    }

    #[actix::test]
    async fn a_task_that_must_not_restart_marks_the_node_gone_and_exits() {
        let (supervisor, exits) = recording();
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        supervisor.spawn("draining", Policy::ExitOnFailure, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { panic!("the drain died") }
        });
        until("exited", || !exits.lock().unwrap().is_empty()).await;
        assert_eq!(*exits.lock().unwrap(), [("draining", Ended::Panicked("the drain died".into()))]);
        assert_eq!(supervisor.down(), Some(("draining", Down::Gone)));
        assert_eq!(starts.load(Ordering::SeqCst), 1, "never started again");
        assert_eq!(supervisor.restarts("draining"), 0);
        // One that finishes is simply done.
        let (supervisor, exits) = recording();
        supervisor.spawn("drained", Policy::ExitOnFailure, || async {});
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(exits.lock().unwrap().is_empty());
        assert_eq!(supervisor.down(), None);
    }

    #[actix::test]
    async fn a_task_on_a_worker_is_restarted_there_and_on_another_when_its_worker_stops() {
        let (supervisor, exits) = recording();
        let threads = Arc::new(RoomThreads::new());
        let workers = [actix::Arbiter::new(), actix::Arbiter::new()];
        for worker in &workers {
            let (registered, done) = oneshot::channel();
            let threads = threads.clone();
            worker.spawn_fn(move || {
                threads.register_current();
                let _ = registered.send(());
            });
            done.await.unwrap();
        }
        let (ran_tx, mut ran) = tokio::sync::mpsc::unbounded_channel();
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        supervisor.spawn_on_worker("receiver", Policy::Restart, threads, move || {
            let start = counted.fetch_add(1, Ordering::SeqCst);
            let _ = ran_tx.send(std::thread::current().id());
            async move {
                if start == 0 {
                    panic!("the first run dies");
                }
                std::future::pending::<()>().await;
            }
        });
        let first = ran.recv().await.unwrap();
        let again = ran.recv().await.unwrap();
        assert_ne!(first, std::thread::current().id(), "runs on a worker, not the supervisor's thread");
        assert_eq!(again, first, "restarted on the first worker");
        // The first worker stops: the task, lost with it, starts on the other.
        workers[0].stop();
        let moved = ran.recv().await.unwrap();
        assert_ne!(moved, first);
        assert_eq!(supervisor.restarts("receiver"), 2);
        assert!(exits.lock().unwrap().is_empty());
        workers[1].stop();
    }

    #[actix::test]
    async fn a_stopping_node_restarts_nothing() {
        let (supervisor, exits) = recording();
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        supervisor.stop();
        supervisor.spawn("looping", Policy::Restart, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async {}
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        assert_eq!(supervisor.restarts("looping"), 0);
        assert!(exits.lock().unwrap().is_empty());
    }
}
