//! `cockroach-poker` (바퀴벌레 포커): the bluffing game of `spec/cockroach-poker.md`.
//!
//! 2–6 players pass face-down vermin cards with a claim ("이건 쥐야"); the receiver calls
//! the claim true or false, or peeks and passes the card on. Whoever collects `loseCount`
//! of one kind loses; everyone else wins.
//!
//! - `options.rs`: `loseCount` ("auto" = 4, or 5 for 2 players), `turnSeconds`, the
//!   display options and the house rules `eightKindsRule` and `twoPlayerPass`.
//! - `rules.rs`: state, actions (`offer`/`call`/`peek`/`pass`), the system `timeout`,
//!   events, refusals, setup, validate, apply and the card-conservation invariant.
//! - `cards.rs`: the 8 kinds and card ids; `view.rs`: per-viewer views; `bot.rs`: the bot.
//!
//! Timers: the round's `deadline` is `turnSeconds` after its last change; the runner
//! then applies `on_timeout` (a system `timeout`) for the active player, and `apply`
//! draws the random choice of §8.5 from the lent RNG. A player away for 90 s is timed
//! out as soon as it is their turn (`disconnect_grace_ms`).

pub mod bot;
pub mod cards;
pub mod model;
pub mod options;
pub mod rules;
pub mod view;

use crate::error::EngineError;
use crate::game::{
    Actor, Applied, BotMove, ChatPhrase, Ctx, Game, GameResult, Input, PlayerId, ResultReason, Secret, SetupCtx,
    ViewCtx,
};
use crate::options::OptionMeta;
use crate::rng::Rng;
use options::CockroachOptions;
use rules::{
    CallWord, CockroachAction, CockroachEvent, CockroachInput, CockroachReject, CockroachState, CockroachSystem, Kind,
    LossReason,
};
use serde_json::json;
use std::collections::BTreeMap;
use view::CockroachView;

/// Players away this long are timed out at once when it is their turn (spec §8.5).
pub const DISCONNECT_GRACE_MS: i64 = 90_000;

pub struct CockroachPoker;

/// Quick chat (spec §2 `quickChat`: "정말이야!", "의심스러운데?"), a few more in the same
/// spirit: what players of a bluffing game say across the table, nothing that could carry
/// a card.
pub const CHAT_PHRASES: &[ChatPhrase] = &[
    ChatPhrase { key: "really", label: "정말이야!" },
    ChatPhrase { key: "doubt", label: "의심스러운데?" },
    ChatPhrase { key: "trust", label: "믿어 볼게" },
    ChatPhrase { key: "hurry", label: "빨리 골라 줘~" },
    ChatPhrase { key: "nice", label: "좋은 승부였어!" },
];

impl Game for CockroachPoker {
    const ID: &'static str = "cockroach-poker";
    const NAME_KO: &'static str = "바퀴벌레 포커";
    const MIN_PLAYERS: usize = 2;
    const MAX_PLAYERS: usize = 6;
    const STATE_VERSION: u32 = 1;

    type State = CockroachState;
    type Options = CockroachOptions;
    type Action = CockroachAction;
    type System = CockroachSystem;
    type View = CockroachView;
    type Event = CockroachEvent;
    type Reject = CockroachReject;

    fn options_meta() -> Vec<OptionMeta> {
        options::meta()
    }

    fn chat_phrases() -> &'static [ChatPhrase] {
        CHAT_PHRASES
    }

    /// Spec §2 `quickChat` (on by default).
    fn chat_on(options: &CockroachOptions) -> bool {
        options.quick_chat
    }

    fn setup(ctx: SetupCtx<'_, CockroachOptions>, rng: &mut Rng) -> Result<CockroachState, EngineError> {
        let range = Self::players_for(ctx.options);
        if !range.contains(ctx.players.len()) {
            return Err(EngineError::PlayerCount { got: ctx.players.len(), min: range.min, max: range.max });
        }
        let state = rules::setup(ctx.players, ctx.options, ctx.now, rng);
        rules::check_invariants(&state).map_err(EngineError::Invariant)?;
        Ok(state)
    }

    fn validate(
        state: &CockroachState,
        actor: &Actor,
        input: &CockroachInput,
        _ctx: &Ctx,
    ) -> Result<(), CockroachReject> {
        rules::validate(state, actor, input)
    }

    fn apply(
        state: &CockroachState,
        actor: &Actor,
        input: &CockroachInput,
        ctx: &Ctx,
        rng: &mut Rng,
    ) -> Result<Applied<CockroachState, CockroachEvent>, EngineError> {
        rules::apply(state, actor, input, ctx.now, rng)
    }

    fn view(state: &CockroachState, viewer: Option<&PlayerId>, ctx: &ViewCtx<'_>) -> CockroachView {
        view::view(state, viewer, ctx)
    }

    fn active_players(state: &CockroachState) -> Vec<PlayerId> {
        state.active().cloned().into_iter().collect()
    }

    fn deadline(state: &CockroachState) -> Option<i64> {
        (!state.is_over()).then_some(state.round.deadline)
    }

    fn disconnect_grace_ms(_state: &CockroachState) -> Option<i64> {
        Some(DISCONNECT_GRACE_MS)
    }

    fn on_timeout(_state: &CockroachState, _player: &PlayerId) -> CockroachInput {
        Input::System(CockroachSystem::Timeout {})
    }

    fn result(state: &CockroachState) -> Option<GameResult> {
        result(state)
    }

    fn legal_actions(state: &CockroachState, player: &PlayerId, _now: i64) -> Vec<CockroachInput> {
        legal_actions(state, player)
    }

    fn secrets_of(state: &CockroachState, viewer: Option<&PlayerId>) -> Vec<Secret> {
        secrets_of(state, viewer)
    }

    fn bot_move(
        view: &CockroachView,
        me: &PlayerId,
        legal: &[CockroachInput],
        rng: &mut Rng,
    ) -> Option<BotMove<CockroachInput>> {
        bot::choose(view, me, legal, rng)
    }
}

