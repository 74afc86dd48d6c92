//! This node's WebSocket sessions by id, one registry per node: how frames from rooms on
//! other nodes reach a session (they arrive over the bus with its id), how many sessions
//! are open (the connection cap, operators' stats), and how a drain closes them all.
//! Sessions add themselves when they start and remove themselves when they stop.

use crate::messages::{Notice, ToClient};
use actix::prelude::*;
use std::sync::Mutex;

/// One open session's mailboxes.
pub struct Session {
    /// Frames from rooms.
    pub out: Recipient<ToClient>,
    /// What the node tells every session (it drains; rooms moved).
    pub notice: Recipient<Notice>,
}

/// Open sessions by id. A std `Mutex`: every access is a short map operation, never held
/// across an await.
#[derive(Default)]
pub struct Sessions {
    open: Mutex<crate::FastMap<u64, Session>>,
}

impl Sessions {
    pub fn new() -> Sessions {
        Sessions::default()
    }

    pub fn insert(&self, id: u64, session: Session) {
        if let Ok(mut open) = self.open.lock() {
            open.insert(id, session);
        }
    }

    pub fn remove(&self, id: u64) {
        if let Ok(mut open) = self.open.lock() {
            open.remove(&id);
        }
    }

    pub fn len(&self) -> usize {
        self.open.lock().map(|o| o.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands each frame to its session (one that closed meanwhile is skipped; a full
    /// mailbox drops the frame, as for a room on this node).
    pub fn deliver(&self, frames: impl IntoIterator<Item = (u64, ToClient)>) {
        let Ok(open) = self.open.lock() else { return };
        for (id, frame) in frames {
            if let Some(session) = open.get(&id) {
                let _ = session.out.try_send(frame);
            }
        }
    }

    /// Tells every open session `notice` (past a full mailbox too: it is rare and small).
    pub fn tell_all(&self, notice: Notice) {
        let recipients: Vec<Recipient<Notice>> =
            self.open.lock().map(|o| o.values().map(|s| s.notice.clone()).collect()).unwrap_or_default();
        for recipient in recipients {
            recipient.do_send(notice.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A session stand-in that keeps what it gets.
    #[derive(Default)]
    struct Probe {
        frames: Arc<Mutex<Vec<String>>>,
        drained: Arc<Mutex<bool>>,
    }

    impl Actor for Probe {
        type Context = Context<Self>;
    }

    impl Handler<ToClient> for Probe {
        type Result = ();
        fn handle(&mut self, msg: ToClient, _: &mut Context<Self>) {
            self.frames.lock().unwrap().push(msg.text.to_string());
        }
    }

    impl Handler<Notice> for Probe {
        type Result = ();
        fn handle(&mut self, notice: Notice, _: &mut Context<Self>) {
            if notice == Notice::Drain {
                *self.drained.lock().unwrap() = true;
            }
        }
    }

    #[actix::test]
    async fn frames_reach_open_sessions_only_and_drain_reaches_them_all() {
        let probe = Probe::default();
        let (frames, drained) = (probe.frames.clone(), probe.drained.clone());
        let addr = probe.start();
        let sessions = Sessions::new();
        sessions.insert(7, Session { out: addr.clone().recipient(), notice: addr.clone().recipient() });
        assert_eq!(sessions.len(), 1);
        let frame = ToClient::frame;
        sessions.deliver([(7, frame("a")), (8, frame("not ours"))]);
        sessions.tell_all(Notice::Drain);
        // A message sent after the others is handled after them.
        addr.send(frame("b")).await.unwrap();
        assert_eq!(*frames.lock().unwrap(), ["a", "b"]);
        assert!(*drained.lock().unwrap());
        sessions.remove(7);
        assert!(sessions.is_empty());
        sessions.deliver([(7, frame("late"))]);
        addr.send(frame("c")).await.unwrap();
        assert_eq!(*frames.lock().unwrap(), ["a", "b", "c"]);
    }
}
