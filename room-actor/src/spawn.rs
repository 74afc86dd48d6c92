//! Creating a room for a game chosen at run time.

use crate::directory::RoomHandle;
use crate::info::{RoomInfo, RoomStatus, SeatInfo};
use crate::room::{RoomActor, RoomDeps, RoomSpec};
use engine::options::{self, OptionsError};
use engine::registry::{self, GameVisitor};
use engine::{Game, PlayerId, Seed};
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CreateError {
    #[error("unknown game `{0}`")]
    UnknownGame(String),
    #[error(transparent)]
    Options(#[from] OptionsError),
}

/// `POST /api/rooms`, validated.
pub struct NewRoom {
    pub room_id: String,
    pub game: String,
    pub options: Option<serde_json::Value>,
    pub host: PlayerId,
    pub host_name: String,
    pub grace_sec: u32,
    pub seed: Option<Seed>,
    /// In the players' lobby? `None`: the game's default ([`engine::Game::LISTED`]).
    pub listed: Option<bool>,
}

/// A new room built but not running yet: its info, to store before the room is
/// acknowledged (the embedded node), then [`Prepared::spawn`].
pub struct Prepared {
    pub info: RoomInfo,
    start: Box<dyn FnOnce() -> RoomHandle>,
}

impl Prepared {
    /// Starts the room's actor on the current arbiter.
    pub fn spawn(self) -> RoomHandle {
        (self.start)()
    }
}

struct PrepareVisitor {
    new: NewRoom,
    deps: RoomDeps,
}

impl GameVisitor for PrepareVisitor {
    type Output = Result<Prepared, CreateError>;

    fn visit<G: Game>(self) -> Self::Output {
        let opts = options::parse::<G>(self.new.options.as_ref())?;
        let options_json = Arc::new(serde_json::to_value(&opts).map_err(|e| OptionsError::Decode(e.to_string()))?);
        let spec = RoomSpec {
            room_id: self.new.room_id,
            options: opts,
            options_json,
            host: self.new.host,
            host_name: self.new.host_name,
            grace_sec: self.new.grace_sec,
            seed: self.new.seed,
            listed: self.new.listed.unwrap_or(G::LISTED),
        };
        let room = RoomActor::<G>::new(spec, self.deps);
        Ok(Prepared { info: room.info(), start: Box::new(move || room.spawn()) })
    }
}

struct DescribeVisitor<'a> {
    new: &'a NewRoom,
    node: &'a str,
    now: i64,
}

impl GameVisitor for DescribeVisitor<'_> {
    type Output = Result<RoomInfo, CreateError>;

    fn visit<G: Game>(self) -> Self::Output {
        let opts = options::parse::<G>(self.new.options.as_ref())?;
        let range = G::players_for(&opts);
        Ok(RoomInfo {
            room_id: self.new.room_id.clone(),
            game: G::ID.to_owned(),
            options: Arc::new(serde_json::to_value(&opts).map_err(|e| OptionsError::Decode(e.to_string()))?),
            host: self.new.host.clone(),
            seats: vec![SeatInfo { user_id: self.new.host.clone(), name: self.new.host_name.clone(), bot: false }],
            status: RoomStatus::Waiting,
            game_pk: None,
            node: Some(self.node.to_owned()),
            // Named by the node that activates the room (placement may pick another).
            node_url: None,
            grace_sec: self.new.grace_sec,
            min_players: range.min,
            max_players: range.max,
            created_at: self.now,
            gone: Vec::new(),
            kicked: Vec::new(),
            removed: Vec::new(),
            listed: Some(self.new.listed.unwrap_or(G::LISTED)),
        })
    }
}

/// A new room's info with validated options, without starting it (cluster mode saves
/// this and lets the node placement picks bring the room to life).
pub fn initial_info(new: &NewRoom, node: &str, now: i64) -> Result<RoomInfo, CreateError> {
    registry::visit(&new.game, DescribeVisitor { new, node, now })
        .unwrap_or_else(|| Err(CreateError::UnknownGame(new.game.clone())))
}

/// Validates the options and builds the room (not started: see [`Prepared`]).
pub fn prepare_room(new: NewRoom, deps: RoomDeps) -> Result<Prepared, CreateError> {
    let game = new.game.clone();
    registry::visit(&game, PrepareVisitor { new, deps }).unwrap_or(Err(CreateError::UnknownGame(game)))
}

/// Validates the options and starts the room's actor on the current arbiter.
pub fn create_room(new: NewRoom, deps: RoomDeps) -> Result<RoomHandle, CreateError> {
    prepare_room(new, deps).map(Prepared::spawn)
}

/// Unit tests' room: a tally room `r1` hosted by `h`, on node `n1` with a memory store,
/// registered in `directory`.
#[cfg(test)]
pub(crate) fn tally_r1_for_tests(directory: Arc<crate::directory::Directory>) -> RoomHandle {
    use std::time::Duration;
    let deps = RoomDeps {
        store: Arc::new(crate::store::MemoryStore::new()),
        directory,
        metrics: crate::metrics::RoomMetrics::unregistered().expect("metrics"),
        node_id: "n1".into(),
        public_url: None,
        snapshot_every: 16,
        clock: crate::room::Clock::System,
        ended_linger: Duration::from_secs(60),
        waiting_ttl: Duration::from_secs(60),
        stall_give_up: crate::room::STALL_GIVE_UP,
    };
    let new = NewRoom {
        room_id: "r1".into(),
        game: "tally".into(),
        options: None,
        host: "h".into(),
        host_name: "방장".into(),
        grace_sec: 30,
        seed: None,
        listed: None,
    };
    create_room(new, deps).expect("a tally room")
}
