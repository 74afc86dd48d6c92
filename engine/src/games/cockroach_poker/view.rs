//! What each viewer sees (spec §8.3).
//!
//! Everyone: seats, hand counts, every front, starter, holder, the latest claim (and the
//! round's claim history with `claimHistory`), `seen`, the last reveal. Only the viewer:
//! their own hand. Only viewers in `seen`: the card in flight. Never during play: other
//! hands and the 2-player removed cards; once the game is over everything is shown.

use super::rules::{CardFace, ClaimEntry, CockroachState, Kind, LossReason, Reveal};
use crate::game::{PlayerId, ViewCtx};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CockroachView {
    pub order: Vec<PlayerId>,
    /// The viewer's own cards; `None` for spectators.
    pub hand: Option<Vec<CardFace>>,
    pub hand_counts: BTreeMap<PlayerId, usize>,
    /// Face-up cards in front of each player, counted per kind (all 8 kinds, zeros
    /// included): what the badges show. Front cards are interchangeable, so their ids
    /// are not sent.
    pub fronts: BTreeMap<PlayerId, BTreeMap<Kind, usize>>,
    pub starter: PlayerId,
    pub holder: Option<PlayerId>,
    pub last_passer: Option<PlayerId>,
    /// The latest claim: the one a call is judged against.
    pub claim: Option<Kind>,
    pub seen: Vec<PlayerId>,
    /// This round's claims; `None` when `claimHistory` is off.
    pub claims: Option<Vec<ClaimEntry>>,
    /// Whether the holder has peeked.
    pub peeked: bool,
    /// The card in flight, only for viewers in `seen`.
    pub card: Option<CardFace>,
    /// Who the holder could pass to (before peeking: empty means "must call").
    pub pass_targets: Vec<PlayerId>,
    pub last_reveal: Option<Reveal>,
    pub lose_count: usize,
    pub loser: Option<PlayerId>,
    pub loss_reason: Option<LossReason>,
    pub losing_kind: Option<Kind>,
    /// Cards removed in a 2-player game: only their number during play.
    pub removed_count: usize,
    /// After the game: the removed cards (2 players).
    pub removed: Option<Vec<CardFace>>,
    /// After the game: every hand.
    pub hands: Option<BTreeMap<PlayerId, Vec<CardFace>>>,
    pub quick_chat: bool,
    pub show_seen_by: bool,
    pub deadline: Option<i64>,
    pub now: i64,
}

/// Per player, per kind, the cards in front.
pub fn front_table(state: &CockroachState) -> BTreeMap<PlayerId, BTreeMap<Kind, usize>> {
    state
        .order
        .iter()
        .map(|p| {
            let mut counts: BTreeMap<Kind, usize> = Kind::ALL.iter().map(|k| (*k, 0)).collect();
            for kind in state.front(p).iter().filter_map(|&c| Kind::of(c)) {
                *counts.entry(kind).or_insert(0) += 1;
            }
            (p.clone(), counts)
        })
        .collect()
}

fn faces(ids: &[u32]) -> Vec<CardFace> {
    ids.iter().filter_map(|&id| CardFace::of(id)).collect()
}

pub fn view(state: &CockroachState, viewer: Option<&PlayerId>, ctx: &ViewCtx<'_>) -> CockroachView {
    let over = state.is_over();
    let round = &state.round;
    let seated_viewer = viewer.filter(|v| state.order.contains(v));
    let may_see_card = seated_viewer.is_some_and(|v| round.seen.contains(v));
    CockroachView {
        order: state.order.clone(),
        hand: seated_viewer.map(|v| faces(state.hand(v))),
        hand_counts: state.order.iter().map(|p| (p.clone(), state.hand(p).len())).collect(),
        fronts: front_table(state),
        starter: round.starter.clone(),
        holder: round.holder.clone(),
        last_passer: round.last_passer.clone(),
        claim: round.claim,
        seen: round.seen.clone(),
        claims: state.options.claim_history.then(|| round.claims.clone()),
        peeked: round.peeked,
        card: round.card.filter(|_| may_see_card).and_then(CardFace::of),
        pass_targets: state.pass_targets(),
        last_reveal: state.last_reveal.clone(),
        lose_count: state.lose_count(),
        loser: state.loser.clone(),
        loss_reason: state.loss_reason,
        losing_kind: state.losing_kind,
        removed_count: state.removed.len(),
        removed: over.then(|| faces(&state.removed)),
        hands: over.then(|| state.order.iter().map(|p| (p.clone(), faces(state.hand(p)))).collect()),
        quick_chat: state.options.quick_chat,
        show_seen_by: state.options.show_seen_by,
        deadline: (!over).then_some(round.deadline),
        now: ctx.now,
    }
}
