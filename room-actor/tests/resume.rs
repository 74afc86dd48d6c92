#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Resume after a failover (issue 17): a node that takes over a room with a long log
//! restores it from the latest snapshot (`ROOMD__ROOMS__SNAPSHOT_EVERY`, 64 by default)
//! plus the entries after it, so claim → first update stays small. Needs `REDIS_URL`.

mod support;

use engine::Seed;
use room_actor::cluster::failover::FailoverMetrics;
use room_actor::cluster::node::ClusterNode;
use room_actor::messages::Start;
use room_actor::{Directory, RedisStore, RoomStore};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

const ENTRIES: u64 = 5_000;

#[actix::test]
async fn a_room_with_a_5000_entry_log_resumes_from_its_snapshot_quickly() {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is not set: run the tests with ./scripts/test");
    let prefix = format!("roomd-resume-{}", Seed::from_os().unwrap().to_hex());
    let store = Arc::new(RedisStore::connect(&url, &prefix).await.expect("Redis at REDIS_URL is reachable"));
    // The first owner plays 5,000 bumps with the default snapshot period.
    let mut first = support::Node::new(room_actor::room::Clock::System);
    first.deps.store = store.clone();
    first.deps.snapshot_every = 64;
    let room = first.room("r_long", "tally", json!({"target": null}), "alice", 60);
    let pk = room.ask(Start { user: "alice".into() }).await.unwrap();
    let mut alice = support::Client::new(1, "alice");
    alice.subscribe(&room);
    for chunk in (1..=ENTRIES).collect::<Vec<_>>().chunks(1000) {
        for cs in chunk {
            alice.act(&room, *cs, json!({"type": "bump"}));
        }
        let last = *chunk.last().unwrap();
        loop {
            let ack = alice.next_of("ack").await;
            if ack["cs"] == last {
                break;
            }
        }
    }
    let stored = store.load(&pk).await.unwrap().unwrap();
    assert_eq!(stored.entries.len() as u64, ENTRIES);
    assert_eq!(stored.snapshot.as_ref().map(|s| s.seq), Some(ENTRIES / 64 * 64), "the latest snapshot is stored");

    // Another node (its own directory) claims the room, as after the first one died.
    let mut deps = first.deps.clone();
    deps.directory = Arc::new(Directory::new());
    deps.node_id = "n2".into();
    let config = support::cluster_config("n2", &url, &prefix);
    let second = ClusterNode::new(config, (*store).clone(), deps, FailoverMetrics::new().unwrap()).unwrap();
    let claimed = Instant::now();
    let handle = second.activate("r_long").await.unwrap().expect("the room is restored on n2");
    let restored = claimed.elapsed();
    let mut again = support::Client::new(2, "alice");
    again.subscribe(&handle);
    again.act(&handle, ENTRIES + 1, json!({"type": "bump"}));
    let update = again.next_of("update").await;
    let first_update = claimed.elapsed();
    assert_eq!(update["seq"], ENTRIES + 1);
    assert_eq!(update["view"]["count"], ENTRIES + 1, "the restored state is the played one");
    // A retry of an action from long before the snapshot is still deduplicated.
    again.act(&handle, 10, json!({"type": "bump"}));
    let retried = loop {
        let ack = again.next_of("ack").await;
        if ack["cs"] == 10 {
            break ack;
        }
    };
    assert_eq!(retried["seq"], 10);
    eprintln!(
        "resume of a {ENTRIES}-entry log: claim -> restored {} ms, claim -> first update {} ms",
        restored.as_millis(),
        first_update.as_millis()
    );
    assert!(first_update.as_secs() < 10, "resume took {first_update:?}");
}
