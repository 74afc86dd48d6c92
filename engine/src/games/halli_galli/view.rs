//! What a viewer sees (spec §8.3). Everyone (spectators too) sees the same table: each
//! face-up pile's top face and size, deck sizes, the pot's size, the turn, the table
//! version, locks, RTTs, times and who is out. Nobody sees any deck's content or order
//! (their own included), the pot's content, or what lies under a top. No card id is
//! ever sent: a top is sent as its face only.

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

/// The JSON of [`view`] for each viewer, the table serialized once: each is the table's
/// object with the viewer's own fields added at its end, byte for byte what serializing
/// the viewer's [`HalliGalliView`] gives (the engine harness checks it on every game it
/// plays).
pub fn views_json(
    state: &HalliGalliState,
    viewers: &[Option<&PlayerId>],
    ctx: &ViewCtx<'_>,
) -> Result<Vec<String>, serde_json::Error> {
    // The table's object, left open for each viewer's own fields.
    let mut table_json = Vec::with_capacity(1024);
    let mut open = Object::open(&mut table_json);
    write_table(&mut open, &table(state, ctx))?;
    // `serde_json` wrote every value and the names are ASCII: never an error. Checked
    // once for the table, and once per viewer for only what that viewer adds.
    let utf8 = |e: std::str::Utf8Error| <serde_json::Error as serde::ser::Error>::custom(e.to_string());
    let table_json = std::str::from_utf8(&table_json).map_err(utf8)?;
    let mut mine_json = Vec::with_capacity(64);
    viewers
        .iter()
        .map(|viewer| {
            mine_json.clear();
            let mut object = Object { out: &mut mine_json, first: false };
            write_mine(&mut object, &mine(state, *viewer, ctx))?;
            object.close();
            let mine_json = std::str::from_utf8(&mine_json).map_err(utf8)?;
            let mut json = String::with_capacity(table_json.len() + mine_json.len());
            json.push_str(table_json);
            json.push_str(mine_json);
            Ok(json)
        })
        .collect()
}

/// A JSON object written field by field: the field names as they are, the values by
/// `serde_json`. Byte for byte what `serde_json` writes for a struct with those fields,
/// without scanning each constant name for characters to escape (serde_json does, for
/// every key of every view: about a tenth of a Halli Galli action's instructions,
/// `benches/callgrind.sh`). Names are camelCase ASCII, which never need escaping.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Object<'a> {
    fn open(out: &'a mut Vec<u8>) -> Object<'a> {
        out.push(b'{');
        Object { out, first: true }
    }

    fn comma(&mut self) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
    }

    /// A field name, written as it is.
    fn key(&mut self, name: &'static str) {
        debug_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric()), "{name} needs escaping");
        self.comma();
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// A map's key (a player id), escaped as `serde_json` escapes it.
    fn escaped_key<K: Serialize + ?Sized>(&mut self, key: &K) -> serde_json::Result<()> {
        self.comma();
        serde_json::to_writer(&mut *self.out, key)?;
        self.out.push(b':');
        Ok(())
    }

    /// An object as the value of the key just written.
    fn object(&mut self) -> Object<'_> {
        Object::open(self.out)
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> serde_json::Result<()> {
        self.key(name);
        serde_json::to_writer(&mut *self.out, value)
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// [`TableView`]'s fields, in its order and under its serde names.
fn write_table(o: &mut Object<'_>, t: &TableView) -> serde_json::Result<()> {
    o.field("phase", &t.phase)?;
    o.field("now", &t.now)?;
    o.field("order", &t.order)?;
    o.field("turn", &t.turn)?;
    o.field("turnDeadline", &t.turn_deadline)?;
    o.field("tableVersion", &t.table_version)?;
    o.key("players");
    let mut players = o.object();
    for (id, p) in &t.players {
        players.escaped_key(id)?;
        let mut player = players.object();
        write_player(&mut player, p)?;
        player.close();
    }
    players.close();
    o.field("pot", &t.pot)?;
    o.field("removed", &t.removed)?;
    o.field("countdownEndsAt", &t.countdown_ends_at)?;
    o.field("endsAt", &t.ends_at)?;
    o.field("flipAllowedAt", &t.flip_allowed_at)?;
    o.field("flipReserved", &t.flip_reserved)?;
    o.field("lastBell", &t.last_bell)?;
    o.field("eliminated", &t.eliminated)?;
    o.field("ringWindow", &t.ring_window)?;
    o.field("flipMs", &t.flip_ms)?;
    o.key("options");
    let mut options = o.object();
    write_options(&mut options, &t.options)?;
    options.close();
    o.field("endReason", &t.end_reason)
}

/// [`HalliGalliOptions`]' fields, in its order and under its serde names.
fn write_options(o: &mut Object<'_>, x: &HalliGalliOptions) -> serde_json::Result<()> {
    o.field("endMode", &x.end_mode)?;
    o.field("timeLimitMin", &x.time_limit_min)?;
    o.field("flipSeconds", &x.flip_seconds)?;
    o.field("autoFlip", &x.auto_flip)?;
    o.field("flipGuardMs", &x.flip_guard_ms)?;
    o.field("wrongRingLockoutMs", &x.wrong_ring_lockout_ms)?;
    o.field("leftoverCards", &x.leftover_cards)?;
    o.field("latencyComp", &x.latency_comp)?;
    o.field("showRtt", &x.show_rtt)?;
    o.field("kidMode", &x.kid_mode)?;
    o.field("duelWrongLoses", &x.duel_wrong_loses)?;
    o.field("strikeOut", &x.strike_out)?;
    o.field("penaltyEscalation", &x.penalty_escalation)?;
    o.field("wrongToPot", &x.wrong_to_pot)?;
    o.field("botLevel", &x.bot_level)
}

/// [`PlayerView`]'s fields, in its order and under its serde names.
fn write_player(o: &mut Object<'_>, p: &PlayerView) -> serde_json::Result<()> {
    o.field("deck", &p.deck)?;
    o.field("faceUpCount", &p.face_up_count)?;
    o.field("top", &p.top)?;
    o.field("active", &p.active)?;
    o.field("lockedUntil", &p.locked_until)?;
    o.field("locked", &p.locked)?;
    o.field("rtt", &p.rtt)?;
    o.field("rttBand", &p.rtt_band)?;
    o.field("correct", &p.correct)?;
    o.field("wrong", &p.wrong)
}

/// [`ViewerView`]'s fields, in its order and under its serde names.
fn write_mine(o: &mut Object<'_>, m: &ViewerView) -> serde_json::Result<()> {
    o.field("canFlip", &m.can_flip)?;
    o.field("canRing", &m.can_ring)?;
    o.field("slowNotice", &m.slow_notice)
}

fn table(state: &HalliGalliState, ctx: &ViewCtx<'_>) -> TableView {
    let show_rtt = state.options.show_rtt;
    let players = state
        .order
        .iter()
        .map(|p| {
            let rtt = if show_rtt { ctx.rtt_of(p) } else { None };
            let locked_until = state.locked_until.get(p).copied();
            let pv = PlayerView {
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
            };
            (p.clone(), pv)
        })
        .collect();
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
