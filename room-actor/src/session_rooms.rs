//! The rooms one WebSocket session talks to, each reached through a route that heals
//! itself: the session hands every verb to [`SessionRooms`] and tells it what it hears
//! (a stale route, a lost publish, a move announced by the node, its periodic tick);
//! finding a room, holding a room's verbs while it is looked up, following a room that
//! moved and subscribing there again are all here, so the socket actor keeps no routing
//! state of its own.
//!
//! - A verb for a room without a route starts a lookup (`Rooms::route`); that room's
//!   later verbs wait behind it, in order (other rooms' verbs do not wait). Found, the
//!   waiting verbs go to the room; not found, each gets its answer: `unknown_room` (or
//!   the reject of an action), or, for a room between owners, `room_unavailable` (a
//!   resend for an action) while a subscription stays watched.
//! - A watched room (the client subscribed) is followed wherever it goes: when its route
//!   goes stale (`room_moved`, a publish nobody heard) it is looked up again after
//!   [`ROUTE_RETRY`] unless a verb did so first, when the node's route board announces
//!   it moved ([`Notice::Moved`](crate::messages::Notice)), and on every route check
//!   (`Rooms::follow`); wherever it is found anew, the session subscribes there (and
//!   the room answers with a fresh `sync`).
//!
//! Everything runs on the session's thread (`Rc`), its lookups as local tasks.

use crate::messages::{Act, Chat, Rtt, SessionVerb, Subscribe, Tell, ToClient, Unsubscribe};
use crate::room_ref::{Caller, Lookup, Missing, RoomRef, Rooms};
use crate::wire;
use prometheus::IntCounter;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How long after a room dropped its route (it moved, or cannot act now) a session that
/// still watches it looks it up again, if no verb of its client did first.
pub const ROUTE_RETRY: Duration = Duration::from_secs(1);

/// One session's rooms (see the module docs). Cheap to clone: clones share the rooms.
#[derive(Clone)]
pub struct SessionRooms(Rc<RefCell<Inner>>);

struct Inner {
    rooms: Rooms,
    caller: Caller,
    /// Counts the error frames this sends the client (the gateway's `roomd_ws_errors_total`).
    errors: IntCounter,
    /// The caller's RTT estimate, sent with each subscription (a ring's credit).
    rtt_ms: Option<u32>,
    entries: crate::FastMap<String, Entry>,
    closed: bool,
}

#[derive(Default)]
struct Entry {
    route: Route,
    /// The client subscribed: the room is followed and subscribed again where it goes.
    watched: bool,
}

#[derive(Default)]
enum Route {
    /// No route: the next verb (or a follow) looks the room up.
    #[default]
    None,
    /// A lookup is under way: the room's verbs wait here, in order.
    Finding(Vec<(SessionVerb, Instant)>),
    Found(RoomRef),
}

impl SessionRooms {
    pub fn new(rooms: Rooms, caller: Caller, errors: IntCounter) -> SessionRooms {
        let inner = Inner { rooms, caller, errors, rtt_ms: None, entries: Default::default(), closed: false };
        SessionRooms(Rc::new(RefCell::new(inner)))
    }

    /// A verb of the client's for `room` (`received`: when it came off the socket).
    pub fn tell(&self, room: &str, verb: impl Tell, received: Instant) {
        let verb = verb.into_verb();
        let lookup = {
            let mut inner = self.0.borrow_mut();
            if inner.closed {
                return;
            }
            match &verb {
                SessionVerb::Subscribe(_) => inner.entries.entry(room.to_owned()).or_default().watched = true,
                SessionVerb::Unsubscribe(_) => {
                    // Not watched any more; a room never found has nothing to be told.
                    let Some(entry) = inner.entries.get_mut(room) else { return };
                    entry.watched = false;
                    if matches!(entry.route, Route::None) {
                        inner.entries.remove(room);
                        return;
                    }
                }
                _ => {}
            }
            let entry = inner.entries.entry(room.to_owned()).or_default();
            match &mut entry.route {
                Route::Found(route) => {
                    let route = route.clone();
                    let forget = matches!(verb, SessionVerb::Unsubscribe(_));
                    if forget {
                        inner.entries.remove(room);
                    }
                    if inner.deliver(room, &route, verb, received) || forget {
                        return;
                    }
                    None
                }
                Route::Finding(waiting) => {
                    waiting.push((verb, received));
                    return;
                }
                Route::None => {
                    entry.route = Route::Finding(vec![(verb, received)]);
                    Some(inner.rooms.route(room))
                }
            }
        };
        // The room's actor here did not take the verb (it was answered): the route may
        // lead to an actor that stopped (a lease lost, a room handed over), which tells
        // only its subscribers so. Dropped, so the next verb looks the room up again.
        let Some(lookup) = lookup else { return self.stale(room) };
        match lookup {
            Lookup::Now(found) => self.found(room, found, false),
            Lookup::Later(lookup) => {
                let (this, room) = (self.clone(), room.to_owned());
                actix::spawn(async move {
                    let found = lookup.await;
                    this.found(&room, found, false);
                });
            }
        }
    }

