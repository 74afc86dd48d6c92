//! `tally`: the smallest complete game, and the example to copy when adding one.
//!
//! Any seated player may `{"type":"bump"}` a shared counter; everyone sees `count` and
//! `last`; option `target` (10/100/1000/없음) ends the game. It gives the benchmarks a
//! workload with no game timing in it.
//!
//! # How to add a game
//!
//! 1. Make a folder `games/<id>/` with these files: `options.rs` (the options struct
//!    with `deny_unknown_fields` and its [`OptionMeta`] list: a Korean title per option,
//!    a Korean label per choice), `rules.rs` (state, client actions, system inputs,
//!    events, the reject enum with `code`/`reason`, validate and apply), `view.rs`
//!    (per-viewer views: never hidden information), `bot.rs` (a strategy that sees
//!    only its view and legal inputs) and `mod.rs` (the [`Game`] impl below).
//! 2. Keep `apply` total: return [`EngineError`] instead of panicking, take time only
//!    from `ctx.now`, randomness only from the lent [`Rng`].
//! 3. Register the type in `registry.rs` (one line in `game_ids`, one in `visit`).
//! 4. Run the random-play harness over 1,000 seeds (see this module's tests) with the
//!    game's invariant, and write the spec's §10 checklist as named tests.
//!
//! [`OptionMeta`]: crate::options::OptionMeta
//! [`EngineError`]: crate::error::EngineError

pub mod bot;
pub mod options;
pub mod rules;
pub mod view;

use crate::error::EngineError;
use crate::game::{
    Actor, Applied, BotMove, Ctx, Game, GameResult, Input, NoSystemInput, PlayerId, ResultReason, Secret, SetupCtx,
    ViewCtx,
};
use crate::options::OptionMeta;
use crate::rng::Rng;
use options::TallyOptions;
use rules::{TallyAction, TallyEvent, TallyReject, TallyState};
use std::collections::BTreeMap;
use view::TallyView;

pub struct Tally;

impl Game for Tally {
    const ID: &'static str = "tally";
    const NAME_KO: &'static str = "숫자 세기";
    const MIN_PLAYERS: usize = 1;
    const MAX_PLAYERS: usize = 8;
    const STATE_VERSION: u32 = 1;
    /// A developers' and load testers' game, not offered to players (`PROTOCOL.md`).
    const LISTED: bool = false;

    type State = TallyState;
    type Options = TallyOptions;
    type Action = TallyAction;
    type System = NoSystemInput;
    type View = TallyView;
    type Event = TallyEvent;
    type Reject = TallyReject;

    fn options_meta() -> Vec<OptionMeta> {
        options::meta()
    }

    fn setup(ctx: SetupCtx<'_, TallyOptions>, _rng: &mut Rng) -> Result<TallyState, EngineError> {
        let range = Self::players_for(ctx.options);
        if !range.contains(ctx.players.len()) {
            return Err(EngineError::PlayerCount { got: ctx.players.len(), min: range.min, max: range.max });
        }
        Ok(TallyState {
            options: ctx.options.clone(),
            players: ctx.players.to_vec(),
            count: 0,
            last: None,
            bumps: ctx.players.iter().map(|p| (p.clone(), 0)).collect(),
            started_at: ctx.now,
        })
    }

    fn validate(
        state: &TallyState,
        actor: &Actor,
        _input: &Input<TallyAction, NoSystemInput>,
        _ctx: &Ctx,
    ) -> Result<(), TallyReject> {
        rules::validate(state, actor)
    }

    fn apply(
        state: &TallyState,
        actor: &Actor,
        input: &Input<TallyAction, NoSystemInput>,
        _ctx: &Ctx,
        _rng: &mut Rng,
    ) -> Result<Applied<TallyState, TallyEvent>, EngineError> {
        let Actor::Player(by) = actor else {
            return Err(EngineError::InvalidInput("tally has no server inputs".into()));
        };
        match input {
            Input::Client(TallyAction::Bump {}) => {
                let (state, event) = rules::bump(state, by);
                Ok(Applied { state, events: vec![event] })
            }
            Input::System(never) => match *never {},
        }
    }

    fn view(state: &TallyState, _viewer: Option<&PlayerId>, ctx: &ViewCtx<'_>) -> TallyView {
        view::view(state, ctx)
    }

    /// Everyone sees the same counter: serialized once per update, not once per viewer.
    fn views_json(
        state: &TallyState,
        viewers: &[Option<&PlayerId>],
        ctx: &ViewCtx<'_>,
    ) -> Result<Vec<String>, serde_json::Error> {
        let json = serde_json::to_string(&view::view(state, ctx))?;
        Ok(vec![json; viewers.len()])
    }

    fn active_players(state: &TallyState) -> Vec<PlayerId> {
        if state.is_over() {
            Vec::new()
        } else {
            state.players.clone()
        }
    }

    /// Tally waits for nobody: no deadline, and a disconnected player is never timed
    /// out (a room of absent players simply stays where it is).
    fn timeout_players(_state: &TallyState) -> Vec<PlayerId> {
        Vec::new()
    }

    fn on_timeout(_state: &TallyState, _player: &PlayerId) -> Input<TallyAction, NoSystemInput> {
        Input::Client(TallyAction::Bump {})
    }

    fn result(state: &TallyState) -> Option<GameResult> {
        let target = state.options.target?;
        if state.count < target {
            return None;
        }
        // Most bumps first; equal counts share a place.
        let mut by_bumps: BTreeMap<std::cmp::Reverse<u64>, Vec<PlayerId>> = BTreeMap::new();
        for p in &state.players {
            by_bumps.entry(std::cmp::Reverse(state.bumps.get(p).copied().unwrap_or(0))).or_default().push(p.clone());
        }
        let scores = state.bumps.iter().map(|(p, n)| (p.clone(), i64::try_from(*n).unwrap_or(i64::MAX))).collect();
        Some(GameResult {
            ranking: by_bumps.into_values().collect(),
            scores: Some(scores),
            summary: format!("숫자가 {target}에 도달했어요!"),
            reason: ResultReason::Normal,
            details: serde_json::json!({ "count": state.count }),
        })
    }

    fn legal_actions(state: &TallyState, player: &PlayerId, _now: i64) -> Vec<Input<TallyAction, NoSystemInput>> {
        if rules::validate(state, &Actor::Player(player.clone())).is_ok() {
            vec![Input::Client(TallyAction::Bump {})]
        } else {
            Vec::new()
        }
    }

    fn secrets_of(_state: &TallyState, _viewer: Option<&PlayerId>) -> Vec<Secret> {
        Vec::new()
    }

    fn bot_move(
        _view: &TallyView,
        _me: &PlayerId,
        legal: &[Input<TallyAction, NoSystemInput>],
        rng: &mut Rng,
    ) -> Option<BotMove<Input<TallyAction, NoSystemInput>>> {
        bot::choose(legal, rng)
    }
}

#[cfg(test)]
mod tests;
