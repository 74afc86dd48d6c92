//! A stalled room: an append whose outcome is unknown (the store timed out or dropped
//! the connection after it was sent), or a log found ahead of the room. The room answers
//! `room_unavailable` meanwhile and resolves the stall by itself: the same entry is sent
//! again, read back, or the room catches up from its log.

use super::{last_logged_rtt, Origin, Phase, RoomActor};
use crate::error::StoreError;
use crate::log::{LogEntry, StoredGame};
use crate::rebuild::{rebuild, From, Rebuilt};
use actix::prelude::*;
use engine::{Applied, Game, Rng};
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// First and longest wait between attempts to resolve a stalled room.
pub(super) const RESOLVE_FIRST: Duration = Duration::from_millis(100);
pub(super) const RESOLVE_MAX: Duration = Duration::from_secs(2);

/// An input whose append has no known outcome yet (the store timed out or dropped the
/// connection after it was sent, or the log was found ahead of the room).
pub(super) struct Pending<G: Game> {
    pub(super) entry: LogEntry,
    pub(super) applied: Applied<G::State, G::Event>,
    pub(super) rng: Rng,
    pub(super) origin: Origin,
}

/// Why a room takes no input right now: it waits for the store to tell it where its log
/// stands. It answers `room_unavailable` meanwhile and resumes by itself.
pub(super) enum Stall<G: Game> {
    /// Resolve this append: the same entry is sent again (the script only stores seq
    /// `last + 1`, so it can never be stored twice) and, if the log already has that seq,
    /// the entry there is read back and compared with ours.
    Append(Box<Pending<G>>),
    /// The log is ahead of the room: rebuild from it.
    CatchUp,
}

impl<G: Game> RoomActor<G> {
    /// The room cannot know where its log stands: it answers `room_unavailable` (the
    /// client resends the same `cs`: deduplicated if its input turns out stored) and
    /// resolves the stall by itself, retrying with a bounded backoff.
    pub(super) fn stalled(&mut self, ctx: &mut Context<Self>, stall: Stall<G>, e: &StoreError) {
        self.deps.metrics.store_unknown_outcomes.inc();
        if self.pipeline.stalled_since.is_none() {
            self.pipeline.stalled_since = Some(Instant::now());
            self.deps.metrics.rooms_stalled.inc();
        }
        if let Stall::Append(p) = &stall {
            error!(room = %self.id, seq = p.entry.seq, error = %e,
                "log append outcome unknown; room unavailable until the log is read back");
            self.ask_resend(&p.origin);
        } else {
            error!(room = %self.id, error = %e, "room behind its log; catching up from the log");
        }
        self.pipeline.stall = Some(stall);
        self.pipeline.resolve_backoff = RESOLVE_FIRST;
        self.resolve_later(ctx);
    }

    /// Another attempt later, unless the room (one under a lease, [`Fence::Lease`](crate::store::Fence)) has been stalled for
    /// [`RoomDeps::stall_give_up`](super::RoomDeps): then it gives itself up, the way a
    /// lost lease does, and the node's reconciler restores it from its log with a new
    /// lease, actor and connections. Whatever kept this actor's attempts failing (an
    /// outcome it cannot learn, a connection that reaches the wrong server) is not
    /// carried over, and nothing is lost: what the log holds is the game, and a client
    /// whose input is pending resends it (deduplicated by `cs` if it was stored). A sole
    /// writer's room (the embedded node) keeps trying: nothing would restore it.
    fn retry_or_give_up(&mut self, ctx: &mut Context<Self>, e: &StoreError) {
        let stalled_for = self.pipeline.stalled_since.map_or(Duration::ZERO, |t| t.elapsed());
        if !self.pipeline.fence.restored_if_given_up() || stalled_for < self.deps.stall_give_up {
            return self.resolve_later(ctx);
        }
        error!(room = %self.id, stalled_s = stalled_for.as_secs(), last_error = %e,
            "room stalled too long: it gives itself up to be restored afresh from its log");
        self.deps.metrics.stalls_given_up.inc();
        self.unstall();
        self.fenced(ctx);
    }

    fn resolve_later(&mut self, ctx: &mut Context<Self>) {
        let wait = self.pipeline.resolve_backoff;
        self.pipeline.resolve_backoff = (self.pipeline.resolve_backoff * 2).min(RESOLVE_MAX);
        ctx.run_later(wait, |act, ctx| act.resolve(ctx));
    }

