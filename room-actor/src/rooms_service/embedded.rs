//! What only an embedded node does: its caps counted in its directory and in memory, its
//! lobby and operators' listings read from its directory, its file store's probe.

use super::{Caps, Readiness, Refused, SocketRefused};
use crate::cluster::ops::{RoomFilter, RoomRow};
use crate::info::{RoomInfo, RoomStatus};
use crate::lobby::{self, LobbyFilter};
use crate::room::RoomDeps;
use crate::room_ref::{Inspection, Rooms};
use crate::spawn::{prepare_room, NewRoom};
use crate::store::file::FileStore;
use engine::PlayerId;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

pub(super) struct Embedded {
    /// The durable store (`store.kind = file`), for readiness and the data file.
    file_store: Option<FileStore>,
    /// Open sockets per user (the per-user cap).
    sockets: Mutex<HashMap<PlayerId, usize>>,
}

impl Embedded {
    pub(super) fn new(file_store: Option<FileStore>) -> Embedded {
        Embedded { file_store, sockets: Mutex::new(HashMap::new()) }
    }

    pub(super) fn durable(&self) -> bool {
        self.file_store.is_some()
    }

    pub(super) fn data_file(&self) -> Option<&Path> {
        self.file_store.as_ref().map(FileStore::file)
    }

    pub(super) fn file_store(&self) -> Option<FileStore> {
        self.file_store.clone()
    }

    pub(super) fn open_socket(&self, user: &PlayerId, cap: usize) -> Result<(), SocketRefused> {
        let Ok(mut sockets) = self.sockets.lock() else { return Err(SocketRefused::Broken) };
        let open = sockets.entry(user.clone()).or_insert(0);
        if *open >= cap {
            return Err(SocketRefused::Full);
        }
        *open += 1;
        Ok(())
    }

    pub(super) fn close_socket(&self, user: &PlayerId) {
        if let Ok(mut sockets) = self.sockets.lock() {
            if let Some(open) = sockets.get_mut(user) {
                *open = open.saturating_sub(1);
                if *open == 0 {
                    sockets.remove(user);
                }
            }
        }
    }

    /// On the file store, a real write and fsync: a full disk or a failing device is
    /// `StoreUnavailable`.
    pub(super) async fn readiness(&self) -> Readiness {
        if let Some(store) = &self.file_store {
            if !store.probe().await {
                return Readiness::StoreUnavailable;
            }
        }
        Readiness::Ready { live_nodes: None }
    }
}

/// The host's open rooms counted in the directory; the room stored before it is
/// acknowledged (issue 57), then started.
pub(super) async fn create(deps: &RoomDeps, caps: Caps, new: NewRoom) -> Result<(), Refused> {
    if deps.directory.open_rooms_of(&new.host) >= caps.open_rooms_per_user {
        return Err(Refused::TooManyRooms);
    }
    let room = prepare_room(new, deps.clone()).map_err(Refused::Invalid)?;
    deps.store.put_room(&room.info).await.map_err(|_| Refused::Unavailable)?;
    room.spawn();
    Ok(())
}

/// The lobby from the directory, with the same order and cursors as the cluster's index.
pub(super) fn lobby_page(
    deps: &RoomDeps,
    cursor: Option<&str>,
    limit: usize,
    filter: &LobbyFilter,
) -> (Vec<RoomInfo>, Option<String>) {
    lobby::page_of(deps.directory.list(filter.game.as_deref(), filter.status), cursor, limit, filter)
}

/// This node's open rooms in id order after the cursor, each started game's seq read from
/// its room.
pub(super) async fn admin_rooms(
    deps: &RoomDeps,
    rooms: &Rooms,
    cursor: Option<&str>,
    limit: usize,
    filter: &RoomFilter,
) -> (Vec<RoomRow>, Option<String>) {
    let mut infos: Vec<RoomInfo> = deps
        .directory
        .list(filter.game.as_deref(), None)
        .into_iter()
        .filter(|i| i.status != RoomStatus::Ended)
        .filter(|_| filter.node.as_ref().is_none_or(|n| n == &deps.node_id))
        .filter(|i| cursor.is_none_or(|c| i.room_id.as_str() > c))
        .collect();
    infos.sort_by(|a, b| a.room_id.cmp(&b.room_id));
    let more = infos.len() > limit;
    infos.truncate(limit);
    let seqs = futures_util::future::join_all(infos.iter().map(|i| async {
        match rooms.inspect(&i.room_id).await.ok()? {
            Inspection::Live { view, .. } => Some(view.seq),
            Inspection::Stored(_) => None,
        }
    }))
    .await;
    let next = if more { infos.last().map(|i| i.room_id.clone()) } else { None };
    let rows = infos
        .into_iter()
        .zip(seqs)
        .map(|(info, seq)| RoomRow {
            seq: seq.filter(|_| info.game_pk.is_some()),
            info,
            owner: Some(deps.node_id.clone()),
        })
        .collect();
    (rows, next)
}
