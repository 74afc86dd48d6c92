//! Halli Galli's state, inputs and rules (spec §4–§7, §8.1–§8.2).
//!
//! Piles are `Vec<u32>` of card ids with the top at the end, the bottom at index 0. The
//! table (every face-up pile's top card, eliminated players' included) changes only by a
//! flip or a collection; each change bumps `table_version`, which rings must quote.

use super::cards::{face, Face, Fruit, DECK_SIZE, FRUITS, TARGET};
use super::options::{EndMode, HalliGalliOptions, LeftoverCards};
use crate::error::EngineError;
use crate::game::{Actor, Input, PlayerId, Reject};
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

pub use super::play::apply;
use std::collections::BTreeMap;

/// Length of the countdown before the first turn (§4.4).
pub const COUNTDOWN_MS: i64 = 3000;
/// Length of the latency-compensation window (§5.4).
pub const RING_WINDOW_MS: i64 = 50;
/// The largest latency credit a ring gets in the window (ms).
pub const MAX_LATENCY_CREDIT_MS: i64 = 80;
/// A disconnected turn player is flipped for after this long (§8.5: "flipSeconds = 1 s").
pub const DISCONNECTED_FLIP_MS: i64 = 1000;
/// How long a player may be away before their flip time drops to 1 s (§8.5).
pub const DISCONNECT_GRACE_MS: i64 = 60_000;
/// Wrong rings that forfeit under `strikeOut`.
pub const STRIKES: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    Countdown,
    Playing,
    Ended,
}

/// `GameResult.details.endReason` (§8.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EndReason {
    LastStanding,
    Official,
    TimeLimit,
}

/// Why a player left the game.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OutReason {
    /// Their turn came with an empty deck (§5.3).
    EmptyDeck,
    /// A wrong ring they could not pay in full (§5.2).
    CouldNotPay,
    /// `duelWrongLoses`: a wrong ring in a one-on-one.
    DuelWrongRing,
    /// `strikeOut`: the third wrong ring.
    StrikeOut,
}

/// The last ring, for the table's bell animation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastBell {
    pub player: PlayerId,
    pub correct: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fruit: Option<Fruit>,
    pub at: i64,
}

/// One correct ring waiting in the latency window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowRing {
    pub player: PlayerId,
    /// `serverTs - min(RTT/2, 80)`.
    pub adj_ts: i64,
}

/// The latency-compensation window opened by the first correct ring (§5.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RingWindow {
    pub version: u64,
    pub opened_at: i64,
    /// Rings in arrival order (arrival breaks ties of `adj_ts`).
    pub rings: Vec<WindowRing>,
}

