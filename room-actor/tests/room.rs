#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The room runner over the in-memory store, driven through its messages as the gateway
//! drives it.

mod support;

use engine::games::tally::Tally;
use room_actor::messages::{GetInfo, Start};
use room_actor::rebuild::{rebuild, From};
use room_actor::room::Clock;
use room_actor::store::Fence;
use room_actor::{RoomStatus, RoomStore};
use serde_json::json;
use support::*;

async fn started_tally(node: &Node, target: serde_json::Value) -> (room_actor::RoomHandle, String) {
    let room = node.room("r1", "tally", json!({ "target": target }), "alice", 60);
    seat(&room, "bob").await;
    let pk = room.ask(Start { user: "alice".into() }).await.unwrap();
    (room, pk)
}

#[actix::test]
async fn act_is_acked_and_every_subscriber_gets_the_update() {
    let node = Node::new(Clock::System);
    let (room, _) = started_tally(&node, json!(10)).await;
    let mut alice = Client::new(1, "alice");
    let mut watcher = Client::new(2, "stranger");
    alice.subscribe(&room);
    watcher.subscribe(&room);
    assert_eq!(alice.next_of("sync").await["seq"], 0);
    assert_eq!(watcher.next_of("sync").await["view"]["count"], 0);

    alice.act(&room, 1, json!({"type": "bump"}));
    let update = alice.next_of("update").await;
    assert_eq!((update["seq"].as_u64(), update["view"]["count"].as_u64()), (Some(1), Some(1)));
    assert_eq!(update["view"]["last"], "alice");
    assert_eq!(update["events"][0]["type"], "bumped");
    assert_eq!(alice.next_of("ack").await, json!({"t": "ack", "room": "r1", "cs": 1, "seq": 1}));
    assert_eq!(watcher.next_of("update").await["view"]["count"], 1);
}

#[actix::test]
async fn retried_cs_is_acked_with_its_seq_and_applied_once() {
    let node = Node::new(Clock::System);
    let (room, pk) = started_tally(&node, json!(10)).await;
    let mut alice = Client::new(1, "alice");
    alice.subscribe(&room);
    alice.act(&room, 7, json!({"type": "bump"}));
    assert_eq!(alice.next_of("ack").await["seq"], 1);
    alice.act(&room, 7, json!({"type": "bump"}));
    assert_eq!(alice.next_of("ack").await["seq"], 1);
    alice.act(&room, 8, json!({"type": "bump"}));
    assert_eq!(alice.next_of("ack").await["seq"], 2);
    let stored = node.store.load(&pk).await.unwrap().unwrap();
    assert_eq!(stored.entries.len(), 2);
}

#[actix::test]
async fn bad_shape_strangers_and_unstarted_rooms_are_rejected_without_change() {
    let node = Node::new(Clock::System);
    let waiting = node.room("w", "tally", json!({}), "alice", 60);
    let mut alice = Client::new(1, "alice");
    alice.act(&waiting, 1, json!({"type": "bump"}));
    assert_eq!(alice.next_of("reject").await["code"], "not_started");

    let (room, pk) = started_tally(&node, json!(10)).await;
    alice.act(&room, 1, json!({"type": "bump", "extra": true}));
    let r = alice.next_of("reject").await;
    assert_eq!((r["cs"].as_u64(), r["code"].as_str()), (Some(1), Some("bad_action")));
    alice.act(&room, 2, json!("bump"));
    assert_eq!(alice.next_of("reject").await["code"], "bad_action");
    let mut eve = Client::new(3, "eve");
    eve.act(&room, 1, json!({"type": "bump"}));
    let r = eve.next_of("reject").await;
    assert_eq!(r["code"], "not_seated");
    assert_eq!(r["reason"], "이 게임의 플레이어가 아니에요");
    assert!(node.store.load(&pk).await.unwrap().unwrap().entries.is_empty());
}

#[actix::test]
async fn finished_game_sends_result_and_is_recorded_and_rebuilds_identically() {
    let node = Node::new(Clock::System);
    let (room, pk) = started_tally(&node, json!(10)).await;
    let mut alice = Client::new(1, "alice");
    let bob = Client::new(2, "bob");
    alice.subscribe(&room);
    bob.subscribe(&room);
    for cs in 1..=10 {
        let who = if cs % 3 == 0 { &bob } else { &alice };
        who.act(&room, cs, json!({"type": "bump"}));
    }
    let result = alice.next_of("result").await;
    assert_eq!(result["gamePk"], pk.as_str());
    assert_eq!(result["result"]["ranking"][0][0], "alice");
    let info = room.ask(GetInfo).await.unwrap();
    assert_eq!(info.status, RoomStatus::Ended);

    let record = node.store.record(&pk).await.unwrap().expect("recorded");
    assert_eq!(record.final_seq, 10);
    let stored = node.store.load(&pk).await.unwrap().unwrap();
    let rebuilt = rebuild::<Tally>(&stored, From::Seed).unwrap();
    assert_eq!(serde_json::to_string(&rebuilt.state).unwrap(), record.final_state_json);
    let from_snapshot = rebuild::<Tally>(&stored, From::LatestSnapshot).unwrap();
    assert_eq!(from_snapshot.state, rebuilt.state);
    assert_eq!(rebuilt.applied.len(), 10);
    let games = node.store.games_of(&"bob".into(), None, 10).await.unwrap();
    assert_eq!(games.iter().map(|g| g.game_pk.as_str()).collect::<Vec<_>>(), vec![pk.as_str()]);
}

