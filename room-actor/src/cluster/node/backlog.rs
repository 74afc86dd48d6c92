//! Rooms whose commands from other nodes wait behind a slow one.
//!
//! A node serves its bus channel on one task. A command for a room it holds that needs no
//! answer (an action, a subscription) goes straight into the room's mailbox. One that
//! waits for something (a request awaiting the room's answer, or a room still to be
//! located or activated from its log) must not hold up every other room's commands
//! behind it: it starts a backlog for its room, served in arrival order by a task of its
//! own, and that room's later commands join the backlog until it is empty. Order is kept
//! per room, which is all the bus promises.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// The waiting commands of each room with a backlog.
pub(super) struct Backlogs<T> {
    rooms: Mutex<HashMap<String, VecDeque<T>>>,
}

impl<T> Default for Backlogs<T> {
    fn default() -> Self {
        Backlogs { rooms: Mutex::new(HashMap::new()) }
    }
}

/// What to do with a command that arrived for a room.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Joined<T> {
    /// The room has a backlog: the command waits in it (its task will serve it).
    Queued,
    /// The room has none: the caller decides (serve it now, or [`Backlogs::start`]).
    Free(T),
}

impl<T> Backlogs<T> {
    fn rooms(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<T>>> {
        // A panic elsewhere while holding the lock leaves the map as it was: go on.
        self.rooms.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` behind `room`'s backlog if it has one.
    pub(super) fn join(&self, room: &str, item: T) -> Joined<T> {
        match self.rooms().get_mut(room) {
            Some(queue) => {
                queue.push_back(item);
                Joined::Queued
            }
            None => Joined::Free(item),
        }
    }

    /// Starts `room`'s backlog with `item`; `true` if the caller must start the task that
    /// serves it (`false`: a backlog appeared meanwhile and `item` joined it).
    pub(super) fn start(&self, room: &str, item: T) -> bool {
        let mut rooms = self.rooms();
        match rooms.get_mut(room) {
            Some(queue) => {
                queue.push_back(item);
                false
            }
            None => {
                rooms.insert(room.to_owned(), VecDeque::from([item]));
                true
            }
        }
    }

    /// The next command of `room`'s backlog, or `None` once it is empty (the backlog is
    /// then gone: the room's next command is served at once again).
    pub(super) fn next(&self, room: &str) -> Option<T> {
        let mut rooms = self.rooms();
        let next = rooms.get_mut(room).and_then(VecDeque::pop_front);
        if next.is_none() {
            rooms.remove(room);
        }
        next
    }

    /// How many rooms have a backlog.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.rooms().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_command_holds_back_only_its_own_rooms_later_commands_in_order() {
        let backlogs = Backlogs::default();
        // Room a's request is slow: it starts a backlog (and its task).
        assert_eq!(backlogs.join("a", "a-info"), Joined::Free("a-info"));
        assert!(backlogs.start("a", "a-info"));
        // Room a's next commands wait behind it, in order; room b's are served at once.
        assert_eq!(backlogs.join("a", "a-act-1"), Joined::Queued);
        assert_eq!(backlogs.join("b", "b-act"), Joined::Free("b-act"));
        assert_eq!(backlogs.join("a", "a-act-2"), Joined::Queued);
        // A second slow command for a while its backlog runs joins it: no second task.
        assert!(!backlogs.start("a", "a-seat"));
        assert_eq!(backlogs.len(), 1);
        // The task serves them in arrival order, then the backlog is gone.
        let served: Vec<_> = std::iter::from_fn(|| backlogs.next("a")).collect();
        assert_eq!(served, ["a-info", "a-act-1", "a-act-2", "a-seat"]);
        assert_eq!(backlogs.len(), 0);
        assert_eq!(backlogs.join("a", "a-act-3"), Joined::Free("a-act-3"), "served at once again");
    }

    #[test]
    fn a_command_arriving_while_the_task_serves_the_last_one_is_not_lost() {
        let backlogs = Backlogs::default();
        assert!(backlogs.start("a", 1));
        assert_eq!(backlogs.next("a"), Some(1));
        // The task is serving 1 (the backlog is empty but still there): 2 joins it.
        assert_eq!(backlogs.join("a", 2), Joined::Queued);
        assert_eq!(backlogs.next("a"), Some(2));
        assert_eq!(backlogs.next("a"), None);
        // Gone now: the next slow command starts a new task.
        assert!(backlogs.start("a", 3));
    }
}
