//! What everyone sees: tally has no hidden information.

use super::rules::TallyState;
use crate::game::{PlayerId, ViewCtx};
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TallyView {
    pub count: u64,
    pub last: Option<PlayerId>,
    pub target: Option<u64>,
    pub order: Vec<PlayerId>,
    pub now: i64,
}

pub fn view(state: &TallyState, ctx: &ViewCtx<'_>) -> TallyView {
    TallyView {
        count: state.count,
        last: state.last.clone(),
        target: state.options.target,
        order: state.players.clone(),
        now: ctx.now,
    }
}
