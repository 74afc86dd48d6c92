//! The rooms this node knows: their public info (for listings) and their addresses.
//! Each room actor keeps its own entry up to date; the gateway only reads.

pub use crate::info::{RoomInfo, RoomStatus, SeatInfo};
use crate::messages::{Answer, Ask, Handover, Request, RoomOpError, Sender, SessionVerb, Tell};
use actix::prelude::*;
use engine::PlayerId;
use futures_util::future::LocalBoxFuture;
use std::sync::{Arc, RwLock};

/// Everything that talks to a room, without knowing its game type: the room's one
/// address, shared. (A `Recipient` per message type would cost its own sender state,
/// ~110 bytes each, for every copy of the handle: ~1.5 KB per room and copy.)
#[derive(Clone)]
pub struct RoomHandle(Arc<dyn Mailbox>);

/// A room actor's address without its game type: every verb goes in through one of two
/// doors, by kind (`protocol.rs`), so a new verb needs nothing here.
pub trait Mailbox: Send + Sync + 'static {
    /// A session verb, at once: `room_unavailable` when the mailbox is full (a burst the room cannot
    /// take) or the actor stopped.
    fn tell(&self, from: Sender, verb: SessionVerb) -> Result<(), RoomOpError>;
    /// A request, answered by the room (`room_unavailable` if its actor stopped).
    fn ask(&self, request: Request) -> LocalBoxFuture<'static, Result<Answer, RoomOpError>>;
    /// `false` once the actor has stopped.
    fn connected(&self) -> bool;
    /// The node's own: finish the current input and stop (drain, rebalancing).
    fn handover(&self) -> Recipient<Handover>;
}

impl RoomHandle {
    pub fn new(mailbox: impl Mailbox) -> RoomHandle {
        RoomHandle(Arc::new(mailbox))
    }

    /// Asks the room `verb`; the answer, once it comes (the request is in the room's
    /// mailbox already: the future holds no borrow of the handle).
    pub fn ask<V: Ask>(&self, verb: V) -> impl std::future::Future<Output = Result<V::Answer, RoomOpError>> + 'static {
        let sent = self.0.ask(verb.into_request());
        async move { V::from_answer(sent.await?).ok_or_else(RoomOpError::unavailable) }
    }

    /// Tells the room a session's `verb`; `Err` when its mailbox did not take it.
    pub fn tell<V: Tell>(&self, from: Sender, verb: V) -> Result<(), RoomOpError> {
        self.0.tell(from, verb.into_verb())
    }
}

impl std::ops::Deref for RoomHandle {
    type Target = dyn Mailbox;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

struct Entry {
    info: RoomInfo,
    handle: RoomHandle,
}

/// Rooms by id. A std `RwLock`: every access is a short map operation, never held
/// across an await.
#[derive(Default)]
pub struct Directory {
    rooms: RwLock<crate::FastMap<String, Entry>>,
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