impl RingWindow {
    pub fn closes_at(&self) -> i64 {
        self.opened_at + RING_WINDOW_MS
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HalliGalliState {
    pub options: HalliGalliOptions,
    /// Seats clockwise (shuffled at setup).
    pub order: Vec<PlayerId>,
    /// Face-down decks, top = last.
    pub decks: BTreeMap<PlayerId, Vec<u32>>,
    /// Face-up piles, top = last.
    pub face_up: BTreeMap<PlayerId, Vec<u32>>,
    /// Face down under the bell; the next correct ringer takes it.
    pub pot: Vec<u32>,
    /// Leftover cards out of the game (`leftoverCards = remove`); kept so the 56 cards
    /// can be accounted for.
    pub removed: Vec<u32>,
    /// Players still in, in seat order.
    pub active: Vec<PlayerId>,
    /// Players out, in the order they went out.
    pub eliminated: Vec<PlayerId>,
    pub turn: PlayerId,
    /// When the current turn began (flip, collection, elimination or the start).
    pub turn_started_at: i64,
    pub turn_deadline: i64,
    /// Flips are held until this time (`flipGuardMs` after the last table change).
    pub flip_allowed_at: i64,
    /// A flip that arrived during the guard (or an open ring window), run by a tick.
    pub pending_flip: Option<PlayerId>,
    pub table_version: u64,
    pub locked_until: BTreeMap<PlayerId, i64>,
    pub wrong_count: BTreeMap<PlayerId, u32>,
    pub correct_count: BTreeMap<PlayerId, u32>,
    pub ring_window: Option<RingWindow>,
    pub phase: Phase,
    pub started_at: i64,
    /// End of the countdown: the first turn starts at the tick at or after it.
    pub countdown_ends_at: i64,
    /// `timeLimitMin` after the countdown ends.
    pub ends_at: Option<i64>,
    pub last_bell: Option<LastBell>,
    pub end_reason: Option<EndReason>,
    pub ended_at: Option<i64>,
}

impl HalliGalliState {
    pub fn is_active(&self, p: &PlayerId) -> bool {
        self.active.contains(p)
    }

    pub fn deck_len(&self, p: &PlayerId) -> usize {
        self.decks.get(p).map_or(0, Vec::len)
    }

    pub fn face_up_len(&self, p: &PlayerId) -> usize {
        self.face_up.get(p).map_or(0, Vec::len)
    }

    /// Cards a player holds for ranking (§6): deck plus their own face-up pile.
    pub fn held(&self, p: &PlayerId) -> usize {
        self.deck_len(p) + self.face_up_len(p)
    }

    pub fn top(&self, p: &PlayerId) -> Option<Face> {
        self.face_up.get(p).and_then(|pile| pile.last()).and_then(|id| face(*id))
    }

    pub fn locked_until_of(&self, p: &PlayerId) -> i64 {
        self.locked_until.get(p).copied().unwrap_or(i64::MIN)
    }

    /// The fruit that makes the table correct (exactly 5 of it on the tops), if any; the
    /// first in fruit order when two fruits are at 5.
    pub fn five_fruit(&self) -> Option<Fruit> {
        let mut sums = [0u32; 4];
        for p in &self.order {
            if let Some(f) = self.top(p) {
                if let Some(s) = sums.get_mut(f.fruit.index()) {
                    *s += u32::from(f.count);
                }
            }
        }
        FRUITS.iter().copied().find(|f| sums.get(f.index()) == Some(&TARGET))
    }

    /// `official` applies only to games that started with three or more (§6), and only
    /// once two players remain.
    pub fn official_final(&self) -> bool {
        self.options.end_mode == EndMode::Official && self.order.len() > 2 && self.active.len() == 2
    }

    /// When the server next acts: the window's close while one is open, otherwise the
    /// earliest of the turn deadline, a reserved flip and the time limit (§8.5).
    pub fn deadline(&self) -> Option<i64> {
        match self.phase {
            Phase::Ended => None,
            Phase::Countdown => Some(self.countdown_ends_at),
            Phase::Playing => {
                if let Some(w) = &self.ring_window {
                    return Some(w.closes_at());
                }
                let mut d = self.turn_deadline;
                if self.pending_flip.is_some() {
                    d = d.min(self.flip_allowed_at);
                }
                if let Some(e) = self.ends_at {
                    d = d.min(e);
                }
                Some(d)
            }
        }
    }
}

/// What a client may send: `{"type":"flip"}` and `{"type":"ring","version":N}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum HalliGalliAction {
    Flip {},
    Ring { version: u64 },
}

/// Inputs only the server creates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum HalliGalliSystem {
    /// Whatever the clock has made due: the countdown's end, a reserved flip, the turn
    /// deadline's automatic flip, the time limit.
    Tick {},
    /// Closes the latency window and hands the table to its winner.
    Resolve {},
    /// The turn player's flip, applied for them when they are timed out (disconnected).
    TimeoutFlip {},
}

pub type HalliGalliInput = Input<HalliGalliAction, HalliGalliSystem>;

/// Public events. Faces of newly flipped tops are public; card ids never appear.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum HalliGalliEvent {
    Started {
        turn: PlayerId,
    },
    Flipped {
        player: PlayerId,
        fruit: Fruit,
        count: u8,
        table_version: u64,
        auto: bool,
    },
    FlipReserved {
        player: PlayerId,
        at: i64,
    },
    /// A correct ring entered the latency window.
    RingQueued {
        player: PlayerId,
        closes_at: i64,
    },
    Bell {
        player: PlayerId,
        correct: bool,
        fruit: Option<Fruit>,
    },
    /// `player` took every face-up pile and the pot (`taken` cards).
    Collected {
        player: PlayerId,
        taken: usize,
        table_version: u64,
    },
    /// A wrong ring's penalty: one card each to `to` (clockwise), `toPot` under the bell.
    Penalty {
        player: PlayerId,
        to: Vec<PlayerId>,
        to_pot: usize,
    },
    Locked {
        player: PlayerId,
        until: i64,
    },
    /// Cards of a forfeiting player moved under the bell.
    Forfeited {
        player: PlayerId,
        to_pot: usize,
    },
    Eliminated {
        player: PlayerId,
        reason: OutReason,
    },
    Turn {
        player: PlayerId,
        deadline: i64,
    },
    Ended {
        reason: EndReason,
    },
}

/// Why an input is refused. Refusals change nothing (no penalty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HalliGalliReject {
    NotSeated,
    NotStarted,
    GameOver,
    Eliminated,
    NotYourTurn,
    AutoFlip,
    AlreadyReserved,
    EmptyDeck,
    Late,
    Locked,
    AlreadyRang,
    ServerOnly,
    NotDue,
}

