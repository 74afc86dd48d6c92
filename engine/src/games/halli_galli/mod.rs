//! `halli-galli` (할리갈리): flip fruit cards in turn; when the tops show exactly five of
//! one fruit, the first to ring the bell takes every face-up card (spec
//! `halli-galli.md`).
//!
//! Real time on a turn-based runner: every input carries `serverTs` (`ctx.now`) and the
//! actor's RTT (`ctx.rtt_ms`), both logged, so a replay judges every ring identically.
//! The server's own work comes through [`Game::tick`]: the countdown's end, reserved
//! flips after the flip guard, the turn deadline's automatic flip, the time limit, and
//! `resolve` at the end of a latency window. A disconnected turn player is flipped for
//! through [`Game::on_timeout`]: after 60 s away their flip time drops to 1 s.
//!
//! Files: `cards.rs` (the 56 faces), `options.rs`, `rules.rs` (state, inputs, validate),
//! `play.rs` (apply), `result.rs` (ranking and summary), `view/` (the views; `json.rs`
//! there writes their JSON and the events' by hand), `bot.rs`.

pub mod bot;
pub mod cards;
pub mod options;
pub mod play;
pub mod result;
pub mod rules;
pub mod view;

use crate::error::EngineError;
use crate::game::{Actor, Applied, BotMove, Ctx, Game, GameResult, Input, PlayerId, Secret, SetupCtx, ViewCtx};
use crate::options::OptionMeta;
use crate::rng::Rng;
use options::HalliGalliOptions;
use rules::{
    HalliGalliAction, HalliGalliEvent, HalliGalliInput, HalliGalliReject, HalliGalliState, HalliGalliSystem, Phase,
};
use view::HalliGalliView;

pub struct HalliGalli;

impl Game for HalliGalli {
    const ID: &'static str = "halli-galli";
    const NAME_KO: &'static str = "할리갈리";
    const MIN_PLAYERS: usize = 2;
    const MAX_PLAYERS: usize = 6;
    const STATE_VERSION: u32 = 1;

    type State = HalliGalliState;
    type Options = HalliGalliOptions;
    type Action = HalliGalliAction;
    type System = HalliGalliSystem;
    type View = HalliGalliView;
    type Event = HalliGalliEvent;
    type Reject = HalliGalliReject;

    fn options_meta() -> Vec<OptionMeta> {
        options::meta()
    }

    fn setup(ctx: SetupCtx<'_, HalliGalliOptions>, rng: &mut Rng) -> Result<HalliGalliState, EngineError> {
        let range = Self::players_for(ctx.options);
        if !range.contains(ctx.players.len()) {
            return Err(EngineError::PlayerCount { got: ctx.players.len(), min: range.min, max: range.max });
        }
        rules::setup(ctx.players, ctx.options, ctx.now, rng)
    }

    fn validate(
        state: &HalliGalliState,
        actor: &Actor,
        input: &HalliGalliInput,
        ctx: &Ctx,
    ) -> Result<(), HalliGalliReject> {
        rules::validate(state, actor, input, ctx.now)
    }

    fn apply(
        state: &HalliGalliState,
        actor: &Actor,
        input: &HalliGalliInput,
        ctx: &Ctx,
        _rng: &mut Rng,
    ) -> Result<Applied<HalliGalliState, HalliGalliEvent>, EngineError> {
        let (state, events) = rules::apply(state, actor, input, ctx.now, ctx.rtt_ms)?;
        Ok(Applied { state, events })
    }

    fn view(state: &HalliGalliState, viewer: Option<&PlayerId>, ctx: &ViewCtx<'_>) -> HalliGalliView {
        view::view(state, viewer, ctx)
    }

    /// The table is everybody's: serialized once per update, not once per viewer.
    fn views_json(
        state: &HalliGalliState,
        viewers: &[Option<&PlayerId>],
        ctx: &ViewCtx<'_>,
    ) -> Result<Vec<String>, serde_json::Error> {
        view::views_json(state, viewers, ctx)
    }

    /// Written without serde's per-name escaping (`view::events_json`).
    fn events_json(events: &[HalliGalliEvent]) -> Result<String, serde_json::Error> {
        view::events_json(events)
    }

    /// Everyone still in may ring at any time (the flip is the turn player's).
    fn active_players(state: &HalliGalliState) -> Vec<PlayerId> {
        if state.phase == Phase::Playing {
            state.active.clone()
        } else {
            Vec::new()
        }
    }

    fn deadline(state: &HalliGalliState) -> Option<i64> {
        state.deadline()
    }

    /// The turn player, while their flip is theirs to make: not while a flip is already
    /// reserved or a ring window is open (the tick handles those).
    fn timeout_players(state: &HalliGalliState) -> Vec<PlayerId> {
        if state.phase == Phase::Playing && state.pending_flip.is_none() && state.ring_window.is_none() {
            vec![state.turn.clone()]
        } else {
            Vec::new()
        }
    }

    /// A turn player away for 60 s or more flips 1 s into their turn (§8.5).
    fn timeout_not_before(state: &HalliGalliState) -> Option<i64> {
        (state.phase == Phase::Playing).then_some(state.turn_started_at + rules::DISCONNECTED_FLIP_MS)
    }

    fn disconnect_grace_ms(_state: &HalliGalliState) -> Option<i64> {
        Some(rules::DISCONNECT_GRACE_MS)
    }

    fn tick(state: &HalliGalliState, now: i64) -> Option<HalliGalliSystem> {
        state.deadline().filter(|d| *d <= now)?;
        Some(if state.ring_window.is_some() { HalliGalliSystem::Resolve {} } else { HalliGalliSystem::Tick {} })
    }

    fn on_timeout(_state: &HalliGalliState, _player: &PlayerId) -> HalliGalliInput {
        Input::System(HalliGalliSystem::TimeoutFlip {})
    }

    fn result(state: &HalliGalliState) -> Option<GameResult> {
        result::result(state)
    }

    /// The turn player's flip when it may be sent now; a ring quoting the current table
    /// version for every player still in and not locked (whether the table is at five
    /// or not).
    fn legal_actions(state: &HalliGalliState, player: &PlayerId, now: i64) -> Vec<HalliGalliInput> {
        let actor = Actor::Player(player.clone());
        [HalliGalliAction::Flip {}, HalliGalliAction::Ring { version: state.table_version }]
            .into_iter()
            .map(Input::Client)
            .filter(|input| rules::validate(state, &actor, input, now).is_ok())
            .collect()
    }

    /// Every card in a deck, under the bell, under a top or out of the game: hidden from
    /// everyone, the owner of a deck included (§8.3).
    fn secrets_of(state: &HalliGalliState, _viewer: Option<&PlayerId>) -> Vec<Secret> {
        let under_tops = state.face_up.values().flat_map(|pile| pile.split_last().map_or(&[][..], |(_, under)| under));
        state
            .decks
            .values()
            .flatten()
            .chain(under_tops)
            .chain(&state.pot)
            .chain(&state.removed)
            .map(|c| Secret::Card(*c))
            .collect()
    }

    fn bot_move(
        view: &HalliGalliView,
        me: &PlayerId,
        legal: &[HalliGalliInput],
        rng: &mut Rng,
    ) -> Option<BotMove<HalliGalliInput>> {
        bot::choose(view, me, legal, rng)
    }
}

#[cfg(test)]
mod tests;
