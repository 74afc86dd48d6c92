//! A session's timing: its one periodic timer (heartbeat, route checks, token expiry,
//! [`Ticks`], driven by a task of its own, [`tick_every`]) and which RTT estimates go to
//! its rooms ([`RttSent`]). Apart from the session actor: none of it reads the socket.

use actix::prelude::*;
use std::time::Duration;

/// An RTT estimate within [`RTT_SAME_MS`] or a tenth of the one last sent (an EMA's
/// jitter: below what latency compensation or a shown RTT can tell apart) counts as
/// unchanged. An unchanged estimate is sent to the rooms again only
/// every this many pongs (every 10 s at the default 2 s heartbeat): a room takes a
/// sample only from a seated player, so one who sat down later still gets theirs, and
/// 18,000 idle sockets do not cost 9,000 room messages a second.
pub(super) const RTT_RESEND_EVERY: u32 = 5;
pub(super) const RTT_SAME_MS: u32 = 2;
/// How often a session checks its routes to rooms (cluster mode): a safety net. A room
/// whose holder changes is announced to the node's sessions by the node's route board
/// (`Notice::Moved`), and a route a room dropped is looked up again after
/// `session_rooms::ROUTE_RETRY`; this catches anything else (an actor here that stopped unannounced).
/// It keeps the board reading the rooms asked about (`routes::KEEP` is longer).
pub(super) const ROUTE_RECHECK: Duration = Duration::from_secs(2);
/// A session's one periodic timer. actix polls every timer an actor runs on each of its
/// wakes (every frame it sends or receives), so the heartbeat, the route checks and the
/// token's expiry share one, as long as the longest whole number of seconds both
/// cadences are multiples of: the heartbeat runs every `heartbeat_every`th tick, the
/// route check (cluster mode) every `routes_every`th (0: never). The tick itself runs on
/// a task of its own that messages the session ([`Tick`], [`tick_every`]), so a wake of
/// the session for a frame polls no timer at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ticks {
    pub(super) tick: Duration,
    heartbeat_every: u64,
    routes_every: u64,
}

impl Ticks {
    pub(super) fn new(heartbeat_s: u64, cluster: bool) -> Ticks {
        let heartbeat = heartbeat_s.max(1);
        let recheck = ROUTE_RECHECK.as_secs();
        let (tick, heartbeat_every, routes_every) = if !cluster {
            (heartbeat, 1, 0)
        } else if heartbeat <= recheck {
            (heartbeat, 1, 1)
        } else if heartbeat.is_multiple_of(recheck) {
            (recheck, heartbeat / recheck, 1)
        } else {
            (1, heartbeat, recheck)
        };
        Ticks { tick: Duration::from_secs(tick), heartbeat_every, routes_every }
    }

    /// Whether tick number `n` (from 1) is a heartbeat.
    pub(super) fn heartbeat(&self, n: u64) -> bool {
        n.is_multiple_of(self.heartbeat_every)
    }

    /// Whether tick number `n` (from 1) checks the routes.
    pub(super) fn routes(&self, n: u64) -> bool {
        self.routes_every > 0 && n.is_multiple_of(self.routes_every)
    }
}

/// The RTT (ms) last sent to the rooms and the pongs since: a changed estimate goes at
/// once, an unchanged one (see [`RTT_SAME_MS`]) every [`RTT_RESEND_EVERY`] pongs.
#[derive(Debug, Default)]
pub(super) struct RttSent(Option<(u32, u32)>);

impl RttSent {
    /// `true` if `rtt_ms` is to be sent now.
    pub(super) fn due(&mut self, rtt_ms: u32) -> bool {
        match &mut self.0 {
            Some((sent, pongs))
                if sent.abs_diff(rtt_ms) <= RTT_SAME_MS.max(*sent / 10) && *pongs + 1 < RTT_RESEND_EVERY =>
            {
                *pongs += 1;
                false
            }
            _ => {
                self.0 = Some((rtt_ms, 0));
                true
            }
        }
    }
}

/// One tick of a session's timer (see [`Ticks`]).
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Tick(pub(super) Ticks);

