//! A Halli Galli view's JSON and an input's events' JSON, written by hand: byte for byte
//! what serde writes for a [`HalliGalliView`](super::HalliGalliView) and for the events,
//! with the table written once for every viewer. Apart from the view's types and how they
//! are built (`mod.rs`), which stay the reference these writers must match (the engine
//! harness compares the two on every game it plays).

use super::{mine, player_view, PlayerView, RttBand, ViewerView};
use crate::game::{PlayerId, ViewCtx};
use crate::games::halli_galli::cards::Fruit;
use crate::games::halli_galli::options::{BotLevel, EndMode, HalliGalliOptions, LatencyComp, LeftoverCards};
use crate::games::halli_galli::rules::{EndReason, HalliGalliEvent, HalliGalliState, OutReason, Phase};
use serde::Serialize;

/// The JSON of [`view`] for each viewer, the table written once, straight from the
/// state: each is the table's object with the viewer's own fields added at its end, byte
/// for byte what serializing the viewer's [`HalliGalliView`] gives (the engine harness
/// checks it on every game it plays, and `json_names_are_serde_s` every name below).
///
/// No [`TableView`] is built on the way: its player map (a sorted tree of cloned ids, with
/// eight map lookups per player to fill it) and the cards, bells and options serialized
/// by serde (which scans every constant name it writes for characters to escape) were
/// half of what a view cost, and views are a quarter of a Halli Galli action's
/// instructions (`benches/callgrind.sh`).
///
/// [`view`]: super::view
/// [`HalliGalliView`]: super::HalliGalliView
/// [`TableView`]: super::TableView
pub fn views_json(
    state: &HalliGalliState,
    viewers: &[Option<&PlayerId>],
    ctx: &ViewCtx<'_>,
) -> Result<Vec<String>, serde_json::Error> {
    // The table's object, left open for each viewer's own fields.
    let mut table_json = Vec::with_capacity(1024);
    let mut open = Object::open(&mut table_json);
    write_table(&mut open, state, ctx)?;
    // `serde_json` wrote every id and the rest is ASCII or a constant: never an error.
    // Checked once for the table, and once per viewer for only what that viewer adds.
    let utf8 = |e: std::str::Utf8Error| <serde_json::Error as serde::ser::Error>::custom(e.to_string());
    let table_json = std::str::from_utf8(&table_json).map_err(utf8)?;
    let mut mine_json = Vec::with_capacity(64);
    viewers
        .iter()
        .map(|viewer| {
            mine_json.clear();
            let mut object = Object { out: &mut mine_json, first: false };
            write_mine(&mut object, &mine(state, *viewer, ctx));
            object.close();
            let mine_json = std::str::from_utf8(&mine_json).map_err(utf8)?;
            let mut json = String::with_capacity(table_json.len() + mine_json.len());
            json.push_str(table_json);
            json.push_str(mine_json);
            Ok(json)
        })
        .collect()
}

