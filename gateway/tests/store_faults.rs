#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! A store that cannot write (a full disk): the embedded node on the file store refuses
//! actions with `room_unavailable` and acknowledges nothing, `/readyz` answers 503, and
//! play continues once writes succeed again. The fault is injected at the file store's
//! commit (`FileStore::fail_commits`, the same path a real `SQLITE_FULL` takes: the batch
//! is rolled back and every call in it refused); a real full filesystem is checked by
//! `room-actor/examples/full_disk.rs` on a small tmpfs (see deploy/RUNBOOK.md).

mod support;

use serde_json::json;
use support::start_server_with;

#[actix::test]
async fn a_store_that_cannot_write_refuses_actions_and_readiness_until_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    let server = start_server_with(move |s| {
        s.store.kind = gateway::config::StoreKind::File;
        s.store.path = path;
    });
    let store = server.file_store.clone().expect("the node runs on the file store");
    let alice = server.guest("앨리스").await;
    let bob = server.guest("밥").await;
    let (room, pk) = server.started_room("tally", json!({"target": 10}), &alice, &[&bob]).await;
    let mut ws = server.ws(&alice).await;
    ws.sub(&room).await;
    assert_eq!(ws.act_ok(&room, 1, json!({"type": "bump"})).await, 1);
    assert_eq!(server.get("/readyz", None).await.0, 200);

    store.fail_commits(true);
    let answer = ws.act(&room, 2, json!({"type": "bump"})).await;
    assert_eq!((answer["t"].as_str(), answer["code"].as_str()), (Some("error"), Some("room_unavailable")), "{answer}");
    let (status, body) = server.get("/readyz", None).await;
    assert_eq!((status, body["status"].as_str()), (503, Some("store_unavailable")), "{body}");
    assert!(!store.healthy());

    store.fail_commits(false);
    assert_eq!(server.get("/readyz", None).await.0, 200, "ready again once writes succeed");
    assert_eq!(ws.act_ok(&room, 2, json!({"type": "bump"})).await, 2, "the refused action, sent again, is applied");
    let stored = server.stored(&pk).await;
    assert_eq!(stored.entries.iter().map(|e| e.cs).collect::<Vec<_>>(), vec![Some(1), Some(2)], "nothing else stored");
}
