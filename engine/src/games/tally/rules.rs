//! Tally's state, inputs and rules: any seated player may bump a shared counter.

use super::options::TallyOptions;
use crate::game::{Actor, PlayerId, Reject};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TallyState {
    pub options: TallyOptions,
    pub players: Vec<PlayerId>,
    pub count: u64,
    pub last: Option<PlayerId>,
    /// Bumps per player, for the ranking.
    pub bumps: BTreeMap<PlayerId, u64>,
    pub started_at: i64,
}

impl TallyState {
    pub fn is_over(&self) -> bool {
        self.options.target.is_some_and(|t| self.count >= t)
    }
}

/// What a client may send: `{"type":"bump"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum TallyAction {
    Bump {},
}

/// Public events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum TallyEvent {
    Bumped { by: PlayerId, count: u64 },
}

/// Why a bump is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TallyReject {
    NotSeated,
    GameOver,
}

impl Reject for TallyReject {
    fn code(&self) -> &'static str {
        match self {
            TallyReject::NotSeated => "not_seated",
            TallyReject::GameOver => "game_over",
        }
    }

    fn reason(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            TallyReject::NotSeated => "이 게임의 참가자가 아니에요",
            TallyReject::GameOver => "게임이 이미 끝났어요",
        })
    }
}

pub fn validate(state: &TallyState, actor: &Actor) -> Result<(), TallyReject> {
    if state.is_over() {
        return Err(TallyReject::GameOver);
    }
    match actor {
        Actor::Player(p) if state.players.contains(p) => Ok(()),
        _ => Err(TallyReject::NotSeated),
    }
}

pub fn bump(state: &TallyState, by: &PlayerId) -> (TallyState, TallyEvent) {
    let mut next = state.clone();
    next.count += 1;
    next.last = Some(by.clone());
    *next.bumps.entry(by.clone()).or_insert(0) += 1;
    let event = TallyEvent::Bumped { by: by.clone(), count: next.count };
    (next, event)
}
