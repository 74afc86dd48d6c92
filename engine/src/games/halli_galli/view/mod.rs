//! What a viewer sees (spec §8.3). Everyone (spectators too) sees the same table: each
//! face-up pile's top face and size, deck sizes, the pot's size, the turn, the table
//! version, locks, RTTs, times and who is out. Nobody sees any deck's content or order
//! (their own included), the pot's content, or what lies under a top. No card id is
//! ever sent: a top is sent as its face only.
//!
//! This file holds the view's types, built from the state for serde ([`view`]); `json`
//! writes the same views' JSON, and the events', by hand ([`views_json`], [`events_json`]),
//! byte for byte what serde writes, because a room writes them after every change and
//! serde's way was half of what a view cost.

mod json;

pub use json::{events_json, views_json};

use super::cards::Face;
use super::options::HalliGalliOptions;
use super::rules::{EndReason, HalliGalliState, LastBell, Phase};
use crate::game::{PlayerId, ViewCtx};
use serde::Serialize;
use std::collections::BTreeMap;

/// RTT at or above this is "slow" (red, and a hint to the player).
pub const SLOW_RTT_MS: u32 = 200;
/// RTT below this is green.
pub const GOOD_RTT_MS: u32 = 80;

/// Colour band of an RTT (§5.4): green < 80 ms, yellow < 200 ms, red ≥ 200 ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RttBand {
    Green,
    Yellow,
    Red,
}

impl RttBand {
    pub fn of(rtt: u32) -> RttBand {
        if rtt < GOOD_RTT_MS {
            RttBand::Green
        } else if rtt < SLOW_RTT_MS {
            RttBand::Yellow
        } else {
            RttBand::Red
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlayerView {
    /// Cards in the face-down deck (a count only).
    pub deck: usize,
    pub face_up_count: usize,
    pub top: Option<Face>,
    pub active: bool,
    /// End of the bell lock after a wrong ring (epoch ms), if one was ever set.
    pub locked_until: Option<i64>,
    pub locked: bool,
    /// Measured RTT when `showRtt` is on.
    pub rtt: Option<u32>,
    pub rtt_band: Option<RttBand>,
    pub correct: u32,
    pub wrong: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RingWindowView {
    pub closes_at: i64,
    /// Who rang in the window so far (public: everybody heard the bell).
    pub rang: Vec<PlayerId>,
}

/// A viewer's view: the table, which is the same for everyone, and what this viewer may
/// do. (JSON: one object, the table's fields first.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HalliGalliView {
    #[serde(flatten)]
    pub table: TableView,
    #[serde(flatten)]
    pub mine: ViewerView,
}

/// What every viewer sees alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableView {
    pub phase: Phase,
    /// Server time the view was built at.
    pub now: i64,
    pub order: Vec<PlayerId>,
    /// Whose flip it is (the first player during the countdown; `null` once ended).
    pub turn: Option<PlayerId>,
    pub turn_deadline: Option<i64>,
    pub table_version: u64,
    pub players: BTreeMap<PlayerId, PlayerView>,
    /// Cards under the bell (a count only).
    pub pot: usize,
    /// Leftover cards out of the game (a count only).
    pub removed: usize,
    pub countdown_ends_at: i64,
    pub ends_at: Option<i64>,
    /// Flips are held until this time.
    pub flip_allowed_at: i64,
    /// The turn player's flip is reserved and runs at `flipAllowedAt`.
    pub flip_reserved: bool,
    pub last_bell: Option<LastBell>,
    pub eliminated: Vec<PlayerId>,
    pub ring_window: Option<RingWindowView>,
    /// Flip time in ms in force (8 s in children's mode).
    pub flip_ms: i64,
    pub options: HalliGalliOptions,
    pub end_reason: Option<EndReason>,
}

/// What only this viewer sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ViewerView {
    /// The viewer may press "뒤집기" now.
    pub can_flip: bool,
    /// The viewer may ring now (in the game, not locked, not already in the window).
    pub can_ring: bool,
    /// "연결이 느려요" for a viewer whose own RTT is at or above 200 ms.
    pub slow_notice: Option<&'static str>,
}

pub fn view(state: &HalliGalliState, viewer: Option<&PlayerId>, ctx: &ViewCtx<'_>) -> HalliGalliView {
    HalliGalliView { table: table(state, ctx), mine: mine(state, viewer, ctx) }
}

fn table(state: &HalliGalliState, ctx: &ViewCtx<'_>) -> TableView {
    let players = state.order.iter().map(|p| (p.clone(), player_view(state, p, ctx))).collect();
    let playing = state.phase == Phase::Playing;
    TableView {
        phase: state.phase,
        now: ctx.now,
        order: state.order.clone(),
        turn: (state.phase != Phase::Ended).then(|| state.turn.clone()),
        turn_deadline: playing.then_some(state.turn_deadline),
        table_version: state.table_version,
        players,
        pot: state.pot.len(),
        removed: state.removed.len(),
        countdown_ends_at: state.countdown_ends_at,
        ends_at: state.ends_at,
        flip_allowed_at: state.flip_allowed_at,
        flip_reserved: state.pending_flip.is_some(),
        last_bell: state.last_bell.clone(),
        eliminated: state.eliminated.clone(),
        ring_window: state.ring_window.as_ref().map(|w| RingWindowView {
            closes_at: w.closes_at(),
            rang: w.rings.iter().map(|r| r.player.clone()).collect(),
        }),
        flip_ms: state.options.flip_ms(),
        options: state.options.clone(),
        end_reason: state.end_reason,
    }
}

/// What everyone sees of player `p` (no allocation: both [`table`] and [`views_json`]
/// read a player through this).
fn player_view(state: &HalliGalliState, p: &PlayerId, ctx: &ViewCtx<'_>) -> PlayerView {
    let rtt = if state.options.show_rtt { ctx.rtt_of(p) } else { None };
    let locked_until = state.locked_until.get(p).copied();
    PlayerView {
        deck: state.deck_len(p),
        face_up_count: state.face_up_len(p),
        top: state.top(p),
        active: state.is_active(p),
        locked_until,
        locked: locked_until.is_some_and(|t| ctx.now < t),
        rtt,
        rtt_band: rtt.map(RttBand::of),
        correct: state.correct_count.get(p).copied().unwrap_or(0),
        wrong: state.wrong_count.get(p).copied().unwrap_or(0),
    }
}

fn mine(state: &HalliGalliState, viewer: Option<&PlayerId>, ctx: &ViewCtx<'_>) -> ViewerView {
    let playing = state.phase == Phase::Playing;
    let in_window = |p: &PlayerId| state.ring_window.as_ref().is_some_and(|w| w.rings.iter().any(|r| &r.player == p));
    let (can_flip, can_ring) = match viewer {
        Some(me) if playing && state.is_active(me) => (
            !state.options.auto_flip && &state.turn == me && state.pending_flip.is_none() && state.deck_len(me) > 0,
            ctx.now >= state.locked_until_of(me) && !in_window(me),
        ),
        _ => (false, false),
    };
    let slow_notice = viewer.and_then(|me| ctx.rtt_of(me)).filter(|r| *r >= SLOW_RTT_MS).map(|_| "연결이 느려요");
    ViewerView { can_flip, can_ring, slow_notice }
}