#[actix::test]
async fn bots_alone_play_tally_to_the_end() {
    tokio::time::pause();
    let node = Node::new(Clock::tokio());
    let room = node.room("b", "tally", json!({"target": 100}), "alice", 60);
    add_bot(&room, "alice").await;
    add_bot(&room, "alice").await;
    let mut watcher = Client::new(9, "alice");
    let pk = room.ask(Start { user: "alice".into() }).await.unwrap();
    watcher.subscribe(&room);
    let result = watcher.next_of("result").await;
    assert_eq!(result["gamePk"], pk.as_str());
    let stored = node.store.load(&pk).await.unwrap().unwrap();
    assert_eq!(stored.entries.len(), 100);
    // alice never acted: every input came from her bots (she is seated but silent).
    assert!(stored.entries.iter().all(|e| e.auto && e.actor != engine::Actor::Player("alice".into())));
}

#[actix::test]
async fn host_controls_bots_and_start_and_seats_are_bounded() {
    let node = Node::new(Clock::System);
    let room = node.room("h", "tally", json!({}), "alice", 60);
    let err = room.ask(room_actor::messages::TakeSeat { user: "bob".into(), name: "b".into(), bot: true }).await;
    assert_eq!(err.unwrap_err().code, "not_host");
    let err = room.ask(Start { user: "bob".into() }).await;
    assert_eq!(err.unwrap_err().code, "not_host");
    for _ in 0..7 {
        add_bot(&room, "alice").await;
    }
    let full = room.ask(room_actor::messages::TakeSeat { user: "carol".into(), name: "c".into(), bot: false }).await;
    assert_eq!(full.unwrap_err().code, "room_full");
    room.ask(Start { user: "alice".into() }).await.unwrap();
    let again = room.ask(Start { user: "alice".into() }).await;
    assert_eq!(again.unwrap_err().code, "already_started");
}

/// Issue 55: a player the host removed from a seat could sit straight back down. They
/// may watch, never sit in that room again, also once the room is restored elsewhere from
/// its saved info (as after a failover); a removed bot's place is the host's to refill.
#[actix::test]
async fn a_player_the_host_removed_cannot_sit_again_even_after_a_restore() {
    use room_actor::messages::{RemoveSeat, TakeSeat};
    use room_actor::room::RoomActor;
    let node = Node::new(Clock::System);
    let room = node.room("rm", "tally", json!({}), "alice", 60);
    seat(&room, "bob").await;
    seat(&room, "carol").await;
    add_bot(&room, "alice").await;
    room.ask(RemoveSeat { by: "alice".into(), user: "bob".into() }).await.unwrap();
    let sit = |room: &room_actor::RoomHandle, user: &str| {
        room.ask(TakeSeat { user: user.into(), name: user.into(), bot: false })
    };
    let refused = sit(&room, "bob").await.unwrap_err();
    assert_eq!((refused.status, refused.code.as_ref()), (403, "removed_from_seat"), "{refused:?}");
    assert!(refused.reason.contains("방장"), "{refused:?}");
    // Watching is still allowed: a subscription gets the room's view, no error.
    let mut bob = Client::new(2, "bob");
    bob.subscribe(&room);
    assert_eq!(bob.next_of("sync").await["room"], "rm");
    // A bot the host removed is replaced by another bot at the host's word.
    room.ask(RemoveSeat { by: "alice".into(), user: "bot_rm_1".into() }).await.unwrap();
    add_bot(&room, "alice").await;
    // Others are unaffected.
    room.ask(room_actor::messages::LeaveSeat { user: "carol".into() }).await.unwrap();
    sit(&room, "carol").await.unwrap();

    // The room comes back on another node from its saved info: bob is still refused.
    room.ask(GetInfo).await.unwrap();
    let info = node.store.room("rm").await.unwrap().expect("room info saved");
    let restored = RoomActor::<Tally>::restore(info, None, node.deps.clone(), Fence::Sole).unwrap().spawn();
    let refused = sit(&restored, "bob").await.unwrap_err();
    assert_eq!(refused.code, "removed_from_seat", "{refused:?}");
    sit(&restored, "dave").await.unwrap();
}

