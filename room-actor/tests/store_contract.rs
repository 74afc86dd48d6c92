#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! One contract, every store: the in-memory store, the file store and the Redis store
//! must behave the same. The Redis half needs `REDIS_URL` (./scripts/test starts a private Redis); it
//! fails, never skips, without one.

mod support;

use engine::{Actor, PlayerId, RngState, Seed};
use room_actor::log::{GameRecord, LogEntry, Snapshot, StartEntry};
use room_actor::redis::keys::game_pk;
use room_actor::{FileStore, MemoryStore, RedisStore, RoomStore, StoreError};
use std::sync::Arc;

fn redis_url() -> String {
    std::env::var("REDIS_URL")
        .expect("REDIS_URL is not set: run the tests with ./scripts/test, which starts a private Redis on a free port")
}

/// A Redis store under a key prefix of its own, so runs never see each other's keys.
async fn redis_store() -> RedisStore {
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    RedisStore::connect(&redis_url(), &prefix).await.expect("Redis at REDIS_URL is reachable")
}

fn start(pk: &str, players: &[&str]) -> StartEntry {
    StartEntry {
        game_pk: pk.into(),
        room_id: "r_c".into(),
        game: "tally".into(),
        seed: Seed(7),
        players: players.iter().map(|p| PlayerId::from(*p)).collect(),
        bots: vec![],
        names: players.iter().map(|p| p.to_string()).collect(),
        options_json: r#"{"target":10}"#.into(),
        state_version: 1,
        started_at: 1_000,
        rtt: Default::default(),
    }
}

fn entry(seq: u64) -> LogEntry {
    LogEntry {
        seq,
        at: 1_000 + seq as i64,
        actor: Actor::Player("a".into()),
        cs: Some(seq),
        rtt_ms: Some(30),
        auto: false,
        input_json: r#"{"client":{"type":"bump"}}"#.into(),
        rtt: None,
    }
}

fn record(pk: &str, players: &[&str], ended_at: i64) -> GameRecord {
    GameRecord {
        game_pk: pk.into(),
        room_id: "r_c".into(),
        game: "tally".into(),
        players: players.iter().map(|p| PlayerId::from(*p)).collect(),
        names: vec![],
        started_at: 1_000,
        ended_at,
        state_version: 1,
        final_seq: 3,
        result_json: "{}".into(),
        final_state_json: "{}".into(),
    }
}

async fn contract(store: Arc<dyn RoomStore>) {
    let pk = game_pk("r_c", "01");
    assert_eq!(store.load(&pk).await.unwrap(), None, "unknown game");
    store.begin(start(&pk, &["a", "b"])).await.unwrap();
    assert!(matches!(store.begin(start(&pk, &["a"])).await, Err(StoreError::Conflict { .. })), "a game begins once");

    for seq in 1..=3 {
        store.append(&pk, entry(seq)).await.unwrap();
    }
    for bad in [3, 5, 1] {
        match store.append(&pk, entry(bad)).await {
            Err(StoreError::Conflict { expected, got, .. }) => assert_eq!((expected, got), (4, bad)),
            other => panic!("seq {bad}: {other:?}"),
        }
    }
    let snap = Snapshot { seq: 2, at: 1_002, state_json: "{\"x\":1}".into(), rng: RngState { a: 1, b: 2, c: 3, d: 4 } };
    store.put_snapshot(&pk, snap.clone()).await.unwrap();
    let loaded = store.load(&pk).await.unwrap().unwrap();
    assert_eq!(loaded.start, start(&pk, &["a", "b"]));
    assert_eq!(loaded.entries, vec![entry(1), entry(2), entry(3)]);
    assert_eq!(loaded.snapshot, Some(snap));
    // One entry read back by seq (how a room resolves an append with an unknown outcome).
    assert_eq!(store.entry(&pk, 2).await.unwrap(), Some(entry(2)));
    assert_eq!(store.entry(&pk, 4).await.unwrap(), None, "no entry past the end");

    assert_eq!(store.record(&pk).await.unwrap(), None);
    store.finish(record(&pk, &["a", "b"], 5_000)).await.unwrap();
    let pk2 = game_pk("r_c", "02");
    store.begin(start(&pk2, &["a"])).await.unwrap();
    store.finish(record(&pk2, &["a"], 6_000)).await.unwrap();
    assert_eq!(store.record(&pk).await.unwrap(), Some(record(&pk, &["a", "b"], 5_000)));
    let mine = |v: Vec<GameRecord>| v.into_iter().map(|r| r.game_pk).collect::<Vec<_>>();
    assert_eq!(
        mine(store.games_of(&"a".into(), None, 10).await.unwrap()),
        vec![pk2.clone(), pk.clone()],
        "newest first"
    );
    assert_eq!(
        mine(store.games_of(&"a".into(), Some(6_000), 10).await.unwrap()),
        vec![pk.clone()],
        "before is exclusive"
    );
    assert_eq!(mine(store.games_of(&"a".into(), None, 1).await.unwrap()), vec![pk2.clone()], "limit");
    assert_eq!(mine(store.games_of(&"b".into(), None, 10).await.unwrap()), vec![pk.clone()]);
    assert!(store.games_of(&"zed".into(), None, 10).await.unwrap().is_empty());

    // Room info: saved, read back, listed while open, unlisted once ended.
    let mut info = room_info("r_meta");
    assert_eq!(store.room("r_meta").await.unwrap(), None);
    store.put_room(&info).await.unwrap();
    assert_eq!(store.room("r_meta").await.unwrap(), Some(info.clone()));
    assert!(store.open_rooms().await.unwrap().iter().any(|r| r.room_id == "r_meta"));
    info.status = room_actor::RoomStatus::Ended;
    store.put_room(&info).await.unwrap();
    assert_eq!(store.room("r_meta").await.unwrap().unwrap().status, room_actor::RoomStatus::Ended);
    assert!(!store.open_rooms().await.unwrap().iter().any(|r| r.room_id == "r_meta"));
}