/// Every legal client input of `player`. For the starter that is every card × every
/// other player × 8 claims (at most 27 × 1 × 8 or 22 × 2 × 8 = 352): small enough to
/// list in full, so the harness samples offers uniformly.
pub fn legal_actions(state: &CockroachState, player: &PlayerId) -> Vec<CockroachInput> {
    let actor = Actor::Player(player.clone());
    let ok = |a: &CockroachAction| rules::validate(state, &actor, &Input::Client(a.clone())).is_ok();
    let mut out = Vec::new();
    if state.is_over() || state.active() != Some(player) {
        return out;
    }
    let round = &state.round;
    if round.card.is_none() {
        for &card_id in state.hand(player) {
            for to in state.order.iter().filter(|p| *p != player) {
                for claim in Kind::ALL {
                    out.push(Input::Client(CockroachAction::Offer { card_id, to: to.clone(), claim }));
                }
            }
        }
        return out;
    }
    let mut candidates =
        vec![CockroachAction::Call { call: CallWord::True }, CockroachAction::Call { call: CallWord::False }];
    candidates.push(CockroachAction::Peek {});
    if round.peeked {
        for to in state.pass_targets() {
            for claim in Kind::ALL {
                candidates.push(CockroachAction::Pass { to: to.clone(), claim });
            }
        }
    }
    out.extend(candidates.into_iter().filter(|a| ok(a)).map(Input::Client));
    out
}

/// What `viewer` must not learn: other hands, the card in flight unless they have seen
/// it (as its id and as the `{id, kind}` object that would show it) and, in a 2-player
/// game, the removed cards. Nothing once the game is over: everything is revealed.
pub fn secrets_of(state: &CockroachState, viewer: Option<&PlayerId>) -> Vec<Secret> {
    if state.is_over() {
        return Vec::new();
    }
    let mut out: Vec<Secret> = Vec::new();
    for (p, hand) in &state.hands {
        if Some(p) != viewer {
            out.extend(hand.iter().map(|&c| Secret::Card(c)));
        }
    }
    if let Some(card) = state.round.card {
        if !viewer.is_some_and(|v| state.round.seen.contains(v)) {
            out.push(Secret::Card(card));
            if let Some(face) = rules::CardFace::of(card) {
                out.push(Secret::Value(json!(face)));
            }
        }
    }
    out.extend(state.removed.iter().map(|&c| Secret::Card(c)));
    out
}

/// The end of the game (spec §6, §8.6).
pub fn result(state: &CockroachState) -> Option<GameResult> {
    let loser = state.loser.as_ref()?;
    let reason = state.loss_reason.unwrap_or(LossReason::Four);
    let fronts = view::front_table(state);

    // Winners: fewest of their largest same-kind stack first, then fewest front cards;
    // equal keys share a place. The loser is last.
    let mut places: BTreeMap<(usize, usize), Vec<PlayerId>> = BTreeMap::new();
    for p in state.order.iter().filter(|p| *p != loser) {
        let worst = fronts.get(p).and_then(|m| m.values().max().copied()).unwrap_or(0);
        places.entry((worst, state.front(p).len())).or_default().push(p.clone());
    }
    let mut ranking: Vec<Vec<PlayerId>> = places.into_values().collect();
    ranking.push(vec![loser.clone()]);
    let scores = state.order.iter().map(|p| (p.clone(), i64::from(p != loser))).collect();

    let what = match (reason, state.losing_kind) {
        (LossReason::Four, Some(kind)) => {
            format!("{loser}님 앞에 {} {}장!", kind.name_ko(), state.front_count(loser, kind))
        }
        (LossReason::EightKinds, _) => format!("{loser}님 앞에 벌레 8종이 모두 모였어요!"),
        (LossReason::EmptyHand, _) | (LossReason::Four, None) => format!("{loser}님 손에 카드가 없어요!"),
    };
    Some(GameResult {
        ranking,
        scores: Some(scores),
        summary: format!("{what} {loser}님 패배, 나머지 모두 승리"),
        reason: ResultReason::Normal,
        details: json!({
            "loser": loser,
            "reason": reason,
            "losingKind": state.losing_kind,
            "fronts": fronts,
        }),
    })
}

#[cfg(test)]
mod tests;
