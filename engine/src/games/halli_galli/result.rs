//! The end of a game (spec §6, §8.6): ranking, scores 3/2/1 and the Korean summary.

use super::rules::{EndReason, HalliGalliState, Phase};
use crate::game::{GameResult, PlayerId, ResultReason};
use serde::Serialize;
use std::collections::BTreeMap;

/// One row of `details.ranking` (§8.6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RankRow {
    pub rank: usize,
    pub id: PlayerId,
    pub cards: usize,
    pub correct: u32,
    pub wrong: u32,
}

/// Places from first to last. Players still in come first: after `lastStanding` the one
/// survivor; after `official` or the time limit, by cards held (deck + own face-up pile),
/// then correct rings, equal pairs sharing a place. Players who went out follow, the
/// last one out first.
pub fn places(state: &HalliGalliState) -> Vec<Vec<PlayerId>> {
    let mut places: Vec<Vec<PlayerId>> = Vec::new();
    let key = |p: &PlayerId| (state.held(p), state.correct_count.get(p).copied().unwrap_or(0));
    let mut still_in: Vec<&PlayerId> = state.active.iter().collect();
    still_in.sort_by_key(|p| std::cmp::Reverse(key(p)));
    for p in still_in {
        match places.last_mut() {
            Some(place) if place.first().is_some_and(|q| key(q) == key(p)) => place.push(p.clone()),
            _ => places.push(vec![p.clone()]),
        }
    }
    places.extend(state.eliminated.iter().rev().map(|p| vec![p.clone()]));
    places
}

pub fn result(state: &HalliGalliState) -> Option<GameResult> {
    if state.phase != Phase::Ended {
        return None;
    }
    let reason = state.end_reason.unwrap_or(EndReason::LastStanding);
    let ranking = places(state);
    let mut rows = Vec::new();
    let mut scores = BTreeMap::new();
    let mut rank = 1;
    for place in &ranking {
        for p in place {
            rows.push(RankRow {
                rank,
                id: p.clone(),
                cards: state.held(p),
                correct: state.correct_count.get(p).copied().unwrap_or(0),
                wrong: state.wrong_count.get(p).copied().unwrap_or(0),
            });
            scores.insert(p.clone(), 4i64.saturating_sub(rank as i64).max(0));
        }
        rank += place.len();
    }
    let winners = ranking.first().cloned().unwrap_or_default();
    let summary = summary(state, reason, &winners);
    Some(GameResult {
        ranking,
        scores: Some(scores),
        summary,
        reason: ResultReason::Normal,
        details: serde_json::json!({ "endReason": reason, "ranking": rows }),
    })
}

fn summary(state: &HalliGalliState, reason: EndReason, winners: &[PlayerId]) -> String {
    let names = winners.iter().map(|p| format!("{p}님")).collect::<Vec<_>>().join(", ");
    let in_play = super::cards::DECK_SIZE as usize - state.removed.len();
    match (reason, winners) {
        (_, []) => "게임이 끝났어요".to_owned(),
        (EndReason::TimeLimit, [_, _, ..]) => format!("시간 종료! {names} 공동 우승!"),
        (EndReason::TimeLimit, [w]) => format!("시간 종료! {names}이 {}장으로 우승!", state.held(w)),
        (_, [w]) if state.held(w) == in_play => format!("{names}이 {in_play}장을 모두 모아 우승!"),
        (EndReason::Official, [_, _, ..]) => format!("{names} 공동 우승!"),
        (EndReason::Official, [w]) => format!("{names}이 {}장으로 우승!", state.held(w)),
        (EndReason::LastStanding, _) => format!("{names}이 끝까지 남아 우승!"),
    }
}