    /// A fresh RTT estimate: kept for the next subscriptions, and sent to every room
    /// with a route when `send` (the session decides how often).
    pub fn rtt(&self, rtt_ms: u32, send: bool) {
        let mut inner = self.0.borrow_mut();
        inner.rtt_ms = Some(rtt_ms);
        if !send {
            return;
        }
        let routes: Vec<RoomRef> = inner.routes().cloned().collect();
        for route in routes {
            let _ = route.tell(&inner.caller, Rtt { rtt_ms }, Instant::now());
        }
    }

    /// A frame told the session its route to `room` is stale (`room_moved`, a room that
    /// cannot act now), or a verb could not reach the room's node: the route is dropped,
    /// and a watched room is looked up again after [`ROUTE_RETRY`].
    pub fn stale(&self, room: &str) {
        let watched = {
            let mut inner = self.0.borrow_mut();
            let Some(entry) = inner.entries.get_mut(room) else { return };
            if !matches!(entry.route, Route::Found(_)) {
                return;
            }
            entry.route = Route::None;
            if !entry.watched {
                inner.entries.remove(room);
                return;
            }
            true
        };
        if watched {
            let (this, room) = (self.clone(), room.to_owned());
            actix::spawn(async move {
                tokio::time::sleep(ROUTE_RETRY).await;
                this.follow([room]);
            });
        }
    }

    /// A verb could not reach the room's node (it is gone, or Redis is): the route is
    /// dropped and the client told to resend (`cs` of the action, if it was one).
    pub fn lost(&self, room: &str, cs: Option<u64>) {
        self.stale(room);
        let inner = self.0.borrow();
        inner.caller.out.do_send(ToClient::frame(wire::resend(room, cs)));
    }

    /// Looks `rooms` up again where they are watched and their routes may be stale (a
    /// move the node announced, the session's periodic check), and subscribes where each
    /// is now.
    pub fn follow(&self, rooms: impl IntoIterator<Item = String>) {
        let checks: Vec<_> = {
            let inner = self.0.borrow();
            if inner.closed {
                return;
            }
            rooms
                .into_iter()
                .filter_map(|room| {
                    let entry = inner.entries.get(&room).filter(|e| e.watched)?;
                    let current = match &entry.route {
                        Route::Found(route) => Some(route),
                        Route::None => None,
                        // A verb's lookup will subscribe wherever the room is.
                        Route::Finding(_) => return None,
                    };
                    let check = inner.rooms.follow(&room, current)?;
                    Some((room, check))
                })
                .collect()
        };
        for (room, check) in checks {
            let this = self.clone();
            actix::spawn(async move {
                if let Some(route) = check.await {
                    this.found(&room, Ok(route), true);
                }
            });
        }
    }

    /// Every watched room, looked up again where it may have moved (the session's
    /// periodic route check, cluster mode).
    pub fn recheck(&self) {
        let watched: Vec<String> =
            self.0.borrow().entries.iter().filter(|(_, e)| e.watched).map(|(room, _)| room.clone()).collect();
        self.follow(watched);
    }

    /// The session ends: every room it reached is told, and nothing more is sent.
    pub fn close(&self) {
        let mut inner = self.0.borrow_mut();
        inner.closed = true;
        let entries = std::mem::take(&mut inner.entries);
        for entry in entries.into_values() {
            if let Route::Found(route) = entry.route {
                let _ = route.tell(&inner.caller, Unsubscribe, Instant::now());
            }
        }
    }

    /// A lookup's answer for `room`: `followed` for a room found anew by a follow (it is
    /// subscribed there unless a verb's lookup got there first).
    fn found(&self, room: &str, found: Result<RoomRef, Missing>, followed: bool) {
        let mut inner = self.0.borrow_mut();
        if inner.closed {
            return;
        }
        let Some(entry) = inner.entries.get_mut(room) else { return };
        if followed && (!entry.watched || matches!(entry.route, Route::Finding(_))) {
            return;
        }
        let waiting = match std::mem::take(&mut entry.route) {
            Route::Finding(waiting) => waiting,
            _ => Vec::new(),
        };
        let watched = entry.watched;
        match found {
            Ok(route) => {
                entry.route = Route::Found(route.clone());
                // A watched room found anew is subscribed at once (once: a waiting
                // subscription is that subscription).
                let mut taken = !watched || inner.subscribe(&route);
                for (verb, received) in waiting {
                    if watched && matches!(verb, SessionVerb::Subscribe(_)) {
                        continue;
                    }
                    if matches!(verb, SessionVerb::Unsubscribe(_)) {
                        inner.entries.remove(room);
                    }
                    taken &= inner.deliver(room, &route, verb, received);
                }
                if !taken {
                    drop(inner);
                    self.stale(room);
                }
            }
            Err(missing) => {
                if !watched || missing == Missing::Unknown {
                    inner.entries.remove(room);
                }
                for (verb, _) in waiting {
                    inner.refuse(room, &verb, missing);
                }
            }
        }
    }
}

