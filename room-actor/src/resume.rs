//! Start-up of a node whose store outlives it (the embedded node on the file store):
//! every room the store lists as open is rebuilt and spawned again, through the same
//! `RoomActor::restore` the cluster's failover uses: games continue from snapshot + log,
//! retried `cs` are deduplicated from the log, and no deadline is enforced before the
//! recovery hold (`RECOVERY_HOLD_MS`) so players have time to reconnect.

use crate::directory::RoomHandle;
use crate::error::{RebuildError, StoreError};
use crate::info::RoomInfo;
use crate::log::StoredGame;
use crate::room::{RoomActor, RoomDeps};
use crate::store::Fence;
use engine::registry::{self, GameVisitor};
use engine::Game;
use tracing::{error, info};

/// What a resume did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Resumed {
    /// Rooms running again (waiting rooms included).
    pub rooms: usize,
    /// Of those, rooms whose game continues from its log.
    pub games: usize,
    /// Rooms that could not be rebuilt: (room id, why). They stay in the store untouched.
    pub failed: Vec<(String, String)>,
}

struct Restore {
    info: RoomInfo,
    stored: Option<StoredGame>,
    deps: RoomDeps,
}

impl GameVisitor for Restore {
    type Output = Result<RoomHandle, RebuildError>;
    fn visit<G: Game>(self) -> Self::Output {
        Ok(RoomActor::<G>::restore(self.info, self.stored, self.deps, Fence::Sole)?.spawn())
    }
}

/// Rebuilds every open room of `deps.store` on this node (call inside an actix system).
/// A store that cannot be read is an error; a room that cannot be rebuilt is logged and
/// listed in `failed`, the others still resume.
pub async fn resume_open_rooms(deps: &RoomDeps) -> Result<Resumed, StoreError> {
    let mut resumed = Resumed::default();
    for info in deps.store.open_rooms().await? {
        let room = info.room_id.clone();
        let stored = match &info.game_pk {
            Some(pk) => deps.store.load(pk).await?,
            None => None,
        };
        let has_game = stored.is_some();
        let game = info.game.clone();
        match registry::visit(&game, Restore { info, stored, deps: deps.clone() }) {
            Some(Ok(_)) => {
                resumed.rooms += 1;
                if has_game {
                    resumed.games += 1;
                    deps.metrics.rooms_restored.inc();
                }
            }
            Some(Err(e)) => {
                error!(room = %room, error = %e, "room cannot be resumed; it stays in the store");
                resumed.failed.push((room, e.to_string()));
            }
            None => {
                error!(room = %room, game = %game, "room of an unknown game cannot be resumed");
                resumed.failed.push((room, format!("unknown game {game}")));
            }
        }
    }
    info!(rooms = resumed.rooms, games = resumed.games, failed = resumed.failed.len(), "rooms resumed");
    Ok(resumed)
}