/// A JSON object written field by field: the field names and the enums' names as they
/// are, numbers by `itoa`, ids by `serde_json`. Byte for byte what `serde_json` writes for
/// a struct with those fields, without scanning each constant for characters to escape
/// (serde_json does, for every key of every view). Names are camelCase ASCII, which never
/// needs escaping.
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
        debug_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'), "{name} needs escaping");
        self.comma();
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// A map's key (a player id), escaped as `serde_json` escapes it.
    fn escaped_key(&mut self, key: &PlayerId) -> serde_json::Result<()> {
        self.comma();
        serde_json::to_writer(&mut *self.out, key)?;
        self.out.push(b':');
        Ok(())
    }

    /// An object as the value of the key just written.
    fn object(&mut self) -> Object<'_> {
        Object::open(self.out)
    }

    /// A value serde writes (ids and lists of ids: they may need escaping).
    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> serde_json::Result<()> {
        self.key(name);
        serde_json::to_writer(&mut *self.out, value)
    }

    fn int(&mut self, name: &'static str, value: impl itoa::Integer) {
        self.key(name);
        self.out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn opt_int(&mut self, name: &'static str, value: Option<impl itoa::Integer>) {
        match value {
            Some(value) => self.int(name, value),
            None => self.null(name),
        }
    }

    fn boolean(&mut self, name: &'static str, value: bool) {
        self.key(name);
        self.out.extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn null(&mut self, name: &'static str) {
        self.key(name);
        self.out.extend_from_slice(b"null");
    }

    /// A string that needs no escaping (an enum's JSON name, a constant notice).
    fn name(&mut self, name: &'static str, value: &'static str) {
        debug_assert!(!value.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20), "{value} needs escaping");
        self.key(name);
        self.out.push(b'"');
        self.out.extend_from_slice(value.as_bytes());
        self.out.push(b'"');
    }

    fn opt_name(&mut self, name: &'static str, value: Option<&'static str>) {
        match value {
            Some(value) => self.name(name, value),
            None => self.null(name),
        }
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// [`TableView`]'s fields, in its order and under its serde names, from the state as
/// [`table`] reads it (each player through [`player_view`]).
///
/// [`TableView`]: super::TableView
/// [`table`]: super::table
fn write_table(o: &mut Object<'_>, state: &HalliGalliState, ctx: &ViewCtx<'_>) -> serde_json::Result<()> {
    let playing = state.phase == Phase::Playing;
    o.name("phase", phase_name(state.phase));
    o.int("now", ctx.now);
    o.field("order", &state.order)?;
    if state.phase == Phase::Ended {
        o.null("turn");
    } else {
        o.field("turn", &state.turn)?;
    }
    o.opt_int("turnDeadline", playing.then_some(state.turn_deadline));
    o.int("tableVersion", state.table_version);
    o.key("players");
    // The players in id order, as the view's map has them.
    let mut ids: Vec<&PlayerId> = state.order.iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut players = o.object();
    for id in ids {
        players.escaped_key(id)?;
        let mut player = players.object();
        write_player(&mut player, &player_view(state, id, ctx));
        player.close();
    }
    players.close();
    o.int("pot", state.pot.len());
    o.int("removed", state.removed.len());
    o.int("countdownEndsAt", state.countdown_ends_at);
    o.opt_int("endsAt", state.ends_at);
    o.int("flipAllowedAt", state.flip_allowed_at);
    o.boolean("flipReserved", state.pending_flip.is_some());
    match &state.last_bell {
        Some(bell) => {
            o.key("lastBell");
            let mut b = o.object();
            b.field("player", &bell.player)?;
            b.boolean("correct", bell.correct);
            if let Some(fruit) = bell.fruit {
                b.name("fruit", fruit_name(fruit));
            }
            b.int("at", bell.at);
            b.close();
        }
        None => o.null("lastBell"),
    }
    o.field("eliminated", &state.eliminated)?;
    match &state.ring_window {
        Some(window) => {
            o.key("ringWindow");
            let mut w = o.object();
            w.int("closesAt", window.closes_at());
            w.key("rang");
            w.out.push(b'[');
            for (i, ring) in window.rings.iter().enumerate() {
                if i > 0 {
                    w.out.push(b',');
                }
                serde_json::to_writer(&mut *w.out, &ring.player)?;
            }
            w.out.push(b']');
            w.close();
        }
        None => o.null("ringWindow"),
    }
    o.int("flipMs", state.options.flip_ms());
    o.key("options");
    let mut options = o.object();
    write_options(&mut options, &state.options);
    options.close();
    o.opt_name("endReason", state.end_reason.map(end_reason_name));
    Ok(())
}

/// [`HalliGalliOptions`]' fields, in its order and under its serde names.
fn write_options(o: &mut Object<'_>, x: &HalliGalliOptions) {
    o.name("endMode", end_mode_name(x.end_mode));
    o.opt_int("timeLimitMin", x.time_limit_min);
    o.int("flipSeconds", x.flip_seconds);
    o.boolean("autoFlip", x.auto_flip);
    o.int("flipGuardMs", x.flip_guard_ms);
    o.int("wrongRingLockoutMs", x.wrong_ring_lockout_ms);
    o.name("leftoverCards", leftover_cards_name(x.leftover_cards));
    o.name("latencyComp", latency_comp_name(x.latency_comp));
    o.boolean("showRtt", x.show_rtt);
    o.boolean("kidMode", x.kid_mode);
    o.boolean("duelWrongLoses", x.duel_wrong_loses);
    o.boolean("strikeOut", x.strike_out);
    o.boolean("penaltyEscalation", x.penalty_escalation);
    o.boolean("wrongToPot", x.wrong_to_pot);
    o.name("botLevel", bot_level_name(x.bot_level));
}

/// [`PlayerView`]'s fields, in its order and under its serde names.
fn write_player(o: &mut Object<'_>, p: &PlayerView) {
    o.int("deck", p.deck);
    o.int("faceUpCount", p.face_up_count);
    match p.top {
        Some(face) => {
            o.key("top");
            let mut top = o.object();
            top.name("fruit", fruit_name(face.fruit));
            top.int("count", face.count);
            top.close();
        }
        None => o.null("top"),
    }
    o.boolean("active", p.active);
    o.opt_int("lockedUntil", p.locked_until);
    o.boolean("locked", p.locked);
    o.opt_int("rtt", p.rtt);
    o.opt_name("rttBand", p.rtt_band.map(rtt_band_name));
    o.int("correct", p.correct);
    o.int("wrong", p.wrong);
}

/// [`ViewerView`]'s fields, in its order and under its serde names.
fn write_mine(o: &mut Object<'_>, m: &ViewerView) {
    o.boolean("canFlip", m.can_flip);
    o.boolean("canRing", m.can_ring);
    o.opt_name("slowNotice", m.slow_notice);
}

/// The JSON of one input's events, byte for byte what serde writes for them (the
/// harness checks it on every game it plays): each an object with its `type` first,
/// then its fields in order. (The enum's `rename_all` names the variants only: a
/// variant's fields keep their Rust names, `table_version` and all.)
pub fn events_json(events: &[HalliGalliEvent]) -> Result<String, serde_json::Error> {
    let mut out = Vec::with_capacity(64 * events.len() + 2);
    out.push(b'[');
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut o = Object::open(&mut out);
        write_event(&mut o, event)?;
        o.close();
    }
    out.push(b']');
    String::from_utf8(out).map_err(|e| <serde_json::Error as serde::ser::Error>::custom(e.to_string()))
}

fn write_event(o: &mut Object<'_>, event: &HalliGalliEvent) -> serde_json::Result<()> {
    use HalliGalliEvent as E;
    match event {
        E::Started { turn } => {
            o.name("type", "started");
            o.field("turn", turn)?;
        }
        E::Flipped { player, fruit, count, table_version, auto } => {
            o.name("type", "flipped");
            o.field("player", player)?;
            o.name("fruit", fruit_name(*fruit));
            o.int("count", *count);
            o.int("table_version", *table_version);
            o.boolean("auto", *auto);
        }
        E::FlipReserved { player, at } => {
            o.name("type", "flipReserved");
            o.field("player", player)?;
            o.int("at", *at);
        }
        E::RingQueued { player, closes_at } => {
            o.name("type", "ringQueued");
            o.field("player", player)?;
            o.int("closes_at", *closes_at);
        }
        E::Bell { player, correct, fruit } => {
            o.name("type", "bell");
            o.field("player", player)?;
            o.boolean("correct", *correct);
            o.opt_name("fruit", fruit.map(fruit_name));
        }
        E::Collected { player, taken, table_version } => {
            o.name("type", "collected");
            o.field("player", player)?;
            o.int("taken", *taken);
            o.int("table_version", *table_version);
        }
        E::Penalty { player, to, to_pot } => {
            o.name("type", "penalty");
            o.field("player", player)?;
            o.field("to", to)?;
            o.int("to_pot", *to_pot);
        }
        E::Locked { player, until } => {
            o.name("type", "locked");
            o.field("player", player)?;
            o.int("until", *until);
        }
        E::Forfeited { player, to_pot } => {
            o.name("type", "forfeited");
            o.field("player", player)?;
            o.int("to_pot", *to_pot);
        }
        E::Eliminated { player, reason } => {
            o.name("type", "eliminated");
            o.field("player", player)?;
            o.name("reason", out_reason_name(*reason));
        }
        E::Turn { player, deadline } => {
            o.name("type", "turn");
            o.field("player", player)?;
            o.int("deadline", *deadline);
        }
        E::Ended { reason } => {
            o.name("type", "ended");
            o.name("reason", end_reason_name(*reason));
        }
    }
    Ok(())
}

// The JSON names of the enums a view holds, as their serde attributes name them
// (`json_names_are_serde_s` checks every variant).

fn phase_name(x: Phase) -> &'static str {
    match x {
        Phase::Countdown => "countdown",
        Phase::Playing => "playing",
        Phase::Ended => "ended",
    }
}