/// The list of removed players is bounded (it travels in every copy of the room's info):
/// past `MAX_REMOVED` the oldest is forgotten.
#[actix::test]
async fn a_room_remembers_the_last_players_its_host_removed() {
    use room_actor::messages::{RemoveSeat, TakeSeat};
    use room_actor::room::MAX_REMOVED;
    let node = Node::new(Clock::System);
    let room = node.room("rm-many", "tally", json!({}), "alice", 60);
    for i in 0..=MAX_REMOVED {
        seat(&room, &format!("p{i}")).await;
        room.ask(RemoveSeat { by: "alice".into(), user: format!("p{i}").into() }).await.unwrap();
    }
    let sit = |user: &str| room.ask(TakeSeat { user: user.into(), name: user.into(), bot: false });
    assert_eq!(sit("p1").await.unwrap_err().code, "removed_from_seat");
    assert_eq!(sit(&format!("p{MAX_REMOVED}")).await.unwrap_err().code, "removed_from_seat");
    sit("p0").await.unwrap();
}

#[actix::test]
async fn a_restored_room_continues_its_game_and_dedupes_old_retries() {
    use room_actor::room::RoomActor;
    use room_actor::RoomStore;
    let node = Node::new(Clock::System);
    let (room, pk) = started_tally(&node, json!(10)).await;
    let mut alice = Client::new(1, "alice");
    alice.subscribe(&room);
    for cs in 1..=4 {
        alice.act(&room, cs, json!({"type": "bump"}));
        alice.next_of("ack").await;
    }
    // The node dies; another actor (as on another node) restores the room from the store.
    let info = node.store.room("r1").await.unwrap().expect("room info saved");
    let stored = node.store.load(&pk).await.unwrap().unwrap();
    let mut other = Node::new(Clock::System);
    other.deps.store = node.deps.store.clone();
    let restored = RoomActor::<Tally>::restore(info, Some(stored), other.deps.clone(), Fence::Sole).unwrap().spawn();
    let mut bob = Client::new(2, "alice");
    bob.subscribe(&restored);
    let sync = bob.next_of("sync").await;
    assert_eq!((sync["seq"].as_u64(), sync["view"]["count"].as_u64()), (Some(4), Some(4)));
    bob.act(&restored, 3, json!({"type": "bump"}));
    assert_eq!(bob.next_of("ack").await["seq"], 3, "a retried cs from before the move is not applied again");
    bob.act(&restored, 5, json!({"type": "bump"}));
    assert_eq!(bob.next_of("ack").await["seq"], 5);
    assert_eq!(node.store.load(&pk).await.unwrap().unwrap().entries.len(), 5);
}

#[actix::test]
async fn a_restored_room_holds_deadlines_for_30_s_and_time_never_runs_backwards() {
    use engine::games::cockroach_poker::CockroachPoker;
    use room_actor::messages::Handover;
    use room_actor::room::{RoomActor, RECOVERY_HOLD_MS};
    use room_actor::RoomStore;
    tokio::time::pause();
    let node = Node::new(Clock::tokio());
    let room = node.room("cp", "cockroach-poker", json!({"turnSeconds": 15}), "alice", 60);
    add_bot(&room, "alice").await;
    add_bot(&room, "alice").await;
    let mut alice = Client::new(1, "alice");
    alice.subscribe(&room);
    let pk = room.ask(Start { user: "alice".into() }).await.unwrap();
    // Let the bots and alice's timeouts play a while, then the node "dies".
    loop {
        let update = alice.next_of("update").await;
        if update["seq"].as_u64().unwrap() >= 12 {
            break;
        }
    }
    room.handover().send(Handover).await.unwrap();
    let before = node.store.load(&pk).await.unwrap().unwrap();
    let last_at = before.entries.last().unwrap().at;
    let info = node.store.room("cp").await.unwrap().unwrap();
    let restored = RoomActor::<CockroachPoker>::restore(info, Some(before.clone()), node.deps.clone(), Fence::Sole)
        .unwrap()
        .spawn();
    let restored_at = node.deps.clock.now_ms();
    let mut watcher = Client::new(2, "alice");
    watcher.subscribe(&restored);
    watcher.next_of("result").await;
    let after = node.store.load(&pk).await.unwrap().unwrap();
    let resumed = &after.entries[before.entries.len()..];
    assert!(!resumed.is_empty());
    assert!(resumed.iter().all(|e| e.at >= last_at), "time ran backwards after the restore");
    let alice_timeouts: Vec<i64> =
        resumed.iter().filter(|e| e.actor == engine::Actor::Player("alice".into())).map(|e| e.at).collect();
    assert!(!alice_timeouts.is_empty(), "alice had turns after the restore");
    assert!(
        alice_timeouts.iter().all(|&at| at >= restored_at.max(last_at) + RECOVERY_HOLD_MS),
        "a deadline was enforced within 30 s of the restore: {alice_timeouts:?} (restored at {restored_at})"
    );
}

