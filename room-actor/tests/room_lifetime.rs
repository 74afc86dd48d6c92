#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! How long a room lives: an ended game nobody watches closes after `ENDED_LINGER`
//! (embedded mode), so a long-running node does not keep every finished room forever;
//! the finished game stays in the store.

mod support;

use room_actor::messages::{GetInfo, Start};
use room_actor::room::{Clock, ENDED_LINGER};
use room_actor::{RoomHandle, RoomStatus, RoomStore};
use serde_json::json;
use std::time::Duration;
use support::*;

const TICK: Duration = Duration::from_secs(1);

/// A two-player tally to 10, played to its result by alice; returns the room and gamePk.
async fn finished_tally(node: &Node, id: &str, alice: &mut Client) -> (RoomHandle, String) {
    let room = node.room(id, "tally", json!({"target": 10}), "alice", 60);
    seat(&room, "bob").await;
    let pk = room.ask(Start { user: "alice".into() }).await.unwrap();
    alice.subscribe(&room);
    for cs in 1..=10 {
        alice.act(&room, cs, json!({"type": "bump"}));
    }
    assert_eq!(alice.next_of("result").await["gamePk"], pk.as_str());
    assert_eq!(room.ask(GetInfo).await.unwrap().status, RoomStatus::Ended);
    (room, pk)
}

#[actix::test]
async fn an_ended_room_closes_a_linger_after_its_last_watcher_left() {
    tokio::time::pause();
    let node = Node::new(Clock::tokio());
    let mut alice = Client::new(1, "alice");
    let (room, pk) = finished_tally(&node, "r1", &mut alice).await;

    // Watched: it stays, however long.
    tokio::time::sleep(ENDED_LINGER * 10).await;
    assert!(node.directory.handle("r1").is_some(), "a watched ended room was closed");
    assert_eq!(node.deps.metrics.rooms.get(), 1);

    alice.unsubscribe(&room);
    room.ask(GetInfo).await.unwrap(); // handled in mailbox order: the unsubscribe is done
    tokio::time::sleep(ENDED_LINGER - TICK).await;
    assert!(node.directory.handle("r1").is_some(), "closed before the linger was over");

    tokio::time::sleep(2 * TICK).await;
    assert!(node.directory.handle("r1").is_none(), "the abandoned ended room is still in the directory");
    assert_eq!(node.deps.metrics.rooms.get(), 0);
    assert!(room.ask(GetInfo).await.is_err(), "the room's actor still answers");
    // The finished game itself is kept.
    assert_eq!(node.store.record(&pk).await.unwrap().expect("recorded").final_seq, 10);
    assert_eq!(node.store.games_of(&"bob".into(), None, 10).await.unwrap().len(), 1);
}

#[actix::test]
async fn watching_again_within_the_linger_keeps_the_room() {
    tokio::time::pause();
    let node = Node::new(Clock::tokio());
    let mut alice = Client::new(1, "alice");
    let (room, pk) = finished_tally(&node, "r2", &mut alice).await;
    alice.unsubscribe(&room);
    room.ask(GetInfo).await.unwrap(); // handled in mailbox order: the unsubscribe is done
    tokio::time::sleep(ENDED_LINGER / 2).await;

    // bob comes back to see the result: sync and result again, and the close is off.
    let mut bob = Client::new(2, "bob");
    bob.subscribe(&room);
    assert_eq!(bob.next_of("sync").await["view"]["count"], 10);
    assert_eq!(bob.next_of("result").await["gamePk"], pk.as_str());
    tokio::time::sleep(ENDED_LINGER * 3).await;
    assert!(node.directory.handle("r2").is_some(), "closed while bob watches");

    // Once bob leaves too, a full linger again.
    bob.unsubscribe(&room);
    room.ask(GetInfo).await.unwrap(); // handled in mailbox order: the unsubscribe is done
    tokio::time::sleep(ENDED_LINGER - TICK).await;
    assert!(node.directory.handle("r2").is_some());
    tokio::time::sleep(2 * TICK).await;
    assert!(node.directory.handle("r2").is_none());
}

#[actix::test]
async fn rooms_still_waiting_or_playing_are_not_closed() {
    tokio::time::pause();
    let node = Node::new(Clock::tokio());
    let waiting = node.room("w", "tally", json!({"target": 10}), "alice", 60);
    let playing = node.room("p", "tally", json!({"target": 10}), "alice", 60);
    playing.ask(Start { user: "alice".into() }).await.unwrap();
    let mut alice = Client::new(1, "alice");
    alice.subscribe(&playing);
    alice.act(&playing, 1, json!({"type": "bump"}));
    assert_eq!(alice.next_of("ack").await["seq"], 1);
    alice.unsubscribe(&playing);
    playing.ask(GetInfo).await.unwrap(); // handled in mailbox order: the unsubscribe is done

    tokio::time::sleep(ENDED_LINGER * 10).await;
    assert!(node.directory.handle("w").is_some());
    assert!(node.directory.handle("p").is_some());
    assert_eq!(waiting.ask(GetInfo).await.unwrap().status, RoomStatus::Waiting);
    assert_eq!(playing.ask(GetInfo).await.unwrap().status, RoomStatus::Playing);
}

/// A node that died between a game's last entry and its record (the record is written
/// after the entry that ended the game): when the room is resumed from the store, the
/// room sees its game ended by the rules and writes the record the crash lost, the same
/// record the finished game would have written.
#[actix::test]
async fn a_record_lost_in_a_crash_after_the_last_entry_is_written_when_the_room_resumes() {
    let node = Node::new(Clock::tokio());
    let mut alice = Client::new(1, "alice");
    let (room, pk) = finished_tally(&node, "r_crash", &mut alice).await;
    let recorded = node.store.record(&pk).await.unwrap().expect("the finished game is recorded");
    let stored = node.store.load(&pk).await.unwrap().unwrap();
    let mut info = node.store.room("r_crash").await.unwrap().unwrap();
    drop(room);

    // What the crash left: the whole log, the room still saved as playing, no record.
    let crashed = room_actor::MemoryStore::new();
    crashed.begin(stored.start.clone()).await.unwrap();
    for entry in stored.entries.clone() {
        crashed.append(&pk, entry).await.unwrap();
    }
    info.status = RoomStatus::Playing;
    crashed.put_room(&info).await.unwrap();
    assert!(crashed.record(&pk).await.unwrap().is_none());

    let restarted = Node::new(Clock::tokio());
    let mut deps = restarted.deps.clone();
    deps.store = std::sync::Arc::new(crashed.clone());
    let resumed = room_actor::resume::resume_open_rooms(&deps).await.unwrap();
    assert_eq!((resumed.rooms, resumed.games), (1, 1));

    let mut again = None;
    for _ in 0..100 {
        again = crashed.record(&pk).await.unwrap();
        if again.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(again.as_ref(), Some(&recorded), "the resumed room writes the record the finished game wrote");
    assert_eq!(crashed.room("r_crash").await.unwrap().unwrap().status, RoomStatus::Ended);
}
