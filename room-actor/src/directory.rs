//! The rooms this node knows: their public info (for listings) and their addresses.
//! Each room actor keeps its own entry up to date; the gateway only reads.

pub use crate::info::{RoomInfo, RoomStatus, SeatInfo};
use crate::messages::{
    Act, Close, GetInfo, Handover, Inspect, Kick, LeaveSeat, RemoveSeat, RttSample, Start, Subscribe, TakeSeat,
    Unsubscribe,
};
use actix::prelude::*;
use engine::PlayerId;
use std::collections::HashMap;
use std::sync::RwLock;

/// Everything that talks to a room, without knowing its game type.
#[derive(Clone)]
pub struct RoomHandle {
    pub subscribe: Recipient<Subscribe>,
    pub unsubscribe: Recipient<Unsubscribe>,
    pub act: Recipient<Act>,
    pub rtt: Recipient<RttSample>,
    pub info: Recipient<GetInfo>,
    pub take_seat: Recipient<TakeSeat>,
    pub leave_seat: Recipient<LeaveSeat>,
    pub remove_seat: Recipient<RemoveSeat>,
    pub start: Recipient<Start>,
    pub handover: Recipient<Handover>,
    pub close: Recipient<Close>,
    pub kick: Recipient<Kick>,
    pub inspect: Recipient<Inspect>,
}

struct Entry {
    info: RoomInfo,
    handle: RoomHandle,
}

/// Rooms by id. A std `RwLock`: every access is a short map operation, never held
/// across an await.
#[derive(Default)]
pub struct Directory {
    rooms: RwLock<HashMap<String, Entry>>,
}

impl Directory {
    pub fn new() -> Directory {
        Directory::default()
    }

    pub fn insert(&self, info: RoomInfo, handle: RoomHandle) {
        if let Ok(mut rooms) = self.rooms.write() {
            rooms.insert(info.room_id.clone(), Entry { info, handle });
        }
    }

    /// Replaces a room's info (the room calls this after every change).
    pub fn update(&self, info: RoomInfo) {
        if let Ok(mut rooms) = self.rooms.write() {
            if let Some(entry) = rooms.get_mut(&info.room_id) {
                entry.info = info;
            }
        }
    }

    pub fn remove(&self, room_id: &str) {
        if let Ok(mut rooms) = self.rooms.write() {
            rooms.remove(room_id);
        }
    }

    pub fn handle(&self, room_id: &str) -> Option<RoomHandle> {
        self.rooms.read().ok()?.get(room_id).map(|e| e.handle.clone())
    }

    pub fn info(&self, room_id: &str) -> Option<RoomInfo> {
        self.rooms.read().ok()?.get(room_id).map(|e| e.info.clone())
    }

    /// Rooms matching the filters, newest first.
    pub fn list(&self, game: Option<&str>, status: Option<RoomStatus>) -> Vec<RoomInfo> {
        let Ok(rooms) = self.rooms.read() else { return Vec::new() };
        let mut out: Vec<RoomInfo> = rooms
            .values()
            .map(|e| &e.info)
            .filter(|i| game.is_none_or(|g| i.game == g) && status.is_none_or(|s| i.status == s))
            .cloned()
            .collect();
        out.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.room_id.cmp(&b.room_id)));
        out
    }

    /// Rooms a user has created and not yet finished (for per-user caps).
    pub fn open_rooms_of(&self, host: &PlayerId) -> usize {
        self.rooms
            .read()
            .map(|r| r.values().filter(|e| &e.info.host == host && e.info.status != RoomStatus::Ended).count())
            .unwrap_or(0)
    }

    /// Waiting rooms `user` sits in (hosting included), other than `except`.
    pub fn waiting_seats_of(&self, user: &PlayerId, except: Option<&str>) -> usize {
        self.rooms
            .read()
            .map(|r| {
                r.values()
                    .filter(|e| e.info.status == RoomStatus::Waiting && Some(e.info.room_id.as_str()) != except)
                    .filter(|e| e.info.seats.iter().any(|s| &s.user_id == user))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Every room's id and handle (drain hands them all over).
    pub fn handles(&self) -> Vec<(String, RoomHandle)> {
        self.rooms.read().map(|r| r.iter().map(|(id, e)| (id.clone(), e.handle.clone())).collect()).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.rooms.read().map(|r| r.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