impl Reject for HalliGalliReject {
    fn code(&self) -> &'static str {
        match self {
            HalliGalliReject::NotSeated => "not_seated",
            HalliGalliReject::NotStarted => "not_started",
            HalliGalliReject::GameOver => "game_over",
            HalliGalliReject::Eliminated => "eliminated",
            HalliGalliReject::NotYourTurn => "not_your_turn",
            HalliGalliReject::AutoFlip => "auto_flip",
            HalliGalliReject::AlreadyReserved => "already_reserved",
            HalliGalliReject::EmptyDeck => "empty_deck",
            HalliGalliReject::Late => "late",
            HalliGalliReject::Locked => "locked",
            HalliGalliReject::AlreadyRang => "already_rang",
            HalliGalliReject::ServerOnly => "server_only",
            HalliGalliReject::NotDue => "not_due",
        }
    }

    fn reason(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            HalliGalliReject::NotSeated => "이 게임의 참가자가 아니에요",
            HalliGalliReject::NotStarted => "아직 시작 전이에요",
            HalliGalliReject::GameOver => "게임이 이미 끝났어요",
            HalliGalliReject::Eliminated => "탈락해서 참여할 수 없어요",
            HalliGalliReject::NotYourTurn => "내 차례가 아니에요",
            HalliGalliReject::AutoFlip => "자동 뒤집기 중이에요",
            HalliGalliReject::AlreadyReserved => "이미 뒤집기를 예약했어요",
            HalliGalliReject::EmptyDeck => "뒤집을 카드가 없어요",
            HalliGalliReject::Late => "늦었어요",
            HalliGalliReject::Locked => "종이 잠겨 있어요",
            HalliGalliReject::AlreadyRang => "이미 종을 쳤어요",
            HalliGalliReject::ServerOnly => "서버만 할 수 있어요",
            HalliGalliReject::NotDue => "아직 때가 아니에요",
        })
    }
}

/// Setup (§4): shuffle, seats and first player from the RNG, deal `floor(56/N)` each.
pub fn setup(
    players: &[PlayerId],
    options: &HalliGalliOptions,
    now: i64,
    rng: &mut Rng,
) -> Result<HalliGalliState, EngineError> {
    let n = players.len();
    let per = (DECK_SIZE as usize).checked_div(n).ok_or_else(|| EngineError::invariant("no players"))?;
    let cards = rng.shuffled(&super::cards::all_ids());
    let order = rng.shuffled(players);
    let first = rng.pick(&order).cloned().ok_or_else(|| EngineError::invariant("no players"))?;
    let mut decks = BTreeMap::new();
    for (i, p) in order.iter().enumerate() {
        decks.insert(p.clone(), cards.get(i * per..(i + 1) * per).unwrap_or_default().to_vec());
    }
    let leftover = cards.get(n * per..).unwrap_or_default().to_vec();
    let (pot, removed) = match options.leftover_cards {
        LeftoverCards::Pot => (leftover, Vec::new()),
        LeftoverCards::Remove => (Vec::new(), leftover),
    };
    Ok(new_state(options, order, decks, BTreeMap::new(), pot, removed, first, Phase::Countdown, now))
}

/// A state laid out by hand, already playing, with `turn` to flip at `now` (tests and
/// benches). Every card not placed in a deck, pile or the pot is put in `removed`, so the
/// 56 cards are accounted for. Players not in `decks` start with empty piles.
pub fn custom_state(
    options: &HalliGalliOptions,
    order: &[PlayerId],
    decks: BTreeMap<PlayerId, Vec<u32>>,
    face_up: BTreeMap<PlayerId, Vec<u32>>,
    pot: Vec<u32>,
    turn: &PlayerId,
    now: i64,
) -> HalliGalliState {
    let used: Vec<u32> = decks.values().chain(face_up.values()).flatten().chain(pot.iter()).copied().collect();
    let removed = super::cards::all_ids().into_iter().filter(|c| !used.contains(c)).collect();
    let mut state = new_state(options, order.to_vec(), decks, face_up, pot, removed, turn.clone(), Phase::Playing, now);
    state.countdown_ends_at = now;
    state.ends_at = options.time_limit_min.map(|m| now + i64::from(m) * 60_000);
    for p in order {
        state.decks.entry(p.clone()).or_default();
    }
    state
}

