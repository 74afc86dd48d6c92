#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! A room stuck in a stall gives itself up and comes back (issue 56): a cluster room
//! whose appends keep failing for a reason its actor carries (here: every append made
//! under its lease token fails with an unknown outcome, as a connection that reaches the
//! wrong server would) stops after `stall_give_up`, and the node's reconciler restores it
//! from its log under a new token; the input that was pending is acknowledged once,
//! through the new room. Needs `REDIS_URL` (./scripts/test starts a private Redis).

mod support;

use engine::Seed;
use room_actor::cluster::failover::FailoverMetrics;
use room_actor::cluster::node::ClusterNode;
use room_actor::error::StoreError;
use room_actor::info::RoomInfo;
use room_actor::log::{GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use room_actor::messages::Start;
use room_actor::store::{Fence, StoreFuture};
use room_actor::supervise::Supervisor;
use room_actor::{RedisStore, RoomHandle, RoomStore};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The Redis store, except that once armed, the first lease token an append is made
/// under, and every later append under that token, fail with an unknown outcome.
struct StuckToken {
    inner: RedisStore,
    armed: Mutex<bool>,
    stuck: Mutex<Option<String>>,
}

impl StuckToken {
    fn stuck_on(&self, token: &str) -> bool {
        let mut stuck = self.stuck.lock().unwrap();
        if stuck.is_none() && *self.armed.lock().unwrap() {
            *stuck = Some(token.to_owned());
        }
        stuck.as_deref() == Some(token)
    }
}

impl RoomStore for StuckToken {
    fn begin(&self, start: StartEntry) -> StoreFuture<()> {
        self.inner.begin(start)
    }
    fn append(&self, game_pk: &str, entry: LogEntry) -> StoreFuture<()> {
        self.inner.append(game_pk, entry)
    }
    fn append_as(&self, game_pk: &str, entry: LogEntry, fence: &Fence) -> StoreFuture<()> {
        if let Fence::Lease(token) = fence {
            if self.stuck_on(token) {
                return Box::pin(async {
                    Err(StoreError::Unknown("injected: this lease's appends never resolve".into()))
                });
            }
        }
        self.inner.append_as(game_pk, entry, fence)
    }
    fn entry(&self, game_pk: &str, seq: u64) -> StoreFuture<Option<LogEntry>> {
        self.inner.entry(game_pk, seq)
    }
    fn put_room(&self, info: &RoomInfo) -> StoreFuture<()> {
        self.inner.put_room(info)
    }
    fn room(&self, room_id: &str) -> StoreFuture<Option<RoomInfo>> {
        self.inner.room(room_id)
    }
    fn open_rooms(&self) -> StoreFuture<Vec<RoomInfo>> {
        self.inner.open_rooms()
    }
    fn put_snapshot(&self, game_pk: &str, snapshot: Snapshot) -> StoreFuture<()> {
        self.inner.put_snapshot(game_pk, snapshot)
    }
    fn load(&self, game_pk: &str) -> StoreFuture<Option<StoredGame>> {
        self.inner.load(game_pk)
    }
    fn finish(&self, record: GameRecord) -> StoreFuture<()> {
        self.inner.finish(record)
    }
    fn record(&self, game_pk: &str) -> StoreFuture<Option<GameRecord>> {
        self.inner.record(game_pk)
    }
    fn games_of(&self, player: &engine::PlayerId, before: Option<i64>, limit: usize) -> StoreFuture<Vec<GameRecord>> {
        self.inner.games_of(player, before, limit)
    }
}

/// The next message about `cs`, or a `room_moved`, within `within`.
async fn answer_to(client: &mut support::Client, cs: u64, within: Duration) -> Option<Value> {
    tokio::time::timeout(within, async {
        loop {
            let m = client.rx.recv().await?;
            if m["cs"] == cs || m["code"] == "room_moved" {
                return Some(m);
            }
        }
    })
    .await
    .ok()
    .flatten()
}

#[actix::test]
async fn a_cluster_room_stalled_past_the_bound_gives_itself_up_and_is_restored_from_its_log() {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is not set: run the tests with ./scripts/test");
    let prefix = format!("roomd-giveup-{}", Seed::from_os().unwrap().to_hex());
    let store = RedisStore::connect(&url, &prefix).await.expect("Redis at REDIS_URL is reachable");

    // The room is made and started (two bumps) by a node without leases, as the gateway
    // of an embedded node would; the cluster node below then claims it.
    let first = {
        let mut node = support::Node::new(room_actor::room::Clock::System);
        node.deps.store = Arc::new(store.clone());
        node
    };
    let made = first.room("r_stuck", "tally", json!({"target": null}), "alice", 60);
    support::seat(&made, "bob").await;
    let pk = made.ask(Start { user: "alice".into() }).await.unwrap();
    let mut alice = support::Client::new(1, "alice");
    alice.subscribe(&made);
    for cs in 1..=2 {
        alice.act(&made, cs, json!({"type": "bump"}));
        assert_eq!(answer_to(&mut alice, cs, Duration::from_secs(10)).await.unwrap()["t"], "ack");
    }

    let stuck = Arc::new(StuckToken { inner: store.clone(), armed: Mutex::new(false), stuck: Mutex::new(None) });
    let mut deps = first.deps.clone();
    deps.store = stuck.clone();
    deps.directory = Arc::new(room_actor::Directory::new());
    deps.node_id = "n1".into();
    deps.stall_give_up = Duration::from_secs(2);
    let metrics = deps.metrics.clone();
    let config = support::cluster_config("n1", &url, &prefix);
    let node = ClusterNode::new(config, store.clone(), deps.clone(), FailoverMetrics::new().unwrap()).unwrap();
    let supervisor = Arc::new(Supervisor::new(|task, ended| panic!("core task {task} cannot run: {ended:?}")).unwrap());
    node.run(None, &supervisor);
    let held: RoomHandle = node.activate("r_stuck").await.unwrap().expect("n1 restores the room");

    // Every append of this incarnation fails with an unknown outcome from now on.
    *stuck.armed.lock().unwrap() = true;
    let mut bob = support::Client::new(2, "bob");
    bob.subscribe(&held);
    bob.act(&held, 1, json!({"type": "bump"}));
    let first_answer = answer_to(&mut bob, 1, Duration::from_secs(10)).await.expect("an answer to bob's bump");
    assert_eq!(first_answer["code"], "room_unavailable", "{first_answer}");

    // Past the bound the room gives itself up: its watchers are told it moved...
    let moved = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let m = bob.rx.recv().await.expect("room alive until it moves");
            if m["code"] == "room_moved" {
                return m;
            }
        }
    })
    .await
    .expect("the stalled room gives itself up (room_moved) within 15 s of a 2 s bound");
    assert_eq!(moved["room"], "r_stuck", "{moved}");
    assert_eq!(metrics.stalls_given_up.get(), 1);
    assert_eq!(metrics.rooms_stalled.get(), 0, "the given-up stall is no longer counted");

    // ...and the reconciler restores it here under a new lease, whose appends go through.
    let restored = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if let Some(h) = deps.directory.handle("r_stuck") {
                return h;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the reconciler restores the room within 15 s");
    let mut bob = support::Client::new(3, "bob");
    bob.subscribe(&restored);
    bob.act(&restored, 1, json!({"type": "bump"}));
    let ack = answer_to(&mut bob, 1, Duration::from_secs(10)).await.expect("an answer from the restored room");
    assert_eq!((ack["t"].as_str(), ack["seq"].as_u64()), (Some("ack"), Some(3)), "{ack}");

    let stored = store.load(&pk).await.unwrap().unwrap();
    let seqs: Vec<u64> = stored.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3], "the pending bump is logged once, by the restored room");
    supervisor.stop();
}