/// Sends `session` a [`Tick`] every `ticks.tick` until it is gone. A task of its own, not
/// an interval of the actor's context: actix polls every item of a context on each of its
/// wakes, and a socket wakes for every frame it sends or receives.
pub(super) async fn tick_every<A>(session: actix::WeakAddr<A>, ticks: Ticks)
where
    A: Actor + Handler<Tick>,
    A::Context: actix::dev::ToEnvelope<A, Tick>,
{
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + ticks.tick, ticks.tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        // `upgrade` is `None` once the session stopped (its mailbox disconnected).
        match session.upgrade() {
            // Past the mailbox's bound: a tick is never dropped for a busy socket.
            Some(addr) => addr.do_send(Tick(ticks)),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn an_rtt_goes_to_the_rooms_when_it_changes_and_unchanged_every_few_pongs() {
        let mut sent = RttSent::default();
        assert!(sent.due(3), "the first estimate goes at once");
        let unchanged: Vec<bool> = (0..2 * RTT_RESEND_EVERY).map(|_| sent.due(3)).collect();
        let resent = unchanged.iter().filter(|due| **due).count();
        assert_eq!(resent, 2, "an unchanged estimate goes once per {RTT_RESEND_EVERY} pongs: {unchanged:?}");
        assert!(!unchanged[0], "not on the very next pong");
        assert!(!sent.due(5), "2 ms or less is the same");
        assert!(sent.due(6), "a changed estimate goes at once");
        assert!(!sent.due(6));
        assert!(sent.due(3), "and so does a change back");
        assert!(sent.due(300));
        assert!(!sent.due(329), "within a tenth is the same");
        assert!(sent.due(331));
    }

    /// Counts its ticks and stops after the second.
    struct Ticked(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl Actor for Ticked {
        type Context = Context<Self>;
    }

    impl Handler<Tick> for Ticked {
        type Result = ();
        fn handle(&mut self, _: Tick, ctx: &mut Context<Self>) {
            if self.0.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                ctx.stop();
            }
        }
    }

    #[actix::test]
    async fn the_tick_task_messages_its_session_each_tick_and_ends_with_it() {
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let ticks = Ticks { tick: Duration::from_millis(20), heartbeat_every: 1, routes_every: 0 };
        let addr = Ticked(count.clone()).start();
        let task = actix::spawn(tick_every(addr.downgrade(), ticks));
        // Two ticks, the actor stops after the second (its address still held, as the
        // node's session table holds a socket's), and the task ends at the third instead
        // of ticking on.
        tokio::time::timeout(Duration::from_secs(10), task).await.expect("the tick task ends").unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert!(!addr.connected());
    }

    #[test]
    fn one_timer_runs_the_heartbeat_and_the_route_checks_each_on_its_own_cadence() {
        let secs = |ticks: &Ticks, on: fn(&Ticks, u64) -> bool| -> Vec<u64> {
            (1..=12).filter(|n| on(ticks, *n)).map(|n| n * ticks.tick.as_secs()).collect()
        };
        // A single node: the tick is the heartbeat, no route checks.
        let single = Ticks::new(2, false);
        assert_eq!(single, Ticks { tick: Duration::from_secs(2), heartbeat_every: 1, routes_every: 0 });
        assert!(secs(&single, Ticks::routes).is_empty());
        // A cluster node at the default heartbeat: one tick every 2 s, both on each.
        let cluster = Ticks::new(2, true);
        assert_eq!(cluster.tick, ROUTE_RECHECK);
        assert_eq!(secs(&cluster, Ticks::heartbeat), [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24]);
        assert_eq!(secs(&cluster, Ticks::routes), secs(&cluster, Ticks::heartbeat));
        // A heartbeat of a second or less: every tick is both.
        let fast = Ticks::new(1, true);
        assert_eq!((fast.tick, secs(&fast, Ticks::routes).len()), (Duration::from_secs(1), 12));
        assert_eq!(Ticks::new(0, false).tick, Duration::from_secs(1), "0 s reads as 1 s");
        // A heartbeat the route check's cadence does not divide: ticks of a second.
        let odd = Ticks::new(3, true);
        assert_eq!(odd.tick, Duration::from_secs(1));
        assert_eq!(secs(&odd, Ticks::heartbeat), [3, 6, 9, 12]);
        assert_eq!(secs(&odd, Ticks::routes), [2, 4, 6, 8, 10, 12]);
        // A long heartbeat keeps its cadence, the route checks theirs.
        let long = Ticks::new(30, true);
        assert_eq!((long.tick, long.heartbeat_every), (ROUTE_RECHECK, 15));
        assert!((1..15).all(|n| !long.heartbeat(n)) && long.heartbeat(15) && long.routes(1));
    }
}