impl Inner {
    fn routes(&self) -> impl Iterator<Item = &RoomRef> {
        self.entries.values().filter_map(|e| match &e.route {
            Route::Found(route) => Some(route),
            _ => None,
        })
    }

    /// Subscribes at `route`, with the caller's RTT when it has one; `false` if the
    /// room's actor here did not take it.
    fn subscribe(&self, route: &RoomRef) -> bool {
        let now = Instant::now();
        let taken = route.tell(&self.caller, Subscribe, now).is_ok();
        if let Some(rtt_ms) = self.rtt_ms {
            let _ = route.tell(&self.caller, Rtt { rtt_ms }, now);
        }
        taken
    }

    /// Hands `verb` to the room; one its actor here did not take (a full mailbox, an
    /// actor that stopped) is answered: an action is to be sent again. `false` then.
    fn deliver(&self, room: &str, route: &RoomRef, verb: SessionVerb, received: Instant) -> bool {
        let refused = match verb {
            SessionVerb::Subscribe(_) => return self.subscribe(route),
            SessionVerb::Act(act) => {
                let cs = act.cs;
                route.tell(&self.caller, act, received).is_err().then(|| (wire::resend(room, Some(cs)), false))
            }
            SessionVerb::Chat(chat) => {
                route.tell(&self.caller, chat, received).is_err().then(|| (wire::room_unavailable(room), true))
            }
            other => return route.tell(&self.caller, other, received).is_ok(),
        };
        let Some((text, counted)) = refused else { return true };
        if counted {
            self.errors.inc();
        }
        self.caller.out.do_send(ToClient::frame(text));
        false
    }

