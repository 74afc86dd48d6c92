//! Shared helpers for room-actor tests: a room on an in-memory store, and a fake session
//! that collects what the room sends; [`games`] plays whole games and checks their logs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod games;

use actix::prelude::*;
use engine::PlayerId;
use room_actor::messages::{Act, Sender, SessionId, Subscribe, TakeSeat, ToClient, Unsubscribe};
use room_actor::metrics::RoomMetrics;
use room_actor::room::Clock;
use room_actor::spawn::{create_room, NewRoom};
use room_actor::{Directory, MemoryStore, RoomDeps, RoomHandle};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub struct Collector {
    tx: mpsc::UnboundedSender<Value>,
}

impl Actor for Collector {
    type Context = Context<Self>;
}

impl Handler<ToClient> for Collector {
    type Result = ();
    fn handle(&mut self, msg: ToClient, _: &mut Context<Self>) {
        let value: Value = serde_json::from_str(&msg.text).expect("room sends JSON");
        let _ = self.tx.send(value);
    }
}

/// A fake client session.
pub struct Client {
    pub session: SessionId,
    pub user: PlayerId,
    pub out: Recipient<ToClient>,
    pub rx: mpsc::UnboundedReceiver<Value>,
}

impl Client {
    pub fn new(session: u64, user: &str) -> Client {
        let (tx, rx) = mpsc::unbounded_channel();
        // Set the bound before anything is sent: the room drops subscribers whose mailbox is full.
        let out = Collector::create(|ctx| {
            ctx.set_mailbox_capacity(100_000);
            Collector { tx }
        })
        .recipient();
        Client { session: SessionId(session), user: user.into(), out, rx }
    }

    /// This client as the sender of a session verb.
    pub fn sender(&self) -> Sender {
        let (session, user, out) = (self.session, self.user.clone(), self.out.clone().into());
        Sender { session, user, out, received: Instant::now(), hop: Duration::ZERO }
    }

    pub fn subscribe(&self, room: &RoomHandle) {
        room.tell(self.sender(), Subscribe).expect("the room takes the subscription");
    }

    pub fn unsubscribe(&self, room: &RoomHandle) {
        room.tell(self.sender(), Unsubscribe).expect("the room takes the unsubscribe");
    }

    pub fn act(&self, room: &RoomHandle, cs: u64, action: Value) {
        room.tell(self.sender(), Act { cs, action: action.to_string() }).expect("the room takes the action");
    }

    /// The next message of type `t`, skipping others; panics after 10 s (virtual time
    /// may be paused, so the wait is on real time through a blocking-free poll).
    pub async fn next_of(&mut self, t: &str) -> Value {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(3600), self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no `{t}` message"))
                .unwrap_or_else(|| panic!("channel closed waiting for `{t}`"));
            if msg["t"] == t {
                return msg;
            }
        }
    }

    /// Everything received so far.
    pub fn drain(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Ok(v) = self.rx.try_recv() {
            out.push(v);
        }
        out
    }
}

pub struct Node {
    pub store: MemoryStore,
    pub directory: Arc<Directory>,
    pub deps: RoomDeps,
}

impl Node {
    pub fn new(clock: Clock) -> Node {
        let store = MemoryStore::new();
        let directory = Arc::new(Directory::new());
        let deps = RoomDeps {
            store: Arc::new(store.clone()),
            directory: directory.clone(),
            metrics: RoomMetrics::unregistered().unwrap(),
            node_id: "test-node".into(),
            public_url: None,
            snapshot_every: 16,
            clock,
            ended_linger: room_actor::room::ENDED_LINGER,
            waiting_ttl: room_actor::room::WAITING_TTL,
            stall_give_up: room_actor::room::STALL_GIVE_UP,
        };
        Node { store, directory, deps }
    }

    pub fn room(&self, id: &str, game: &str, options: Value, host: &str, grace_sec: u32) -> RoomHandle {
        create_room(
            NewRoom {
                room_id: id.into(),
                game: game.into(),
                options: Some(options),
                host: host.into(),
                host_name: host.into(),
                grace_sec,
                seed: Some(engine::Seed(0x1234_5678)),
                listed: None,
            },
            self.deps.clone(),
        )
        .unwrap()
    }
}

pub async fn seat(room: &RoomHandle, user: &str) {
    room.ask(TakeSeat { user: user.into(), name: user.into(), bot: false }).await.unwrap();
}

pub async fn add_bot(room: &RoomHandle, host: &str) {
    room.ask(TakeSeat { user: host.into(), name: String::new(), bot: true }).await.unwrap();
}

/// A cluster node's config for tests on one Redis at `url`: node `id`, keys under
/// `prefix`, a 3 s lease and 500 ms heartbeats, no batch window, no peer links.
pub fn cluster_config(id: &str, url: &str, prefix: &str) -> room_actor::cluster::node::ClusterConfig {
    room_actor::cluster::node::ClusterConfig {
        node_id: id.into(),
        redis: room_actor::redis::target::RedisTarget::Single(url.to_owned()),
        prefix: prefix.to_owned(),
        lease_ms: 3000,
        heartbeat_ms: 500,
        batch_window: Duration::ZERO,
        peer: None,
    }
}
