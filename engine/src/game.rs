//! The game contract (`game-engine.md` §2) as a Rust trait.
//!
//! One implementation per game, all associated functions: a game is a set of pure
//! functions over plain serde data. Time arrives only as `now` (epoch ms) in [`Ctx`];
//! randomness only as `&mut Rng` lent by the runner.

use crate::error::EngineError;
use crate::option_meta::OptionMeta;
use crate::rng::Rng;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::{self, Debug};
use std::sync::Arc;

/// A player's id: the user id of the person (or bot) in that seat.
///
/// Shared, not owned: states hold a player's id in many places (seat order, per-player
/// maps, the turn) and `apply` returns a new state, so cloning an id must not allocate.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PlayerId(pub Arc<str>);

impl PlayerId {
    pub fn new(id: impl AsRef<str>) -> PlayerId {
        PlayerId(Arc::from(id.as_ref()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PlayerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for PlayerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for PlayerId {
    fn from(s: &str) -> PlayerId {
        PlayerId(Arc::from(s))
    }
}

impl From<String> for PlayerId {
    fn from(s: String) -> PlayerId {
        PlayerId(Arc::from(s))
    }
}

/// Who an input is applied for. Client actions always come from a player; timeouts are
/// applied for the player who ran out of time; game-wide ticks come from the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Actor {
    Player(PlayerId),
    Server,
}

impl Actor {
    pub fn player(&self) -> Option<&PlayerId> {
        match self {
            Actor::Player(p) => Some(p),
            Actor::Server => None,
        }
    }
}

/// What the runner feeds a game: a client action (the only thing the wire can produce)
/// or a system input (timeout, tick, resolve) that only the server creates. Externally
/// tagged so the log codec can decode it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Input<A, S> {
    Client(A),
    System(S),
}

/// The input type of game `G`.
pub type InputOf<G> = Input<<G as Game>::Action, <G as Game>::System>;

/// For games without system inputs: an enum with no values, so the type system proves
/// the runner never builds one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NoSystemInput {}

/// Per-input context, stamped by the runner when it takes the input off the room's queue
/// and logged with it, so a replay passes exactly the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ctx {
    /// Server time (epoch ms) when the room took the input: `serverTs`.
    pub now: i64,
    /// The actor's round-trip time estimate at that moment, if known (latency
    /// compensation reads it; it is part of the log so replays judge identically).
    pub rtt_ms: Option<u32>,
}

impl Ctx {
    pub fn at(now: i64) -> Ctx {
        Ctx { now, rtt_ms: None }
    }
}

/// What a view may show besides the state: the time it is built at and the players'
/// measured RTTs. Neither changes the game.
#[derive(Clone, Copy, Debug)]
pub struct ViewCtx<'a> {
    pub now: i64,
    pub rtt: Option<&'a BTreeMap<PlayerId, u32>>,
}

impl<'a> ViewCtx<'a> {
    pub fn at(now: i64) -> ViewCtx<'a> {
        ViewCtx { now, rtt: None }
    }

    pub fn rtt_of(&self, p: &PlayerId) -> Option<u32> {
        self.rtt.and_then(|m| m.get(p).copied())
    }
}

/// Everything `setup` gets besides the RNG.
#[derive(Clone, Debug)]
pub struct SetupCtx<'a, O> {
    /// Seats from the host clockwise.
    pub players: &'a [PlayerId],
    pub options: &'a O,
    pub now: i64,
    pub game_no: Option<u32>,
}

/// What `apply` returns: the next state and public events (for animation and logs).
#[derive(Clone, Debug, PartialEq)]
pub struct Applied<S, E> {
    pub state: S,
    pub events: Vec<E>,
}

/// A refusal: a stable snake_case `code` for programs and a Korean `reason` for people.
pub trait Reject: Debug + Clone + Send + 'static {
    fn code(&self) -> &'static str;
    fn reason(&self) -> Cow<'static, str>;
}

/// Inclusive player-count range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerRange {
    pub min: usize,
    pub max: usize,
}

impl PlayerRange {
    pub fn contains(&self, n: usize) -> bool {
        (self.min..=self.max).contains(&n)
    }
}

/// Why a game ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResultReason {
    Normal,
    Resign,
    Timeout,
    Abandoned,
    DrawAgreed,
}