fn room_info(id: &str) -> room_actor::RoomInfo {
    room_actor::RoomInfo {
        room_id: id.into(),
        game: "tally".into(),
        options: serde_json::json!({"target": 10}).into(),
        host: "a".into(),
        seats: vec![room_actor::directory::SeatInfo { user_id: "a".into(), name: "에이".into(), bot: false }],
        status: room_actor::RoomStatus::Waiting,
        game_pk: None,
        node: Some("n1".into()),
        node_url: None,
        grace_sec: 60,
        min_players: 1,
        max_players: 8,
        created_at: 5,
        gone: Vec::new(),
        kicked: Vec::new(),
        removed: Vec::new(),
        listed: None,
    }
}

#[actix::test]
async fn memory_store_keeps_the_contract() {
    contract(Arc::new(MemoryStore::new())).await;
}

#[actix::test]
async fn file_store_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    contract(Arc::new(FileStore::open(dir.path(), 90).unwrap())).await;
}

#[actix::test]
async fn redis_store_keeps_the_contract() {
    contract(Arc::new(redis_store().await)).await;
}

#[actix::test]
async fn redis_append_is_fenced_by_the_room_lease() {
    // The Lua script refuses an append whose token is not the lease's current holder:
    // a node that lost its room can never write to its log again.
    let store = redis_store().await;
    let pk = game_pk("r_f", "01");
    store.begin(start(&pk, &["a"])).await.unwrap();
    let mut conn = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let lease = store.keys().lease("r_f");
    let _: () = redis::cmd("SET").arg(&lease).arg("node-b/2").query_async(&mut conn).await.unwrap();
    let stale = store.append_fenced(pk.clone(), entry(1), "node-a/1".into()).await;
    assert_eq!(stale, Err(StoreError::Fenced), "the lease names another node");
    store.append_fenced(pk.clone(), entry(1), "node-b/2".into()).await.expect("the lease holder appends");
    let len: u64 = redis::cmd("XLEN").arg(store.keys().log("r_f", &pk)).query_async(&mut conn).await.unwrap();
    assert_eq!(len, 1, "only the lease holder's entry is in the log");
}

#[actix::test]
async fn a_room_on_redis_plays_and_rebuilds_identically() {
    use room_actor::messages::Start;
    use room_actor::rebuild::{rebuild, From};
    use serde_json::json;
    let mut node = support::Node::new(room_actor::room::Clock::System);
    let store = Arc::new(redis_store().await);
    node.deps.store = store.clone();
    node.deps.snapshot_every = 4;
    let room = node.room("r_redis", "tally", json!({"target": 10}), "alice", 60);
    support::seat(&room, "bob").await;
    let pk = room.ask(Start { user: "alice".into() }).await.unwrap();
    let mut alice = support::Client::new(1, "alice");
    alice.subscribe(&room);
    for cs in 1..=10 {
        alice.act(&room, cs, json!({"type": "bump"}));
    }
    alice.next_of("result").await;
    let stored = store.load(&pk).await.unwrap().unwrap();
    assert_eq!(stored.entries.len(), 10);
    let record = store.record(&pk).await.unwrap().unwrap();
    let from_seed = rebuild::<engine::games::tally::Tally>(&stored, From::Seed).unwrap();
    let from_snapshot = rebuild::<engine::games::tally::Tally>(&stored, From::LatestSnapshot).unwrap();
    assert_eq!(serde_json::to_string(&from_seed.state).unwrap(), record.final_state_json);
    assert_eq!(from_snapshot.state, from_seed.state);
    assert_eq!(store.games_of(&"bob".into(), None, 5).await.unwrap()[0].game_pk, pk);
}

#[actix::test]
async fn unreachable_redis_is_a_clear_error() {
    // Port 1 on loopback: nothing listens there.
    let err = RedisStore::connect("redis://127.0.0.1:1/", "x").await.err().expect("no Redis on port 1");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
}
