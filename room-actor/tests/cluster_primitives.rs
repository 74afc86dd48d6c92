#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The cluster's Redis primitives against a real Redis (`REDIS_URL`, provided by
//! ./scripts/test; these fail, never skip, without it): leases with growing epochs,
//! fencing of appends by a lost lease, batch renewal, release, membership, and the bus
//! outboxes (a burst batched in order; a frame nobody hears fails all it carried).

use engine::{Actor, PlayerId, Seed};
use room_actor::cluster::bus::{self, Envelope, Publisher, RoomCmd};
use room_actor::cluster::lease::Leases;
use room_actor::cluster::membership::{Member, Membership};
use room_actor::cluster::outbox::Outboxes;
use room_actor::keys::{game_pk, Keys};
use room_actor::log::{LogEntry, StartEntry};
use room_actor::metrics::RoomMetrics;
use room_actor::{RedisStore, RoomStore, StoreError};
use std::time::Duration;

async fn store() -> (RedisStore, Keys) {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is not set: run the tests with ./scripts/test");
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    let store = RedisStore::connect(&url, &prefix).await.expect("Redis at REDIS_URL is reachable");
    let keys = Keys::new(&prefix);
    (store, keys)
}

fn entry(seq: u64) -> LogEntry {
    LogEntry {
        seq,
        at: seq as i64,
        actor: Actor::Server,
        cs: None,
        rtt_ms: None,
        auto: true,
        input_json: "{}".into(),
        rtt: None,
    }
}

fn start_of(pk: &str) -> StartEntry {
    StartEntry {
        game_pk: pk.to_owned(),
        room_id: room_actor::keys::room_of(pk).unwrap_or_default().to_owned(),
        game: "tally".into(),
        seed: Seed(1),
        players: vec![PlayerId::from("p")],
        bots: vec![],
        names: vec![],
        options_json: "{}".into(),
        state_version: 1,
        started_at: 0,
        rtt: Default::default(),
    }
}

#[tokio::test]
async fn a_lost_lease_fences_the_old_owner_and_epochs_grow() {
    let (store, keys) = store().await;
    let a = Leases::new(store.connection(), keys.clone(), "node-a", 200);
    let b = Leases::new(store.connection(), keys.clone(), "node-b", 200);
    let token_a = a.claim("r_1").await.unwrap().expect("free lease");
    assert_eq!(token_a, "node-a/1");
    assert_eq!(b.claim("r_1").await.unwrap(), None, "held leases cannot be claimed");

    let pk = game_pk("r_1", "aa");
    let start = StartEntry {
        game_pk: pk.clone(),
        room_id: "r_1".into(),
        game: "tally".into(),
        seed: Seed(1),
        players: vec![PlayerId::from("p")],
        bots: vec![],
        names: vec![],
        options_json: "{}".into(),
        state_version: 1,
        started_at: 0,
        rtt: Default::default(),
    };
    store.begin(start).await.unwrap();
    store.append_fenced(pk.clone(), entry(1), token_a.clone()).await.unwrap();

    // node-a stops renewing (paused, partitioned): its lease expires and node-b claims.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let token_b = loop {
        if let Some(token) = b.claim("r_1").await.unwrap() {
            break token;
        }
        assert!(tokio::time::Instant::now() < deadline, "lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(token_b, "node-b/2", "the epoch grows with every claim");
    assert!(matches!(store.append_fenced(pk.clone(), entry(2), token_a.clone()).await, Err(StoreError::Fenced)));
    store.append_fenced(pk.clone(), entry(2), token_b.clone()).await.unwrap();
    assert_eq!(a.renew(&[("r_1".into(), token_a)]).await.unwrap(), vec!["r_1".to_owned()], "renewal reports the loss");
    let log = store.load(&pk).await.unwrap().unwrap();
    assert_eq!(log.entries.len(), 2);
}

#[tokio::test]
async fn take_over_needs_the_holders_token_and_fences_the_old_holder() {
    let (store, keys) = store().await;
    // The same node id before and after a restart: a new process, same name.
    let before = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let after = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let other = Leases::new(store.connection(), keys.clone(), "node-b", 60_000);
    let old = before.claim("r_t").await.unwrap().expect("free lease");
    assert_eq!(after.claim("r_t").await.unwrap(), None, "a held lease cannot be claimed");
    assert_eq!(after.take_over("r_t", "node-a/99").await.unwrap(), None, "only from the token actually held");
    assert_eq!(after.take_over("r_free", "node-a/1").await.unwrap(), None, "a free lease is claimed, not taken");
    let new = after.take_over("r_t", &old).await.unwrap().expect("taken from the holder it saw");
    assert_eq!(new, "node-a/2", "a higher epoch");
    assert_eq!(after.holder("r_t").await.unwrap().as_deref(), Some("node-a/2"));
    // The old incarnation is fenced: its appends and renewals fail, its release is void.
    let pk = game_pk("r_t", "01");
    store.begin(start_of(&pk)).await.unwrap();
    assert!(matches!(store.append_fenced(pk.clone(), entry(1), old.clone()).await, Err(StoreError::Fenced)));
    store.append_fenced(pk.clone(), entry(1), new.clone()).await.unwrap();
    assert_eq!(before.renew(&[("r_t".into(), old.clone())]).await.unwrap(), vec!["r_t".to_owned()]);
    assert!(!before.release("r_t", &old).await.unwrap());
    // The same primitive takes a dead node's lease for another node.
    let taken = other.take_over("r_t", &new).await.unwrap().expect("taken");
    assert_eq!(taken, "node-b/3");
}

#[tokio::test]
async fn renewal_keeps_held_leases_and_release_hands_over_at_once() {
    let (store, keys) = store().await;
    let a = Leases::new(store.connection(), keys.clone(), "node-a", 300);
    let b = Leases::new(store.connection(), keys.clone(), "node-b", 300);
    let t1 = a.claim("r_x").await.unwrap().unwrap();
    let t2 = a.claim("r_y").await.unwrap().unwrap();
    // Renewed every 100 ms for 900 ms (three TTLs), the leases never lapse.
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let lost = a.renew(&[("r_x".into(), t1.clone()), ("r_y".into(), t2.clone())]).await.unwrap();
        assert!(lost.is_empty(), "lost {lost:?}");
    }
    assert_eq!(b.claim("r_x").await.unwrap(), None);
    assert!(!b.release("r_x", "node-b/9").await.unwrap(), "only the holder releases");
    assert!(a.release("r_x", &t1).await.unwrap());
    assert_eq!(b.claim("r_x").await.unwrap().as_deref(), Some("node-b/2"));
    assert_eq!(a.holder("r_y").await.unwrap(), Some(t2));
}

