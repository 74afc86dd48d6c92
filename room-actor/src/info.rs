//! A room's public info: what `GET /api/rooms/{roomId}` shows, what listings are made
//! of, and what a node needs to bring a room back to life elsewhere. The floor under
//! `messages` and `directory` (and the stores), which all use it.

use engine::PlayerId;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A seat in a room.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeatInfo {
    pub user_id: PlayerId,
    pub name: String,
    pub bot: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RoomStatus {
    Waiting,
    Playing,
    Ended,
}

/// `GET /api/rooms/{roomId}`; also what a node needs to bring a room back to life
/// elsewhere (stored by the room on every change in cluster mode).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomInfo {
    pub room_id: String,
    pub game: String,
    pub options: Arc<serde_json::Value>,
    pub host: PlayerId,
    pub seats: Vec<SeatInfo>,
    pub status: RoomStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub game_pk: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The owner node's public base URL (`ROOMD__NODE__PUBLIC_URL`) when it has one:
    /// clients may connect their WebSocket to `{nodeUrl}/ws` there, and skip the hop
    /// from the node they reached to the room's owner. Any node still serves every room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_url: Option<String>,
    pub grace_sec: u32,
    pub min_players: usize,
    pub max_players: usize,
    pub created_at: i64,
    /// Players who left the running game (for good: they do not get their grace back by
    /// reconnecting), saved so that they stay gone when the room moves to another node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone: Vec<PlayerId>,
    /// Users an operator kicked: they may not sit or watch here again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kicked: Vec<PlayerId>,
    /// Users the host removed from a seat (the last [`crate::room::MAX_REMOVED`]): they may watch
    /// but not sit here again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<PlayerId>,
    /// Whether the room is in the players' lobby (`POST /api/rooms` `listed`). `None`
    /// only in info saved before rooms said: the game's default ([`RoomInfo::is_listed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listed: Option<bool>,
}

impl RoomInfo {
    /// Whether the lobby shows this room: as created, or the game's default.
    pub fn is_listed(&self) -> bool {
        self.listed.unwrap_or_else(|| engine::registry::listed_by_default(&self.game))
    }
}