/// The end of a game, as `game-engine.md` §2 defines it, plus a game-specific `details`
/// object (per-player card counts, fronts per kind, end reason, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GameResult {
    /// Places from first to last; players sharing a place share an inner list.
    pub ranking: Vec<Vec<PlayerId>>,
    pub scores: Option<BTreeMap<PlayerId, i64>>,
    /// Korean one-line summary, e.g. "도윤님이 56장을 모두 모아 우승!".
    pub summary: String,
    pub reason: ResultReason,
    /// Game-specific result fields (JSON object).
    pub details: serde_json::Value,
}

/// A piece of hidden information the leak checker must never find in what a viewer
/// receives. See `testing::leak` for how each kind is matched.
#[derive(Clone, Debug, PartialEq)]
pub enum Secret {
    /// A card id. Card ids determine the face, so a hidden card's id is as secret as
    /// its face: it must not appear as the number in a field named `id`, `card` or
    /// ending in `Id`/`_id`, nor in an array under those names or `ids`, `cards`, `…Ids`,
    /// `…_ids` (see `testing::leak`).
    Card(u32),
    /// A JSON value that must not appear anywhere as a subtree (e.g. `{"fruit":..}` of
    /// a specific hidden card, or a hidden pile's exact order).
    Value(serde_json::Value),
}

/// A bot's choice: the input and how long a person would have taken.
#[derive(Clone, Debug, PartialEq)]
pub struct BotMove<I> {
    pub input: I,
    pub delay_ms: i64,
}

/// One quick-chat phrase: a stable key clients send and a Korean label they show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ChatPhrase {
    pub key: &'static str,
    pub label: &'static str,
}