fn end_reason_name(x: EndReason) -> &'static str {
    match x {
        EndReason::LastStanding => "lastStanding",
        EndReason::Official => "official",
        EndReason::TimeLimit => "timeLimit",
    }
}

fn fruit_name(x: Fruit) -> &'static str {
    match x {
        Fruit::Strawberry => "strawberry",
        Fruit::Banana => "banana",
        Fruit::Lime => "lime",
        Fruit::Plum => "plum",
    }
}

fn out_reason_name(x: OutReason) -> &'static str {
    match x {
        OutReason::EmptyDeck => "emptyDeck",
        OutReason::CouldNotPay => "couldNotPay",
        OutReason::DuelWrongRing => "duelWrongRing",
        OutReason::StrikeOut => "strikeOut",
    }
}

fn rtt_band_name(x: RttBand) -> &'static str {
    match x {
        RttBand::Green => "green",
        RttBand::Yellow => "yellow",
        RttBand::Red => "red",
    }
}

fn end_mode_name(x: EndMode) -> &'static str {
    match x {
        EndMode::LastStanding => "lastStanding",
        EndMode::Official => "official",
    }
}

fn leftover_cards_name(x: LeftoverCards) -> &'static str {
    match x {
        LeftoverCards::Pot => "pot",
        LeftoverCards::Remove => "remove",
    }
}

