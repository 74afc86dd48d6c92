//! Creating a room for a game chosen at run time.

use crate::directory::RoomHandle;
use crate::room::{RoomActor, RoomDeps, RoomSpec};
use engine::options::{self, OptionsError};
use engine::registry::{self, GameVisitor};
use engine::{Game, PlayerId, Seed};
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
}

struct SpawnVisitor {
    new: NewRoom,
    deps: RoomDeps,
}

impl GameVisitor for SpawnVisitor {
    type Output = Result<RoomHandle, CreateError>;

    fn visit<G: Game>(self) -> Self::Output {
        let opts = options::parse::<G>(self.new.options.as_ref())?;
        let options_json = serde_json::to_value(&opts).map_err(|e| OptionsError::Decode(e.to_string()))?;
        let spec = RoomSpec {
            room_id: self.new.room_id,
            options: opts,
            options_json,
            host: self.new.host,
            host_name: self.new.host_name,
            grace_sec: self.new.grace_sec,
            seed: self.new.seed,
        };
        Ok(RoomActor::<G>::new(spec, self.deps).spawn())
    }
}

/// Validates the options and starts the room's actor on the current arbiter.
pub fn create_room(new: NewRoom, deps: RoomDeps) -> Result<RoomHandle, CreateError> {
    let game = new.game.clone();
    registry::visit(&game, SpawnVisitor { new, deps }).unwrap_or(Err(CreateError::UnknownGame(game)))
}