#[tokio::test]
async fn membership_by_heartbeat_expiry_with_draining_flags() {
    let (store, keys) = store().await;
    let members = Membership::new(store.connection(), keys, 1000);
    members.heartbeat("n2", false, 10_000).await.unwrap();
    members.heartbeat("n1", true, 10_500).await.unwrap();
    assert_eq!(
        members.live(10_900).await.unwrap(),
        vec![Member { id: "n1".into(), draining: true }, Member { id: "n2".into(), draining: false }]
    );
    assert_eq!(members.live(11_100).await.unwrap(), vec![Member { id: "n1".into(), draining: true }], "n2 expired");
    members.leave("n1").await.unwrap();
    assert!(members.live(10_000).await.unwrap().iter().all(|m| m.id != "n1"));
}

fn act(cs: u64) -> Envelope {
    Envelope::Room {
        room: "r_1".into(),
        from: "node-a".into(),
        cmd: RoomCmd::Act { session: 1, user: "p".into(), cs, action_json: "{}".into() },
    }
}

/// A burst for one node leaves its outbox in a few frames (not one publish per message),
/// every envelope once and in the order it was sent.
#[tokio::test]
async fn an_outbox_sends_a_burst_in_few_frames_in_order() {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is not set: run the tests with ./scripts/test");
    let (store, _) = store().await;
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    let metrics = RoomMetrics::unregistered().unwrap();
    let mut rx =
        bus::subscribe(room_actor::redis_conn::RedisTarget::Single(url), prefix.clone(), "node-b".into(), metrics);
    let outboxes = Outboxes::new(Publisher::new(store.connection(), &prefix));
    // Until the subscription is up, a publish finds nobody listening.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while outboxes.send("node-b", act(0)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the bus subscription never came up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut frames = 0;
    let mut seen = Vec::new();
    for cs in 1..=1000 {
        outboxes.post("node-b", act(cs));
    }
    outboxes.send("node-b", act(1001)).await.expect("published");
    while !seen.ends_with(&[1001]) {
        let delivered = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("frames arrive").unwrap();
        frames += 1;
        for envelope in delivered.envelopes {
            if let Envelope::Room { cmd: RoomCmd::Act { cs, .. }, .. } = envelope {
                if cs > 0 {
                    seen.push(cs);
                }
            }
        }
    }
    assert_eq!(seen, (1..=1001).collect::<Vec<_>>(), "every envelope once, in order");
    assert!(frames <= 20, "1001 envelopes in {frames} frames: the outbox batches");
}

/// A frame nobody hears acknowledges none of what it carried: every waiter gets the
/// error, and the node's next message tries again (and fails again, no hang).
#[tokio::test]
async fn a_frame_nobody_hears_fails_every_message_in_it() {
    let (store, _) = store().await;
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    let outboxes = Outboxes::new(Publisher::new(store.connection(), &prefix));
    let sends = (1..=3).map(|cs| outboxes.send("node-gone", act(cs)));
    for result in futures_util::future::join_all(sends).await {
        assert!(matches!(result, Err(StoreError::Unavailable(_))), "{result:?}");
    }
    let again = tokio::time::timeout(Duration::from_secs(5), outboxes.send("node-gone", act(4))).await;
    assert!(matches!(again, Ok(Err(StoreError::Unavailable(_)))), "{again:?}");
}
