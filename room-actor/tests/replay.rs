#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Replays (`game-engine.md` §8): every game played to the end through a real room, then
//! rebuilt for each participant; scene k, after applying the patches, must equal exactly
//! the view that player received in the update with seq k.

mod support;

use engine::PlayerId;
use room_actor::log::{GameRecord, StoredGame};
use room_actor::messages::Start;
use room_actor::replay::{build_any, ReplayGone};
use room_actor::room::Clock;
use room_actor::RoomStore;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use support::*;

/// Plays `game` with a human "alice" (who acts only through `act`, or never) and bots,
/// and returns what alice received by seq, plus the stored game and record.
async fn play(
    game: &str,
    options: Value,
    bots: usize,
    mut act: impl FnMut(u64, &Value) -> Option<Value>,
) -> (BTreeMap<u64, Value>, StoredGame, GameRecord) {
    tokio::time::pause();
    let node = Node::new(Clock::tokio());
    let room = node.room("rp", game, options, "alice", 60);
    for _ in 0..bots {
        add_bot(&room, "alice").await;
    }
    let mut alice = Client::new(1, "alice");
    alice.subscribe(&room);
    let pk = room.ask(Start { user: "alice".into() }).await.unwrap();
    let mut seen = BTreeMap::new();
    let mut cs = 0;
    loop {
        let msg = alice.rx.recv().await.expect("room alive");
        match msg["t"].as_str() {
            Some("update") => {
                let seq = msg["seq"].as_u64().unwrap();
                seen.insert(seq, msg["view"].clone());
                if let Some(action) = act(seq, &msg["view"]) {
                    cs += 1;
                    alice.act(&room, cs, action);
                }
            }
            Some("result") => break,
            _ => {}
        }
    }
    let stored = node.store.load(&pk).await.unwrap().unwrap();
    let record = node.store.record(&pk).await.unwrap().unwrap();
    (seen, stored, record)
}

/// Applies the patches one by one and checks every scene against what was received.
fn check_scenes(seen: &BTreeMap<u64, Value>, stored: &StoredGame, record: &GameRecord, viewer: &str) {
    let replay = build_any(stored, record, &PlayerId::from(viewer)).unwrap();
    assert_eq!(replay.scenes, replay.steps.len());
    assert_eq!(replay.scenes, replay.patches.len() + 1);
    assert_eq!(replay.steps[0].kind, "start");
    let mut scene = replay.first.clone();
    for (patch, step) in replay.patches.iter().zip(&replay.steps[1..]) {
        json_patch::patch(&mut scene, patch).unwrap();
        let received = seen.get(&step.seq).unwrap_or_else(|| panic!("no update {} received", step.seq));
        assert_eq!(&scene, received, "scene for seq {} differs from the update {viewer} received", step.seq);
    }
    assert_eq!(replay.steps.last().unwrap().seq, record.final_seq);
    // Patches are plain RFC 6902 documents.
    let wire = serde_json::to_value(&replay.patches).unwrap();
    assert!(wire
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p.as_array().unwrap().iter())
        .all(|op| op["op"].is_string() && op["path"].is_string()));
}

#[actix::test]
async fn tally_replay_scenes_equal_what_the_player_received() {
    let (seen, stored, record) =
        play("tally", json!({"target": 10}), 1, |seq, _| (seq % 2 == 0).then(|| json!({"type": "bump"}))).await;
    check_scenes(&seen, &stored, &record, "alice");
    let replay = build_any(&stored, &record, &"alice".into()).unwrap();
    assert!(replay.steps.iter().any(|s| s.kind == "player" && s.actor == Some("alice".into())));
    // The bot's bumps are its own moves, not something done for someone whose time ran out.
    assert!(replay
        .steps
        .iter()
        .any(|s| s.kind == "bot" && stored.start.bots.iter().any(|b| s.actor.as_ref() == Some(b))));
    assert!(replay.steps.iter().all(|s| s.kind != "auto"), "tally has no timeouts: {:?}", replay.steps);
}

#[actix::test]
async fn halli_galli_replay_scenes_equal_what_the_player_received() {
    // alice never acts: her flips are the server's timeouts.
    let (seen, stored, record) = play("halli-galli", json!({"timeLimitMin": 5}), 2, |_, _| None).await;
    assert!(record.final_seq > 10);
    check_scenes(&seen, &stored, &record, "alice");
}

#[actix::test]
async fn cockroach_poker_replay_scenes_equal_what_the_player_received() {
    let (seen, stored, record) =
        play("cockroach-poker", json!({"loseCount": 3, "turnSeconds": 15}), 2, |_, _| None).await;
    check_scenes(&seen, &stored, &record, "alice");
    // A bot's replay shows the bot's own hand, never alice's.
    let bot = record.players.iter().find(|p| p.as_str() != "alice").unwrap().clone();
    let replay = build_any(&stored, &record, &bot).unwrap();
    assert_ne!(replay.first["hand"], seen.values().next().unwrap()["hand"]);
}

#[actix::test]
async fn replay_is_refused_when_rules_changed_or_rebuild_differs() {
    let (_, stored, record) = play("tally", json!({"target": 10}), 1, |_, _| None).await;
    let mut old = stored.clone();
    old.start.state_version += 1;
    assert!(matches!(build_any(&old, &record, &"alice".into()), Err(ReplayGone::StateVersion { .. })));
    let mut tampered = record.clone();
    tampered.final_state_json = tampered.final_state_json.replace("\"count\":10", "\"count\":11");
    let err = build_any(&stored, &tampered, &"alice".into()).unwrap_err();
    assert!(matches!(err, ReplayGone::Mismatch(_)), "{err:?}");
    assert_eq!(err.code(), "replay_mismatch");
    let mut short = stored.clone();
    short.entries.pop();
    assert!(matches!(build_any(&short, &record, &"alice".into()), Err(ReplayGone::Mismatch(_))));
    let mut other_result = record.clone();
    other_result.result_json = "null".into();
    assert!(matches!(build_any(&stored, &other_result, &"alice".into()), Err(ReplayGone::Mismatch(_))));
}