/// A game, as the runner, the harness and the bots see it.
///
/// Contract (checked by `testing::harness` for every game):
/// - `validate` decides all legality, including turn order, and never changes anything;
/// - `apply` only receives validated inputs and returns `Err` (never panics) if an
///   invariant breaks;
/// - states round-trip through JSON; same seed + same inputs = same states and events;
/// - views and events never carry `secrets_of(state, viewer)`;
/// - `on_timeout(state, p)` validates for every `p` in `timeout_players(state)`.
pub trait Game: Sized + Send + Sync + 'static {
    /// Stable id (`halli-galli`, `cockroach-poker`, `tally`).
    const ID: &'static str;
    /// Korean display name.
    const NAME_KO: &'static str;
    const MIN_PLAYERS: usize;
    const MAX_PLAYERS: usize;
    /// Bumped whenever `State` changes shape or rules change outcomes; stored in the
    /// start entry of every log so replays of older games answer 410 instead of lying.
    const STATE_VERSION: u32;
    /// Whether a new room of this game is in the players' lobby unless its creator says
    /// otherwise (`POST /api/rooms` `listed`). A game for developers and load tests is not.
    const LISTED: bool = true;

    type State: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + Unpin + 'static;
    type Options: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + Unpin + 'static;
    /// What a client may send. Deserialized with `deny_unknown_fields`: that is the
    /// runner's shape check.
    type Action: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + Unpin + 'static;
    /// Inputs only the server creates (timeouts, ticks, resolves).
    type System: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + Unpin + 'static;
    type View: Debug + Serialize;
    /// Public events for animation and logs. Never hidden information.
    type Event: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + Unpin + 'static;
    type Reject: Reject;

    /// Every option with its Korean title, choices with Korean labels, and default.
    fn options_meta() -> Vec<OptionMeta>;

    fn state_version() -> u32 {
        Self::STATE_VERSION
    }

    /// The quick-chat phrases seated players may send (`PROTOCOL.md`: `chatPhrases` in
    /// the catalog, the `chat` message). Fixed phrases only, never free text; empty for a
    /// game without quick chat. Chat is not an input: it never reaches the log.
    fn chat_phrases() -> &'static [ChatPhrase] {
        &[]
    }

    /// Whether quick chat is on in a room with these options (a game with phrases may
    /// have an option that turns it off).
    fn chat_on(_options: &Self::Options) -> bool {
        !Self::chat_phrases().is_empty()
    }

    /// The player range for these options (some modes change it).
    fn players_for(_options: &Self::Options) -> PlayerRange {
        PlayerRange { min: Self::MIN_PLAYERS, max: Self::MAX_PLAYERS }
    }

    fn setup(ctx: SetupCtx<'_, Self::Options>, rng: &mut Rng) -> Result<Self::State, EngineError>;

    fn validate(state: &Self::State, actor: &Actor, input: &InputOf<Self>, ctx: &Ctx) -> Result<(), Self::Reject>;

    #[allow(clippy::type_complexity)]
    fn apply(
        state: &Self::State,
        actor: &Actor,
        input: &InputOf<Self>,
        ctx: &Ctx,
        rng: &mut Rng,
    ) -> Result<Applied<Self::State, Self::Event>, EngineError>;

    /// The view of `viewer` (`None`: a spectator). Hidden information never appears.
    fn view(state: &Self::State, viewer: Option<&PlayerId>, ctx: &ViewCtx<'_>) -> Self::View;

    /// The full view sent on (re)connect and `sync`.
    fn sync_view(state: &Self::State, viewer: Option<&PlayerId>, ctx: &ViewCtx<'_>) -> Self::View {
        Self::view(state, viewer, ctx)
    }

    /// The JSON of [`Game::view`] for each of `viewers`, in order: what the runner sends
    /// its subscribers after every input. Each must be exactly
    /// `serde_json::to_string(&Self::view(state, viewer, ctx))` (the harness checks it).
    /// The default builds them so; a game whose views differ only in a few fields may
    /// serialize the rest once (Halli Galli: the table is everybody's).
    fn views_json(
        state: &Self::State,
        viewers: &[Option<&PlayerId>],
        ctx: &ViewCtx<'_>,
    ) -> Result<Vec<String>, serde_json::Error> {
        viewers.iter().map(|viewer| serde_json::to_string(&Self::view(state, *viewer, ctx))).collect()
    }

    /// The JSON of `events` (one input's events, in order): what every subscriber's
    /// `update` carries. Must be exactly `serde_json::to_string(events)` (the harness
    /// checks it); a game may write it without serde's per-name escaping.
    fn events_json(events: &[Self::Event]) -> Result<String, serde_json::Error> {
        serde_json::to_string(events)
    }

    /// Who the game waits for now (display and timers; the runner never blocks on it).
    fn active_players(state: &Self::State) -> Vec<PlayerId>;

    /// When the game next needs the server to act, if ever (epoch ms).
    fn deadline(_state: &Self::State) -> Option<i64> {
        None
    }

    /// The players a deadline applies to (default: `active_players`).
    fn timeout_players(state: &Self::State) -> Vec<PlayerId> {
        Self::active_players(state)
    }

    /// Before this time nobody is timed out for being disconnected (real-time games).
    fn timeout_not_before(_state: &Self::State) -> Option<i64> {
        None
    }

    /// Grace for disconnected timeout players (ms); `None` uses the room's `graceSec`.
    fn disconnect_grace_ms(_state: &Self::State) -> Option<i64> {
        None
    }

    /// Frequent actions relayed as events only and stored in batches (none of ours).
    fn is_stream_action(_action: &Self::Action) -> bool {
        false
    }

    /// The game-wide system input to apply once `deadline` has passed (a tick that
    /// flips, resolves or ends the game). `None`: the deadline is a player's, and the
    /// runner applies `on_timeout` for the first timeout player.
    fn tick(_state: &Self::State, _now: i64) -> Option<Self::System> {
        None
    }

    /// What `player` does when out of time (deadline passed or disconnect grace over).
    fn on_timeout(state: &Self::State, player: &PlayerId) -> InputOf<Self>;

    /// What happens when `player` leaves mid-game, if anything.
    fn on_leave(_state: &Self::State, _player: &PlayerId) -> Option<InputOf<Self>> {
        None
    }

    fn result(state: &Self::State) -> Option<GameResult>;

    /// Brings a state stored under an older `state_version` up to date.
    fn migrate(old: serde_json::Value, from_version: u32) -> Result<Self::State, EngineError> {
        if from_version != Self::STATE_VERSION {
            return Err(EngineError::Migration { from: from_version, to: Self::STATE_VERSION });
        }
        serde_json::from_value(old).map_err(|e| EngineError::Decode { what: "state", message: e.to_string() })
    }

    /// Every input `player` could legally send now (tests and bots).
    fn legal_actions(state: &Self::State, player: &PlayerId, now: i64) -> Vec<InputOf<Self>>;

    /// What `viewer` must never learn in this state (leak checker).
    fn secrets_of(state: &Self::State, viewer: Option<&PlayerId>) -> Vec<Secret>;

    /// The bot strategy: it sees only its own view and its legal inputs.
    fn bot_move(
        view: &Self::View,
        me: &PlayerId,
        legal: &[InputOf<Self>],
        rng: &mut Rng,
    ) -> Option<BotMove<InputOf<Self>>>;
}