/// A player who leaves a running game is timed out at once from then on; closing their
/// socket afterwards, or watching again, must not give them their grace back.
#[actix::test]
async fn a_player_who_left_stays_timed_out_after_closing_or_reopening_their_socket() {
    use room_actor::messages::LeaveSeat;
    tokio::time::pause();
    let node = Node::new(Clock::tokio());
    // Long turns and grace: a timeout that waits for either is the bug.
    let room = node.room("cp-leave", "cockroach-poker", json!({"turnSeconds": 60}), "alice", 120);
    seat(&room, "bob").await;
    let mut alice = Client::new(1, "alice");
    let bob = Client::new(2, "bob");
    alice.subscribe(&room);
    bob.subscribe(&room);
    let pk = room.ask(Start { user: "alice".into() }).await.unwrap();
    room.ask(LeaveSeat { user: "bob".into() }).await.unwrap();
    bob.unsubscribe(&room);
    room.ask(GetInfo).await.unwrap(); // handled in mailbox order: the unsubscribe is done
    let mut cs = 0;
    let mut resubscribed = false;
    loop {
        let msg = alice.rx.recv().await.expect("room alive");
        if msg["t"] == "result" {
            break;
        }
        if msg["t"] != "update" && msg["t"] != "sync" {
            continue;
        }
        let view = &msg["view"];
        if view["loser"].is_string() {
            continue;
        }
        if view["starter"] == "alice" && view["holder"].is_null() {
            if cs == 3 && !resubscribed {
                // bob comes back to watch: still gone.
                bob.subscribe(&room);
                resubscribed = true;
            }
            let card = &view["hand"][0];
            cs += 1;
            alice.act(&room, cs, json!({"type": "offer", "cardId": card["id"], "to": "bob", "claim": card["kind"]}));
        }
    }
    assert!(resubscribed, "the game ended before bob watched again");
    let stored = node.store.load(&pk).await.unwrap().unwrap();
    let mut bob_moves = 0;
    for pair in stored.entries.windows(2) {
        if pair[1].actor == engine::Actor::Player("bob".into()) {
            bob_moves += 1;
            assert!(pair[1].auto, "seq {}: bob acted after leaving", pair[1].seq);
            let waited = pair[1].at - pair[0].at;
            assert!(waited < 2_000, "seq {}: bob was timed out {waited} ms after his turn began", pair[1].seq);
        }
    }
    assert!(bob_moves >= 3, "bob was timed out {bob_moves} times");
}

/// Records each frame's text and the address of its bytes.
struct RawCollector(tokio::sync::mpsc::UnboundedSender<(usize, String)>);

impl actix::Actor for RawCollector {
    type Context = actix::Context<Self>;
}

impl actix::Handler<room_actor::messages::ToClient> for RawCollector {
    type Result = ();
    fn handle(&mut self, msg: room_actor::messages::ToClient, _: &mut actix::Context<Self>) {
        let _ = self.0.send((msg.text.as_ptr() as usize, msg.text.to_string()));
    }
}

#[actix::test]
async fn viewers_who_see_the_same_view_share_one_update_frame() {
    use actix::Actor;
    let node = Node::new(Clock::System);
    let (room, _) = started_tally(&node, json!(10)).await;
    let mut receivers = Vec::new();
    for (session, user) in [(11, "alice"), (12, "bob"), (13, "stranger")] {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let out = RawCollector(tx).start().recipient();
        let from = room_actor::messages::Sender {
            session: room_actor::messages::SessionId(session),
            user: user.into(),
            out: out.into(),
            received: std::time::Instant::now(),
            hop: std::time::Duration::ZERO,
        };
        room.tell(from, room_actor::messages::Subscribe).unwrap();
        receivers.push(rx);
    }
    let mut alice = Client::new(1, "alice");
    alice.act(&room, 1, json!({"type": "bump"}));
    alice.next_of("ack").await;
    let mut updates = Vec::new();
    for rx in &mut receivers {
        loop {
            let (ptr, text) =
                tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv()).await.unwrap().unwrap();
            if text.contains(r#""t":"update""#) {
                updates.push((ptr, text));
                break;
            }
        }
    }
    // Tally hides nothing: both players and the spectator get one text, one allocation.
    assert!(updates.iter().all(|u| u.1 == updates[0].1), "{updates:?}");
    assert!(updates.iter().all(|u| u.0 == updates[0].0), "the frame was copied per viewer: {updates:?}");
}
