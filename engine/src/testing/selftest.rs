//! The harness tested on a toy game with one deliberate flaw at a time: each check must
//! catch its flaw, and the sound toy must pass (so every check can fail, and none fails
//! for no reason).

use super::harness::{Check, Harness};
use crate::error::EngineError;
use crate::game::{Actor, Applied, BotMove, Ctx, Game, GameResult, Input, PlayerId, Reject, ResultReason, Secret};
use crate::game::{SetupCtx, ViewCtx};
use crate::options::OptionMeta;
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

const SOUND: u8 = 0;
const NON_DETERMINISTIC: u8 = 1;
const LEAKS: u8 = 2;
const UNSERIALIZABLE: u8 = 3;
const ILLEGAL_TIMEOUT: u8 = 4;
const ENDLESS: u8 = 5;
const VIEWS_JSON_DIFFERS: u8 = 6;
const EVENTS_JSON_DIFFERS: u8 = 7;

/// Two players hold three hidden cards each and play them in turns onto a table.
struct Toy<const FLAW: u8>;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ToyState {
    order: Vec<PlayerId>,
    hands: BTreeMap<PlayerId, Vec<u32>>,
    table: Vec<u32>,
    turn: usize,
    turn_started: i64,
    /// Lost on a JSON round trip when the toy is UNSERIALIZABLE.
    #[serde(skip)]
    scratch: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
enum ToyAction {
    Play { card: u32 },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum ToySystem {
    Timeout,
    Nothing,
}

#[derive(Clone, Debug)]
struct ToyReject;

impl Reject for ToyReject {
    fn code(&self) -> &'static str {
        "not_allowed"
    }
    fn reason(&self) -> Cow<'static, str> {
        Cow::Borrowed("할 수 없어요")
    }
}

#[derive(Debug, Serialize)]
struct ToyView {
    table: Vec<u32>,
    my_cards: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    other_ids: Option<Vec<u32>>,
}

static CALLS: AtomicU64 = AtomicU64::new(0);

impl<const FLAW: u8> Toy<FLAW> {
    fn turn_player(s: &ToyState) -> &PlayerId {
        &s.order[s.turn % s.order.len()]
    }
}

impl<const FLAW: u8> Game for Toy<FLAW> {
    const ID: &'static str = "toy";
    const NAME_KO: &'static str = "장난감";
    const MIN_PLAYERS: usize = 2;
    const MAX_PLAYERS: usize = 2;
    const STATE_VERSION: u32 = 1;
    type State = ToyState;
    type Options = ();
    type Action = ToyAction;
    type System = ToySystem;
    type View = ToyView;
    type Event = u32;
    type Reject = ToyReject;

    fn options_meta() -> Vec<OptionMeta> {
        Vec::new()
    }

    fn setup(ctx: SetupCtx<'_, ()>, rng: &mut Rng) -> Result<ToyState, EngineError> {
        let deck = rng.shuffled(&[0, 1, 2, 3, 4, 5]);
        let hands = ctx.players.iter().zip(deck.chunks(3)).map(|(p, c)| (p.clone(), c.to_vec())).collect();
        Ok(ToyState { order: ctx.players.to_vec(), hands, table: vec![], turn: 0, turn_started: ctx.now, scratch: 0 })
    }

    fn validate(s: &ToyState, actor: &Actor, input: &Input<ToyAction, ToySystem>, _: &Ctx) -> Result<(), ToyReject> {
        let me = actor.player().ok_or(ToyReject)?;
        if me != Self::turn_player(s) {
            return Err(ToyReject);
        }
        match input {
            Input::Client(ToyAction::Play { card }) if s.hands[me].contains(card) => Ok(()),
            Input::System(ToySystem::Timeout) if !s.hands[me].is_empty() || FLAW == ENDLESS => Ok(()),
            _ => Err(ToyReject),
        }
    }

    fn apply(
        s: &ToyState,
        actor: &Actor,
        input: &Input<ToyAction, ToySystem>,
        ctx: &Ctx,
        _rng: &mut Rng,
    ) -> Result<Applied<ToyState, u32>, EngineError> {
        let me = actor.player().ok_or_else(|| EngineError::invariant("no actor"))?.clone();
        let mut next = s.clone();
        let card = match input {
            Input::Client(ToyAction::Play { card }) => Some(*card),
            Input::System(ToySystem::Timeout) => next.hands[&me].first().copied(),
            Input::System(ToySystem::Nothing) => None,
        };
        if let Some(card) = card {
            next.hands.entry(me).or_default().retain(|c| *c != card);
            if FLAW != ENDLESS {
                next.table.push(card);
            } else {
                // Endless: the card goes back into the other player's hand.
                let other = next.order[(next.turn + 1) % 2].clone();
                next.hands.entry(other).or_default().push(card);
            }
        }
        next.turn += 1;
        next.turn_started = ctx.now;
        if FLAW == NON_DETERMINISTIC {
            next.turn_started += CALLS.fetch_add(1, Ordering::Relaxed) as i64;
        }
        if FLAW == UNSERIALIZABLE {
            next.scratch += 1;
        }
        Ok(Applied { state: next, events: card.into_iter().collect() })
    }