    /// The answer to a verb for a room that was not found (`missing`).
    fn refuse(&self, room: &str, verb: &SessionVerb, missing: Missing) {
        let text = match (verb, missing) {
            (SessionVerb::Act(Act { cs, .. }), Missing::Unknown) => wire::reject_unknown_room(room, *cs),
            // Not a reject: the room exists, the client resends the same cs.
            (SessionVerb::Act(Act { cs, .. }), Missing::Moving) => wire::resend(room, Some(*cs)),
            (SessionVerb::Subscribe(_) | SessionVerb::Chat(Chat { .. }), Missing::Unknown) => wire::unknown_room(room),
            // A subscription stays watched: the route check subscribes as soon as the
            // room's new owner answers (with a sync).
            (SessionVerb::Subscribe(_) | SessionVerb::Chat(Chat { .. }), Missing::Moving) => {
                wire::room_unavailable(room)
            }
            _ => return,
        };
        self.errors.inc();
        self.caller.out.do_send(ToClient::frame(text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::Directory;
    use crate::messages::{Out, SessionId};
    use crate::room_ref::RouteLost;
    use actix::prelude::*;
    use std::sync::Arc;
    use tokio::sync::mpsc;

    /// A session's mailbox: every frame's JSON.
    struct Frames(mpsc::UnboundedSender<serde_json::Value>);

    impl Actor for Frames {
        type Context = Context<Self>;
    }

    impl Handler<ToClient> for Frames {
        type Result = ();
        fn handle(&mut self, msg: ToClient, _: &mut Context<Self>) {
            let _ = self.0.send(serde_json::from_str(&msg.text).unwrap_or_default());
        }
    }

    impl Handler<RouteLost> for Frames {
        type Result = ();
        fn handle(&mut self, _: RouteLost, _: &mut Context<Self>) {}
    }

    async fn next(rx: &mut mpsc::UnboundedReceiver<serde_json::Value>) -> serde_json::Value {
        tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap()
    }

    /// An embedded node with one tally room, `r1` (host `h`), and a session of `h`'s.
    fn node() -> (SessionRooms, mpsc::UnboundedReceiver<serde_json::Value>, IntCounter) {
        let (rooms, rx, errors, _) = node_with_directory();
        (rooms, rx, errors)
    }

    fn node_with_directory() -> (SessionRooms, mpsc::UnboundedReceiver<serde_json::Value>, IntCounter, Arc<Directory>) {
        let directory = Arc::new(Directory::new());
        crate::spawn::tally_r1_for_tests(directory.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        let frames = Frames(tx).start();
        let caller = Caller {
            session: SessionId(1),
            user: "h".into(),
            out: Out::Local(frames.clone().recipient()),
            lost: frames.recipient(),
        };
        let errors = IntCounter::new("errors", "errors").unwrap();
        (
            SessionRooms::new(Rooms::new("n1".into(), directory.clone(), None), caller, errors.clone()),
            rx,
            errors,
            directory,
        )
    }

    #[actix::test]
    async fn a_session_subscribes_acts_and_hears_why_a_room_is_not_there() {
        let (rooms, mut rx, errors) = node();
        rooms.tell("r1", Subscribe, Instant::now());
        let sync = next(&mut rx).await;
        assert_eq!((sync["t"].as_str(), sync["room"].as_str()), (Some("sync"), Some("r1")), "{sync}");
        // An unknown room: an error for a subscription, a reject for an action; counted.
        rooms.tell("nope", Subscribe, Instant::now());
        assert_eq!(next(&mut rx).await["code"], "unknown_room");
        rooms.tell("nope", Act { cs: 4, action: "{}".into() }, Instant::now());
        let reject = next(&mut rx).await;
        assert_eq!((reject["t"].as_str(), reject["cs"].as_u64()), (Some("reject"), Some(4)), "{reject}");
        assert_eq!(errors.get(), 2);
        // An action in a room not started yet: the room's own answer, through the route.
        rooms.tell("r1", Act { cs: 1, action: r#"{"type":"bump"}"#.into() }, Instant::now());
        assert_eq!(next(&mut rx).await["code"], "not_started");
        // Unsubscribed, then closed: the room hears nothing more from this session.
        rooms.tell("r1", Unsubscribe, Instant::now());
        rooms.close();
        rooms.tell("r1", Subscribe, Instant::now());
        assert!(tokio::time::timeout(Duration::from_millis(200), rx.recv()).await.is_err(), "closed: silent");
    }

    #[actix::test]
    async fn a_stale_route_is_found_again_and_a_watched_room_is_subscribed_again_once() {
        let (rooms, mut rx, _) = node();
        rooms.tell("r1", Subscribe, Instant::now());
        assert_eq!(next(&mut rx).await["t"], "sync");
        // The room says the route is stale (as `room_moved` does): the next verb looks it
        // up again and, the room being watched, subscribes there first (one sync, even
        // though the verb is itself a subscription).
        rooms.stale("r1");
        rooms.tell("r1", Subscribe, Instant::now());
        assert_eq!(next(&mut rx).await["t"], "sync");
        assert!(tokio::time::timeout(Duration::from_millis(200), rx.recv()).await.is_err(), "one sync only");
        // A verb lost on its way: the client is told to resend it.
        rooms.lost("r1", Some(9));
        let resend = next(&mut rx).await;
        assert_eq!((resend["code"].as_str(), resend["cs"].as_u64()), (Some("room_unavailable"), Some(9)), "{resend}");
    }

    #[actix::test]
    async fn a_route_to_an_actor_that_stopped_is_looked_up_again_by_the_next_verb() {
        let (rooms, mut rx, _, directory) = node_with_directory();
        rooms.tell("r1", Act { cs: 1, action: r#"{"type":"bump"}"#.into() }, Instant::now());
        assert_eq!(next(&mut rx).await["code"], "not_started");
        // The room stops without a word to this session (it never subscribed): a lease
        // lost, a room handed over.
        let handle = directory.handle("r1").expect("r1 runs");
        handle.handover().try_send(crate::messages::Handover).expect("the room takes the handover");
        for _ in 0..100 {
            if directory.handle("r1").is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(directory.handle("r1").is_none(), "the room stopped");
        // The action that finds the actor gone is to be sent again; the next one looks
        // the room up anew and hears it is gone, instead of resending forever.
        rooms.tell("r1", Act { cs: 2, action: r#"{"type":"bump"}"#.into() }, Instant::now());
        let resend = next(&mut rx).await;
        assert_eq!((resend["code"].as_str(), resend["cs"].as_u64()), (Some("room_unavailable"), Some(2)), "{resend}");
        rooms.tell("r1", Act { cs: 3, action: r#"{"type":"bump"}"#.into() }, Instant::now());
        let reject = next(&mut rx).await;
        assert_eq!((reject["t"].as_str(), reject["cs"].as_u64()), (Some("reject"), Some(3)), "{reject}");
        assert_eq!(reject["code"], "unknown_room", "{reject}");
    }
}
