//! Timers and bots: the room's single timer armed at the earliest deadline, and each
//! bot's planned move; both come back as messages and take the input path.

use super::{Origin, Phase, RoomActor};
use crate::messages::*;
use actix::prelude::*;
use engine::schedule;
use engine::{Actor as GameActor, Ctx, Game, InputOf, PlayerId, Rng, ViewCtx};
use std::collections::HashMap;
use std::time::Duration;

/// After a timer input is refused (a game bug), wait this long before trying again.
const TIMER_RETRY: Duration = Duration::from_secs(1);

pub(super) struct Timers<G: Game> {
    /// The one game timer ([`Wake`]).
    pub(super) timer: Option<SpawnHandle>,
    pub(super) bot_rng: Rng,
    /// Each bot's planned move and the wake that plays it.
    pub(super) bot_pending: HashMap<PlayerId, Planned<G>>,
    /// The seq of the last entry applied and its `at`: when the table bots look at
    /// appeared.
    pub(super) table: (u64, i64),
    /// Closes an ended room nobody watches ([`super::ENDED_LINGER`]).
    pub(super) close_timer: Option<SpawnHandle>,
}

/// A bot's move, decided on the table of `seq`, and the wake that plays it.
pub(super) struct Planned<G: Game> {
    wake: SpawnHandle,
    input: InputOf<G>,
    seq: u64,
}

/// What a bot's wake comes to.
enum Woken<G: Game> {
    Play(InputOf<G>),
    /// The table changed since the bot decided; its new decision is due later.
    Later(Duration, InputOf<G>, u64),
    Nothing,
}

impl<G: Game> Timers<G> {
    pub(super) fn new(bot_rng: Rng) -> Timers<G> {
        Timers { timer: None, bot_rng, bot_pending: HashMap::new(), table: (0, i64::MIN), close_timer: None }
    }

    /// Cancels the game timer and every planned bot move (the game is over).
    pub(super) fn cancel_all(&mut self, ctx: &mut Context<RoomActor<G>>) {
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        for (_, planned) in self.bot_pending.drain() {
            ctx.cancel_future(planned.wake);
        }
    }
}

impl<G: Game> RoomActor<G> {
    /// Re-arms the room's single timer at the earliest thing the server must do.
    pub(super) fn rearm(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.timers.timer.take() {
            ctx.cancel_future(h);
        }
        let Phase::Playing(run) = &self.phase else { return };
        if let Some(at) = schedule::next_wake::<G>(&run.state, &self.presence()) {
            let delay = u64::try_from(at - self.time.wall_ms()).unwrap_or(0);
            self.timers.timer = Some(ctx.notify_later(Wake, Duration::from_millis(delay)));
        }
    }

    /// Gives every idle bot a move to think about.
    pub(super) fn schedule_bots(&mut self, ctx: &mut Context<Self>) {
        let Phase::Playing(run) = &self.phase else { return };
        let now = self.time.peek();
        let bots: Vec<PlayerId> = self.lobby.seats.iter().filter(|s| s.bot).map(|s| s.user.clone()).collect();
        for bot in bots {
            if self.timers.bot_pending.contains_key(&bot) {
                continue;
            }
            let legal = G::legal_actions(&run.state, &bot, now);
            if legal.is_empty() {
                continue;
            }
            let view = G::view(&run.state, Some(&bot), &ViewCtx { now, rtt: Some(&self.audience.rtt) });
            if let Some(m) = G::bot_move(&view, &bot, &legal, &mut self.timers.bot_rng) {
                let delay = Duration::from_millis(u64::try_from(m.delay_ms.clamp(0, 60_000)).unwrap_or(0));
                let wake = ctx.notify_later(BotWake { bot: bot.clone() }, delay);
                self.timers.bot_pending.insert(bot, Planned { wake, input: m.input, seq: run.seq });
            }
        }
    }
}

impl<G: Game> Handler<Wake> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, _msg: Wake, ctx: &mut Context<Self>) {
        self.timers.timer = None;
        let Phase::Playing(run) = &self.phase else { return };
        let now = self.time.peek();
        match schedule::due::<G>(&run.state, now, &self.presence()) {
            Some((actor, input)) => {
                if !self.process(ctx, actor, input, Origin::Timer) {
                    // A refused timer input is a game bug; do not spin on it.
                    self.timers.timer = Some(ctx.notify_later(Wake, TIMER_RETRY));
                }
            }
            None => self.rearm(ctx),
        }
    }
}

impl<G: Game> Handler<BotWake> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: BotWake, ctx: &mut Context<Self>) {
        let Some(planned) = self.timers.bot_pending.remove(&msg.bot) else { return };
        let Phase::Playing(run) = &self.phase else { return };
        let now = self.time.peek();
        let actor = GameActor::Player(msg.bot.clone());
        let valid = |input: &InputOf<G>| G::validate(&run.state, &actor, input, &Ctx { now, rtt_ms: None }).is_ok();
        let woken: Woken<G> = if planned.seq == run.seq {
            // The table it decided on: the move is played if it still holds.
            if valid(&planned.input) {
                Woken::Play(planned.input)
            } else {
                Woken::Nothing
            }
        } else {
            // The table changed since the bot decided: it decides again on the table as
            // it is, and acts only once its reaction time has passed since that table
            // appeared, so a bot never reacts faster than its level allows (a plan made
            // on an older table, or a new decision taken at once, would).
            let legal = G::legal_actions(&run.state, &msg.bot, now);
            let view = G::view(&run.state, Some(&msg.bot), &ViewCtx { now, rtt: Some(&self.audience.rtt) });
            match G::bot_move(&view, &msg.bot, &legal, &mut self.timers.bot_rng) {
                None => Woken::Nothing,
                Some(m) => {
                    let (seq, at) = self.timers.table;
                    let appeared = if seq == run.seq { at } else { now };
                    let due = appeared.saturating_add(m.delay_ms.clamp(0, 60_000));
                    if due > now {
                        let wait = Duration::from_millis(u64::try_from(due - now).unwrap_or(0));
                        Woken::Later(wait, m.input, run.seq)
                    } else if valid(&m.input) {
                        Woken::Play(m.input)
                    } else {
                        Woken::Nothing
                    }
                }
            }
        };
        match woken {
            Woken::Play(input) => {
                if !self.process(ctx, actor, input, Origin::Bot) {
                    self.schedule_bots(ctx);
                }
            }
            Woken::Later(wait, input, seq) => {
                let wake = ctx.notify_later(BotWake { bot: msg.bot.clone() }, wait);
                self.timers.bot_pending.insert(msg.bot, Planned { wake, input, seq });
            }
            Woken::Nothing => self.schedule_bots(ctx),
        }
    }
}