    fn view(s: &ToyState, viewer: Option<&PlayerId>, _: &ViewCtx<'_>) -> ToyView {
        let mine = viewer.and_then(|v| s.hands.get(v)).cloned().unwrap_or_default();
        let others = s.hands.iter().filter(|(p, _)| Some(*p) != viewer).flat_map(|(_, h)| h.clone()).collect();
        ToyView { table: s.table.clone(), my_cards: mine, other_ids: (FLAW == LEAKS).then_some(others) }
    }

    fn views_json(
        s: &ToyState,
        viewers: &[Option<&PlayerId>],
        ctx: &ViewCtx<'_>,
    ) -> Result<Vec<String>, serde_json::Error> {
        viewers
            .iter()
            .map(|viewer| {
                // The flawed toy shows everyone the first viewer's cards.
                let shown = if FLAW == VIEWS_JSON_DIFFERS { viewers[0] } else { *viewer };
                serde_json::to_string(&Self::view(s, shown, ctx))
            })
            .collect()
    }

    fn events_json(events: &[u32]) -> Result<String, serde_json::Error> {
        // The flawed toy drops the last event.
        let shown = if FLAW == EVENTS_JSON_DIFFERS { &events[..events.len().saturating_sub(1)] } else { events };
        serde_json::to_string(shown)
    }

    fn active_players(s: &ToyState) -> Vec<PlayerId> {
        vec![Self::turn_player(s).clone()]
    }

    fn deadline(s: &ToyState) -> Option<i64> {
        Some(s.turn_started + 1000)
    }

    fn on_timeout(_: &ToyState, _: &PlayerId) -> Input<ToyAction, ToySystem> {
        Input::System(if FLAW == ILLEGAL_TIMEOUT { ToySystem::Nothing } else { ToySystem::Timeout })
    }

    fn result(s: &ToyState) -> Option<GameResult> {
        s.hands.values().all(Vec::is_empty).then(|| GameResult {
            ranking: vec![s.order.clone()],
            scores: None,
            summary: "끝".into(),
            reason: ResultReason::Normal,
            details: serde_json::Value::Null,
        })
    }

    fn legal_actions(s: &ToyState, p: &PlayerId, _: i64) -> Vec<Input<ToyAction, ToySystem>> {
        if p != Self::turn_player(s) {
            return vec![];
        }
        s.hands[p].iter().map(|&card| Input::Client(ToyAction::Play { card })).collect()
    }

    fn secrets_of(s: &ToyState, viewer: Option<&PlayerId>) -> Vec<Secret> {
        s.hands
            .iter()
            .filter(|(p, _)| Some(*p) != viewer)
            .flat_map(|(_, h)| h.iter().map(|&c| Secret::Card(c)))
            .collect()
    }

    fn bot_move(
        _: &ToyView,
        _: &PlayerId,
        legal: &[Input<ToyAction, ToySystem>],
        rng: &mut Rng,
    ) -> Option<BotMove<Input<ToyAction, ToySystem>>> {
        rng.pick(legal).map(|i| BotMove { input: i.clone(), delay_ms: 100 })
    }
}

fn run<const FLAW: u8>() -> Result<(), Check> {
    let mut harness = Harness::<Toy<FLAW>>::new(|_, _| ());
    harness.seeds = 0..50;
    harness.max_steps = 200;
    harness.run().map(|_| ()).map_err(|f| f.check)
}

#[test]
fn sound_toy_passes() {
    assert_eq!(run::<SOUND>(), Ok(()));
}

#[test]
fn non_determinism_is_caught() {
    assert_eq!(run::<NON_DETERMINISTIC>(), Err(Check::Determinism));
}

#[test]
fn leaked_secret_is_caught() {
    assert_eq!(run::<LEAKS>(), Err(Check::Leak));
}

#[test]
fn unserializable_state_is_caught() {
    assert_eq!(run::<UNSERIALIZABLE>(), Err(Check::RoundTrip));
}

#[test]
fn illegal_timeout_is_caught() {
    assert_eq!(run::<ILLEGAL_TIMEOUT>(), Err(Check::TimeoutLegality));
}

#[test]
fn endless_game_is_caught() {
    assert_eq!(run::<ENDLESS>(), Err(Check::Bound));
}

#[test]
fn views_json_other_than_the_views_is_caught() {
    assert_eq!(run::<VIEWS_JSON_DIFFERS>(), Err(Check::ViewsJson));
}

#[test]
fn events_json_other_than_the_events_is_caught() {
    assert_eq!(run::<EVENTS_JSON_DIFFERS>(), Err(Check::EventsJson));
}
