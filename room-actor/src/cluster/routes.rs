//! Where the rooms that this node's sessions watch on other nodes are, read for the whole
//! node at once.
//!
//! A session whose room lives on another node must notice when the room moves without
//! anyone telling it (its owner died). It used to look the room up itself every second:
//! one `GET` of the lease per remote-routed session per second, the largest share of the
//! cluster's Redis commands in Halli Galli (about 3 per acknowledged action). Now the
//! sessions ask this board, which a node task refreshes every [`REFRESH_EVERY`] for every
//! room asked about lately, in one batch (one pipeline on one Redis, per-slot at once on a
//! cluster), at once when a node dies or leaves, and every [`REFRESH_SOON`] for a while
//! after that. A read that finds a room's holder changed says so ([`RouteBoard::update`]),
//! and the node tells its sessions (`Notice::Moved`): a session watching that room
//! follows it then, not at its next route check (every 2 s, the safety net). A session
//! does its own lookup only when the board says the room's holder is not where its route
//! points (or there is no holder, or the board has not read the room yet). A route to a
//! room on another node is on the board from the moment the session takes it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the board reads the holders of the rooms asked about.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How often it reads them for [`SOON_FOR`] after a node died or left (its rooms are
/// taken over within a few failure-detection polls, and their watchers are told then).
pub const REFRESH_SOON: Duration = Duration::from_millis(200);
pub const SOON_FOR: Duration = Duration::from_secs(3);
/// A room nobody asked about for this long is no longer read.
pub const KEEP: Duration = Duration::from_secs(3);

#[derive(Default)]
pub struct RouteBoard {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Rooms asked about, with when they were last asked.
    asked: crate::FastMap<String, Instant>,
    /// The lease token (`node/epoch`) each room had at the last read (`None`: no lease
    /// then). The token, not only its node: a room claimed anew on the same node (its
    /// lease lapsed while Redis was away) is a new actor its remote watchers must
    /// subscribe to again.
    holders: crate::FastMap<String, Option<String>>,
}

impl RouteBoard {
    pub fn new() -> RouteBoard {
        RouteBoard::default()
    }

    /// The lease token of `room` at the last read (`Some(None)`: nobody held it;
    /// `None`: not read yet), and `room` is read from now on.
    pub fn hint(&self, room: &str, now: Instant) -> Option<Option<String>> {
        let Ok(mut inner) = self.inner.lock() else { return None };
        inner.asked.insert(room.to_owned(), now);
        inner.holders.get(room).cloned()
    }

    /// The rooms to read now: those asked about within [`KEEP`] (the others are dropped).
    pub fn due(&self, now: Instant) -> Vec<String> {
        let Ok(mut inner) = self.inner.lock() else { return Vec::new() };
        inner.asked.retain(|_, at| now.duration_since(*at) <= KEEP);
        let Inner { asked, holders } = &mut *inner;
        holders.retain(|room, _| asked.contains_key(room));
        let mut rooms: Vec<String> = asked.keys().cloned().collect();
        rooms.sort();
        rooms
    }

    /// What a read found: the lease token of each of `rooms`, in order. Returns the rooms
    /// whose holder is not the one the last read found (a failover, a handover, or the
    /// same node under a new lease): the
    /// node tells its sessions (`Notice::Moved`), so one watching such a room follows it
    /// at once instead of at its next route check. A room's first read is no move.
    pub fn update(&self, rooms: &[String], holders: Vec<Option<String>>) -> Vec<String> {
        let Ok(mut inner) = self.inner.lock() else { return Vec::new() };
        let mut moved = Vec::new();
        for (room, holder) in rooms.iter().zip(holders) {
            if inner.asked.contains_key(room) {
                if let Some(before) = inner.holders.insert(room.clone(), holder.clone()) {
                    if before != holder {
                        moved.push(room.clone());
                    }
                }
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_asked_about_are_read_in_one_batch_and_answered_from_it() {
        let board = RouteBoard::new();
        let t = Instant::now();
        assert_eq!(board.hint("r1", t), None, "not read yet: the session looks it up itself");
        assert_eq!(board.hint("r2", t), None);
        assert_eq!(board.hint("r1", t), None, "asked twice, read once");
        let due = board.due(t);
        assert_eq!(due, vec!["r1".to_owned(), "r2".to_owned()]);
        assert!(board.update(&due, vec![Some("nb".into()), None]).is_empty(), "a first read moves nothing");
        assert_eq!(board.hint("r1", t), Some(Some("nb".into())));
        assert_eq!(board.hint("r2", t), Some(None), "no holder: the session looks it up");
    }

    #[test]
    fn a_read_names_the_rooms_whose_holder_changed() {
        let board = RouteBoard::new();
        let t = Instant::now();
        for room in ["same", "failed-over", "released", "claimed"] {
            board.hint(room, t);
        }
        let due = board.due(t);
        assert_eq!(due, ["claimed", "failed-over", "released", "same"]);
        board.update(&due, vec![None, Some("na".into()), Some("na".into()), Some("nb".into())]);
        let moved = board.update(&due, vec![Some("nc".into()), Some("nc".into()), None, Some("nb".into())]);
        assert_eq!(moved, ["claimed", "failed-over", "released"]);
    }

    #[test]
    fn rooms_nobody_asks_about_any_more_are_dropped() {
        let board = RouteBoard::new();
        let t = Instant::now();
        board.hint("old", t);
        board.update(&["old".to_owned()], vec![Some("na".into())]);
        board.hint("new", t + KEEP);
        assert_eq!(board.due(t + KEEP + Duration::from_millis(1)), vec!["new".to_owned()]);
        assert_eq!(board.hint("old", t + KEEP * 2), None, "its last read is forgotten with it");
        // A read that was in flight while a room was dropped does not bring it back.
        let board = RouteBoard::new();
        board.update(&["never".to_owned()], vec![Some("na".into())]);
        assert!(board.due(t).is_empty());
    }
}