#[allow(clippy::too_many_arguments)]
fn new_state(
    options: &HalliGalliOptions,
    order: Vec<PlayerId>,
    decks: BTreeMap<PlayerId, Vec<u32>>,
    face_up: BTreeMap<PlayerId, Vec<u32>>,
    pot: Vec<u32>,
    removed: Vec<u32>,
    first: PlayerId,
    phase: Phase,
    now: i64,
) -> HalliGalliState {
    let countdown_ends_at = now + COUNTDOWN_MS;
    let zero = |_: &PlayerId| 0u32;
    HalliGalliState {
        options: options.clone(),
        active: order.clone(),
        eliminated: Vec::new(),
        face_up: order.iter().map(|p| (p.clone(), face_up.get(p).cloned().unwrap_or_default())).collect(),
        decks,
        pot,
        removed,
        turn: first,
        turn_started_at: now,
        turn_deadline: if phase == Phase::Playing { now + options.flip_ms() } else { countdown_ends_at },
        flip_allowed_at: now,
        pending_flip: None,
        table_version: 0,
        locked_until: BTreeMap::new(),
        wrong_count: order.iter().map(|p| (p.clone(), zero(p))).collect(),
        correct_count: order.iter().map(|p| (p.clone(), zero(p))).collect(),
        ring_window: None,
        phase,
        started_at: now,
        countdown_ends_at,
        ends_at: options.time_limit_min.map(|m| countdown_ends_at + i64::from(m) * 60_000),
        last_bell: None,
        end_reason: None,
        ended_at: None,
        order,
    }
}

/// Every legality check (§8.2). Never changes anything.
pub fn validate(
    state: &HalliGalliState,
    actor: &Actor,
    input: &HalliGalliInput,
    now: i64,
) -> Result<(), HalliGalliReject> {
    match input {
        Input::Client(action) => {
            let Actor::Player(p) = actor else {
                return Err(HalliGalliReject::NotSeated);
            };
            if !state.order.contains(p) {
                return Err(HalliGalliReject::NotSeated);
            }
            in_play(state)?;
            if !state.is_active(p) {
                return Err(HalliGalliReject::Eliminated);
            }
            match action {
                HalliGalliAction::Flip {} => {
                    if state.options.auto_flip {
                        return Err(HalliGalliReject::AutoFlip);
                    }
                    can_flip(state, p)
                }
                HalliGalliAction::Ring { version } => {
                    if now < state.locked_until_of(p) {
                        return Err(HalliGalliReject::Locked);
                    }
                    if *version != state.table_version {
                        return Err(HalliGalliReject::Late);
                    }
                    if state.ring_window.as_ref().is_some_and(|w| w.rings.iter().any(|r| &r.player == p)) {
                        return Err(HalliGalliReject::AlreadyRang);
                    }
                    Ok(())
                }
            }
        }
        Input::System(system) => match system {
            HalliGalliSystem::Tick {} => {
                if actor != &Actor::Server {
                    return Err(HalliGalliReject::ServerOnly);
                }
                if state.phase == Phase::Ended {
                    return Err(HalliGalliReject::GameOver);
                }
                if state.ring_window.is_some() || state.deadline().is_none_or(|d| d > now) {
                    return Err(HalliGalliReject::NotDue);
                }
                Ok(())
            }
            HalliGalliSystem::Resolve {} => {
                if actor != &Actor::Server {
                    return Err(HalliGalliReject::ServerOnly);
                }
                in_play(state)?;
                match &state.ring_window {
                    Some(w) if w.closes_at() <= now => Ok(()),
                    _ => Err(HalliGalliReject::NotDue),
                }
            }
            HalliGalliSystem::TimeoutFlip {} => {
                let Actor::Player(p) = actor else {
                    return Err(HalliGalliReject::NotSeated);
                };
                in_play(state)?;
                if !state.is_active(p) {
                    return Err(HalliGalliReject::Eliminated);
                }
                can_flip(state, p)
            }
        },
    }
}

fn in_play(state: &HalliGalliState) -> Result<(), HalliGalliReject> {
    match state.phase {
        Phase::Countdown => Err(HalliGalliReject::NotStarted),
        Phase::Ended => Err(HalliGalliReject::GameOver),
        Phase::Playing => Ok(()),
    }
}

fn can_flip(state: &HalliGalliState, p: &PlayerId) -> Result<(), HalliGalliReject> {
    if &state.turn != p {
        return Err(HalliGalliReject::NotYourTurn);
    }
    if state.pending_flip.is_some() {
        return Err(HalliGalliReject::AlreadyReserved);
    }
    if state.deck_len(p) == 0 {
        return Err(HalliGalliReject::EmptyDeck);
    }
    Ok(())
}

/// The 56 cards are each in exactly one place (decks, face-up piles, pot, removed).
pub fn check_cards(state: &HalliGalliState) -> Result<(), String> {
    let mut seen = [false; DECK_SIZE as usize];
    let all = state.decks.values().chain(state.face_up.values()).flatten().chain(&state.pot).chain(&state.removed);
    let mut count = 0;
    for &c in all {
        count += 1;
        match seen.get_mut(c as usize) {
            Some(s) if !*s => *s = true,
            Some(_) => return Err(format!("card {c} appears twice")),
            None => return Err(format!("card {c} does not exist")),
        }
    }
    if count != DECK_SIZE as usize {
        return Err(format!("{count} cards instead of {DECK_SIZE}"));
    }
    Ok(())
}