    /// One attempt to resolve the stall.
    fn resolve(&mut self, ctx: &mut Context<Self>) {
        let Phase::Playing(run) = &self.phase else { return self.unstall() };
        let game_pk = run.game_pk.clone();
        match &self.pipeline.stall {
            None => {}
            Some(Stall::Append(p)) => {
                // The same entry again: stored at most once whatever happened to the first.
                let fut = self.append(&game_pk, p.entry.clone());
                ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
                    Ok(()) => act.resolved_stored(ctx, "stored on retry"),
                    Err(StoreError::Conflict { .. }) => act.read_back(ctx, game_pk),
                    Err(StoreError::Fenced) => {
                        act.deps.metrics.fenced_appends.inc();
                        warn!(room = %act.id, "fenced while resolving an append: lease lost, room stops here");
                        act.unstall();
                        act.fenced(ctx);
                    }
                    Err(e) => {
                        warn!(room = %act.id, error = %e, "append outcome still unknown; retrying");
                        act.retry_or_give_up(ctx, &e);
                    }
                }));
            }
            Some(Stall::CatchUp) => {
                let fut = self.deps.store.load(&game_pk);
                ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
                    Ok(Some(stored)) => match rebuild::<G>(&stored, From::LatestSnapshot) {
                        Ok(rebuilt) => act.caught_up(ctx, rebuilt, &stored),
                        Err(e) => {
                            error!(room = %act.id, error = %e, "log cannot be rebuilt; room gives itself up");
                            act.unstall();
                            act.fenced(ctx);
                        }
                    },
                    Ok(None) => {
                        error!(room = %act.id, "game log gone; room gives itself up");
                        act.unstall();
                        act.fenced(ctx);
                    }
                    Err(e) => {
                        warn!(room = %act.id, error = %e, "log not readable yet; retrying");
                        act.retry_or_give_up(ctx, &e);
                    }
                }));
            }
        }
    }

    /// The log already has our seq: is the entry there ours?
    fn read_back(&mut self, ctx: &mut Context<Self>, game_pk: String) {
        let Some(Stall::Append(p)) = &self.pipeline.stall else { return };
        let seq = p.entry.seq;
        let fut = self.deps.store.entry(&game_pk, seq);
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            let Some(Stall::Append(p)) = &act.pipeline.stall else { return };
            match res {
                Ok(Some(found)) if found == p.entry => act.resolved_stored(ctx, "stored by the first attempt"),
                Ok(_) => {
                    // Another entry holds our seq (or the log is elsewhere): ours was not
                    // stored. Its client already heard `room_unavailable` and resends.
                    if let Some(Stall::Append(p)) = &act.pipeline.stall {
                        if !matches!(p.origin, Origin::Client { .. }) {
                            warn!(room = %act.id, seq, "server input not stored; decided again after catching up");
                        }
                    }
                    act.pipeline.stall = Some(Stall::CatchUp);
                    act.resolve(ctx);
                }
                Err(e) => {
                    warn!(room = %act.id, error = %e, "log entry not readable yet; retrying");
                    act.retry_or_give_up(ctx, &e);
                }
            }
        }));
    }

    /// The pending entry is in the log: applied and acknowledged as if the first attempt
    /// had answered.
    fn resolved_stored(&mut self, ctx: &mut Context<Self>, how: &str) {
        let Some(Stall::Append(p)) = self.pipeline.stall.take() else { return };
        let waited = self.pipeline.stalled_since.map(|t| t.elapsed().as_millis()).unwrap_or(0);
        info!(room = %self.id, seq = p.entry.seq, waited_ms = waited as u64, how, "append outcome resolved: stored");
        self.unstall();
        let Pending { entry, applied, rng, origin } = *p;
        self.commit(ctx, entry, applied, rng, origin);
    }

    /// The room is back in step with its log.
    fn caught_up(&mut self, ctx: &mut Context<Self>, rebuilt: Rebuilt<G>, stored: &StoredGame) {
        let waited = self.pipeline.stalled_since.map(|t| t.elapsed().as_millis()).unwrap_or(0);
        self.unstall();
        let Phase::Playing(run) = &mut self.phase else { return };
        info!(room = %self.id, from = run.seq, to = rebuilt.seq, waited_ms = waited as u64, "room caught up with its log");
        run.state = rebuilt.state;
        run.rng = rebuilt.rng;
        run.seq = rebuilt.seq;
        run.applied = rebuilt.applied;
        self.pipeline.logged(last_logged_rtt(stored));
        self.time.last_at = self.time.last_at.max(rebuilt.last_at);
        let now = self.time.now();
        self.sync_all(now);
        self.carry_on(ctx, now);
    }

    pub(super) fn unstall(&mut self) {
        self.pipeline.stall = None;
        if self.pipeline.stalled_since.take().is_some() {
            self.deps.metrics.rooms_stalled.dec();
        }
    }
}