fn latency_comp_name(x: LatencyComp) -> &'static str {
    match x {
        LatencyComp::Off => "off",
        LatencyComp::Light => "light",
    }
}

fn bot_level_name(x: BotLevel) -> &'static str {
    match x {
        BotLevel::Easy => "easy",
        BotLevel::Normal => "normal",
        BotLevel::Hard => "hard",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(name: &str) -> String {
        format!("\"{name}\"")
    }

    #[test]
    fn events_json_is_serde_s_for_every_event() {
        use HalliGalliEvent as E;
        let p = PlayerId::new("q\"uote\\한글");
        let q = PlayerId::new("b");
        let events = vec![
            E::Started { turn: p.clone() },
            E::Flipped { player: p.clone(), fruit: Fruit::Lime, count: 5, table_version: 7, auto: true },
            E::FlipReserved { player: p.clone(), at: -3 },
            E::RingQueued { player: p.clone(), closes_at: 1_700_000_000_000 },
            E::Bell { player: p.clone(), correct: true, fruit: Some(Fruit::Plum) },
            E::Bell { player: q.clone(), correct: false, fruit: None },
            E::Collected { player: p.clone(), taken: 12, table_version: u64::MAX },
            E::Penalty { player: p.clone(), to: vec![q.clone(), p.clone()], to_pot: 0 },
            E::Penalty { player: q.clone(), to: Vec::new(), to_pot: 2 },
            E::Locked { player: p.clone(), until: i64::MIN },
            E::Forfeited { player: p.clone(), to_pot: 9 },
            E::Eliminated { player: p.clone(), reason: OutReason::CouldNotPay },
            E::Turn { player: q.clone(), deadline: 42 },
            E::Ended { reason: EndReason::TimeLimit },
        ];
        assert_eq!(events_json(&events).unwrap(), serde_json::to_string(&events).unwrap());
        for event in &events {
            let one = std::slice::from_ref(event);
            assert_eq!(events_json(one).unwrap(), serde_json::to_string(one).unwrap());
        }
        assert_eq!(events_json(&[]).unwrap(), "[]");
    }

    #[test]
    fn json_names_are_serde_s() {
        for x in [Phase::Countdown, Phase::Playing, Phase::Ended] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(phase_name(x)));
        }
        for x in [EndReason::LastStanding, EndReason::Official, EndReason::TimeLimit] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(end_reason_name(x)));
        }
        for x in [Fruit::Strawberry, Fruit::Banana, Fruit::Lime, Fruit::Plum] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(fruit_name(x)));
        }
        for x in [OutReason::EmptyDeck, OutReason::CouldNotPay, OutReason::DuelWrongRing, OutReason::StrikeOut] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(out_reason_name(x)));
        }
        for x in [RttBand::Green, RttBand::Yellow, RttBand::Red] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(rtt_band_name(x)));
        }
        for x in [EndMode::LastStanding, EndMode::Official] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(end_mode_name(x)));
        }
        for x in [LeftoverCards::Pot, LeftoverCards::Remove] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(leftover_cards_name(x)));
        }
        for x in [LatencyComp::Off, LatencyComp::Light] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(latency_comp_name(x)));
        }
        for x in [BotLevel::Easy, BotLevel::Normal, BotLevel::Hard] {
            assert_eq!(serde_json::to_string(&x).unwrap(), quoted(bot_level_name(x)));
        }
    }
}
