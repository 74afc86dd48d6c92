#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The cluster's Redis primitives against a real Redis (`REDIS_URL`, provided by
//! ./scripts/test; these fail, never skip, without it): leases with growing epochs,
//! fencing of appends by a lost lease, lease checks and renewal, release, membership, the bus
//! outboxes (a burst batched in order; a frame nobody hears fails all it carried; a
//! remote subscriber's frames; peer links taken mid-stream in order, and a peer address
//! that never answers), and appends group-committed across rooms (one test with
//! replicated acknowledgements starts a private master and replica of its own).

use engine::{Actor, PlayerId, Seed};
use room_actor::cluster::bus::{self, Envelope, Publisher, RoomCmd};
use room_actor::cluster::lease::Leases;
use room_actor::cluster::link::{self, Gate, Inbound, LinkKey, Links, PeerBook};
use room_actor::cluster::membership::{Member, Membership};
use room_actor::cluster::ops;
use room_actor::cluster::outbox::{Outboxes, RemoteOut};
use room_actor::log::{LogEntry, StartEntry};
use room_actor::messages::{Act, ByteString, Out, ToClient};
use room_actor::metrics::RoomMetrics;
use room_actor::redis::keys::{game_pk, Keys};
use room_actor::redis::target::RedisTarget;
use room_actor::{RedisStore, RoomStore, StoreError};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        room_id: room_actor::redis::keys::room_of(pk).unwrap_or_default().to_owned(),
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
    // As a node that takes a room over does before it reads the log (`lua/fence.lua`):
    // after this, node-a's next entry is refused even on its queue's fast path.
    store.fence(&pk, &token_b).await.unwrap();
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
async fn a_lease_check_reports_every_way_a_lease_is_lost_and_renewal_revives_none() {
    let (store, keys) = store().await;
    let a = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let b = Leases::new(store.connection(), keys.clone(), "node-b", 60_000);
    let mut held = Vec::new();
    for room in ["r_kept", "r_taken", "r_released", "r_forgotten"] {
        held.push((room.to_owned(), a.claim(room).await.unwrap().expect("free lease")));
    }
    let b_token = b.take_over("r_taken", &held[1].1).await.unwrap().expect("taken over");
    assert!(a.release("r_released", &held[2].1).await.unwrap());
    // A Redis that lost the key (restarted empty, or a replica promoted before it had it).
    let mut conn = store.connection();
    let _: i64 = redis::cmd("DEL").arg(keys.lease("r_forgotten")).query_async(&mut conn).await.unwrap();
    let pttl = |room: &str| {
        let mut conn = store.connection();
        let key = keys.lease(room);
        async move { redis::cmd("PTTL").arg(key).query_async::<i64>(&mut conn).await.unwrap() }
    };
    let _: i64 = redis::cmd("PEXPIRE").arg(keys.lease("r_kept")).arg(5_000).query_async(&mut conn).await.unwrap();

    let mut lost = a.verify(&held).await.unwrap();
    lost.sort();
    assert_eq!(lost, ["r_forgotten", "r_released", "r_taken"]);
    assert!(pttl("r_kept").await <= 5_000, "a check writes nothing");

    let mut lost = a.renew(&held).await.unwrap();
    lost.sort();
    assert_eq!(lost, ["r_forgotten", "r_released", "r_taken"], "renewal reports the same losses");
    assert!(pttl("r_kept").await > 50_000, "the lease still held gets the whole TTL again");
    assert_eq!(a.holder("r_taken").await.unwrap(), Some(b_token), "the new holder keeps it");
    assert_eq!(a.holder("r_released").await.unwrap(), None, "renewal gives nothing back");
    assert_eq!(a.holder("r_forgotten").await.unwrap(), None);
    assert!(a.verify(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn membership_by_heartbeat_expiry_with_draining_flags() {
    let (store, keys) = store().await;
    let members = Membership::new(store.connection(), keys, 1000);
    members.heartbeat("n2", false, 10_000).await.unwrap();
    members.heartbeat("n1", true, 10_500).await.unwrap();
    assert_eq!(
        members.live(10_900).await.unwrap(),
        vec![
            Member { id: "n1".into(), draining: true, peer: None },
            Member { id: "n2".into(), draining: false, peer: None }
        ]
    );
    assert_eq!(
        members.live(11_100).await.unwrap(),
        vec![Member { id: "n1".into(), draining: true, peer: None }],
        "n2 expired"
    );
    members.leave("n1").await.unwrap();
    assert!(members.live(10_000).await.unwrap().iter().all(|m| m.id != "n1"));
}

#[tokio::test]
async fn the_side_entries_of_nodes_long_gone_from_the_set_are_swept_and_the_live_keep_theirs() {
    let (store, keys) = store().await;
    let members = Membership::new(store.connection(), keys.clone(), 1000);
    members.heartbeat_with("gone", true, Some("127.0.0.1:7001"), 10_000).await.unwrap();
    members.heartbeat_with("here", false, Some("127.0.0.1:7002"), 10_000).await.unwrap();
    for node in ["gone", "here"] {
        ops::report(&store.connection(), &keys, node, &serde_json::json!({"rooms": 1})).await.unwrap();
    }
    let mut conn = store.connection();
    let fields = |key: String| {
        let mut conn = store.connection();
        async move {
            let mut ids: Vec<String> = redis::cmd("HKEYS").arg(key).query_async(&mut conn).await.unwrap();
            ids.sort();
            ids
        }
    };
    // Nothing to sweep while both are in the set (even "gone", whose beat expired).
    assert_eq!(members.sweep().await.unwrap(), 0);
    // "here" beats 60 TTLs later: the heartbeat trims "gone" from the set, not its entries.
    members.heartbeat_with("here", false, Some("127.0.0.1:7002"), 10_000 + 61_000).await.unwrap();
    let set: Vec<String> = redis::cmd("ZRANGE").arg(keys.nodes()).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    assert_eq!(set, vec!["here".to_owned()]);
    assert_eq!(fields(keys.node_peers()).await, vec!["gone".to_owned(), "here".to_owned()]);
    assert_eq!(members.sweep().await.unwrap(), 3, "gone's draining flag, peer address and stats");
    for key in [keys.draining(), keys.node_peers(), keys.node_stats()] {
        assert_eq!(fields(key).await, vec!["here".to_owned()]);
    }
    let live = members.live(71_000).await.unwrap();
    assert_eq!(live, vec![Member { id: "here".into(), draining: false, peer: Some("127.0.0.1:7002".into()) }]);
}

fn act(cs: u64) -> Envelope {
    Envelope::Room {
        room: "r_1".into(),
        from: "node-a".into(),
        cmd: RoomCmd::tell(1, "p", Act { cs, action: "{}".into() }),
    }
}

/// The `cs` of every action a frame carries, in order.
fn acts_in(delivered: &bus::Delivered) -> Vec<u64> {
    delivered.envelopes.iter().filter_map(envelope_cs).collect()
}

/// The `cs` of the action an envelope carries, if it carries one.
fn envelope_cs(envelope: &Envelope) -> Option<u64> {
    match envelope {
        Envelope::Room { cmd, .. } => cmd.session_verb().and_then(|verb| verb.cs()),
        _ => None,
    }
}

/// Outboxes of a node, and the bus of `node-b` listening (a first message went through).
async fn outboxes_to_node_b() -> (Outboxes, bus::Subscription) {
    let (store, prefix, rx) = bus_of_node_b().await;
    (Outboxes::new(Publisher::new(store.thread_conns(), &prefix), Duration::ZERO), rx)
}

/// A store, its prefix and the bus of `node-b` listening (a first message through an
/// outbox of its own went through).
async fn bus_of_node_b() -> (RedisStore, String, bus::Subscription) {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is not set: run the tests with ./scripts/test");
    let (store, _) = store().await;
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    let metrics = RoomMetrics::unregistered().unwrap();
    let mut rx = bus::subscribe(RedisTarget::Single(url), prefix.clone(), "node-b".into(), metrics);
    let probe = Outboxes::new(Publisher::new(store.thread_conns(), &prefix), Duration::ZERO);
    // Until the subscription is up, a publish finds nobody listening.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while probe.send("node-b", act(0)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the bus subscription never came up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while tokio::time::timeout(Duration::from_millis(100), rx.recv()).await.is_ok() {}
    (store, prefix, rx)
}

/// Outboxes that dial `node-b`'s peer link at `addr` (as node `node-a`), with their metrics.
fn linked(outboxes: Outboxes, addr: &str) -> (Outboxes, RoomMetrics) {
    let metrics = RoomMetrics::unregistered().unwrap();
    let book = PeerBook::default();
    book.set([("node-b".to_owned(), addr.to_owned())].into());
    let links = Links {
        key: std::sync::Arc::new(LinkKey::from_secret(LINK_SECRET)),
        me: "node-a".into(),
        book,
        metrics: metrics.clone(),
    };
    (outboxes.with_links(std::sync::Arc::new(links)), metrics)
}

const LINK_SECRET: &str = "cluster-primitives-link-secret";

/// `node-b` taking peer links: the address it listens on and what its links bring.
async fn links_of_node_b() -> (String, tokio::sync::mpsc::UnboundedReceiver<Inbound>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (link_tx, link_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(link::listen(
        listener,
        std::sync::Arc::new(LinkKey::from_secret(LINK_SECRET)),
        "node-b".into(),
        link_tx,
        RoomMetrics::unregistered().unwrap(),
    ));
    (addr, link_rx)
}

/// An outbox moves a busy destination from Redis to its peer link mid-stream; the
/// receiver, gating the link's frames on its mark as a node's bus loop does
/// (`link::Gate`), sees every envelope once and in the order sent, the last ones from
/// the link.
#[tokio::test]
async fn a_destination_moved_onto_its_link_mid_stream_gets_everything_in_order() {
    let (store, prefix, mut redis_rx) = bus_of_node_b().await;
    let (addr, mut link_rx) = links_of_node_b().await;
    let (outboxes, metrics) =
        linked(Outboxes::new(Publisher::new(store.thread_conns(), &prefix), Duration::ZERO), &addr);
    // A steady stream: the first frames go through Redis while the link is dialled.
    let sender = tokio::spawn(async move {
        for cs in 1..=400 {
            outboxes.post("node-b", act(cs));
            if cs % 4 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        outboxes.send("node-b", act(401)).await.expect("sent");
    });
    let mut gate = Gate::default();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen.ends_with(&[401]) {
        assert!(tokio::time::Instant::now() < deadline, "stream incomplete: {} of 401", seen.len());
        let mut deliver = Vec::new();
        // The link first, and the subscription a little behind it (as a busy Redis or
        // bus loop makes it): without the gate, the link's first frames would overtake
        // the last ones published.
        tokio::select! {
            biased;
            Some(inbound) = link_rx.recv() => match inbound {
                Inbound::Frame { link, delivered } => deliver.extend(gate.frame(link, delivered, Instant::now())),
                Inbound::Closed { link } => deliver.extend(gate.closed(link)),
            },
            Some(delivered) = async {
                tokio::time::sleep(Duration::from_millis(2)).await;
                redis_rx.recv().await
            } => {
                for envelope in delivered.envelopes {
                    match envelope {
                        Envelope::Link { link, .. } => deliver.extend(gate.mark(link)),
                        other => deliver.push(bus::Delivered { envelopes: vec![other], lag: Duration::ZERO }),
                    }
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => deliver.extend(gate.expired(Instant::now())),
        }
        for delivered in deliver {
            seen.extend(acts_in(&delivered).into_iter().filter(|cs| *cs > 0));
        }
    }
    sender.await.unwrap();
    assert_eq!(seen, (1..=401).collect::<Vec<_>>(), "every envelope once, in order, across the switch");
    let by = |path: &str| metrics.bus_frames_sent.with_label_values(&[path]).get();
    assert!(by("redis") >= 1, "the first frames went through Redis while the link was dialled");
    assert!(by("link") >= 1, "the rest went on the link");
}

/// A receiver that stops reading its link (a stalled node): the sender's write times out,
/// it gives the link up and goes on through Redis, saying so first (`Envelope::Unlink`).
/// The receiver, gating as a node's bus loop does, delivers the link's frames it takes
/// before that mark and drops those it takes after: every envelope it delivers comes in
/// the order sent, and what was sent after the switch arrives.
#[tokio::test]
async fn a_link_given_up_on_a_stalled_receiver_never_delivers_a_frame_after_what_followed_it_through_redis() {
    use tokio::io::AsyncReadExt;
    let (store, prefix, mut redis_rx) = bus_of_node_b().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // The receiver takes one link (then no more: a redial is refused) and reads nothing
    // from it until the sender is done.
    let taken = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        link::handshake(stream, &LinkKey::from_secret(LINK_SECRET), "node-b").await.unwrap()
    });
    let (outboxes, metrics) =
        linked(Outboxes::new(Publisher::new(store.thread_conns(), &prefix), Duration::ZERO), &addr);
    let sent = metrics.clone();
    let sender = tokio::spawn(async move {
        let by = |path: &str| sent.bus_frames_sent.with_label_values(&[path]).get();
        let big = "x".repeat(64 * 1024);
        let act_of = |cs: u64| Envelope::Room {
            room: "r_1".into(),
            from: "node-a".into(),
            cmd: RoomCmd::tell(1, "p", Act { cs, action: big.clone() }),
        };
        // Through Redis while the link is dialled, then on the link until the receiver's
        // buffers are full and a write times out, then through Redis again: five more.
        let (mut cs, mut redis_at_first_link, mut after_switch) = (0, None, 0);
        while after_switch < 5 {
            cs += 1;
            outboxes.send("node-b", act_of(cs)).await.expect("sent");
            if redis_at_first_link.is_none() && by("link") > 0 {
                redis_at_first_link = Some(by("redis"));
            }
            if redis_at_first_link.is_some_and(|at| by("redis") > at) {
                after_switch += 1;
            }
            assert!(cs < 5_000, "the link never stalled");
        }
        cs
    });
    let last = tokio::time::timeout(Duration::from_secs(60), sender).await.expect("the sender finished").unwrap();
    let (mut stream, link_id, mut check) = taken.await.unwrap();
    let frame_metrics = RoomMetrics::unregistered().unwrap();
    // One frame as the link carries it: its length, the bus frame and its tag, checked.
    let mut read_link_frame = async move || -> Option<bus::Delivered> {
        let mut written = stream.read_u32_le().await.ok()?.to_le_bytes().to_vec();
        let len = written.len() + u32::from_le_bytes(written[..4].try_into().ok()?) as usize;
        written.resize(len, 0);
        stream.read_exact(&mut written[4..]).await.ok()?;
        let mut tag = [0u8; room_actor::cluster::link_wire::TAG];
        stream.read_exact(&mut tag).await.ok()?;
        check.check(&written, &tag).ok()?;
        bus::accept_frame(&written[4..], bus::FrameSource::Link, &frame_metrics)
    };
    let mut gate = Gate::default();
    let mut seen = Vec::new();
    let mut dropped = 0;
    let mut redis = async |gate: &mut Gate, seen: &mut Vec<u64>, until_mark: bool| loop {
        let delivered = tokio::time::timeout(Duration::from_secs(10), redis_rx.recv()).await.expect("frames").unwrap();
        for envelope in delivered.envelopes {
            match envelope {
                Envelope::Link { link, .. } => {
                    assert_eq!(link, link_id);
                    assert!(gate.mark(link).is_empty());
                    if until_mark {
                        return;
                    }
                }
                Envelope::Unlink { link, .. } => {
                    assert_eq!(link, link_id);
                    for held in gate.cut(link) {
                        seen.extend(acts_in(&held));
                    }
                }
                other => seen.extend(acts_in(&bus::Delivered { envelopes: vec![other], lag: Duration::ZERO })),
            }
        }
        if seen.last() == Some(&last) {
            return;
        }
    };
    // What went through Redis up to the link's mark, then ten of the link's frames (read in
    // time), then the rest of Redis (the `Unlink` and what followed), and only then what
    // the link still has: the worst order a busy receiver can take them in.
    redis(&mut gate, &mut seen, true).await;
    for _ in 0..10 {
        let delivered = read_link_frame().await.expect("a frame written before the stall");
        seen.extend(acts_in(&gate.frame(link_id, delivered, Instant::now()).expect("an open link's frame")));
    }
    redis(&mut gate, &mut seen, false).await;
    while let Ok(Some(delivered)) = tokio::time::timeout(Duration::from_secs(5), read_link_frame()).await {
        if gate.is_cut(link_id) {
            dropped += 1;
        } else {
            seen.extend(gate.frame(link_id, delivered, Instant::now()).iter().flat_map(acts_in));
        }
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "delivered out of order: {seen:?}");
    assert_eq!(seen.last(), Some(&last), "what followed the switch arrived");
    assert!(dropped > 0, "the link still held frames written before the stall: {seen:?}");
    assert_eq!(seen.len() as u64 + dropped, last, "every other frame was delivered once: {seen:?}");
}

/// A destination whose advertised address takes the connection and never answers (a
/// wrong address, a hung process) delays nothing: its frames go through Redis while the
/// dial waits out its timeout beside the outbox.
#[tokio::test]
async fn a_peer_address_that_never_answers_delays_no_frame() {
    let (store, prefix, mut rx) = bus_of_node_b().await;
    // The kernel completes the connection into the backlog; nobody ever accepts it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let (outboxes, metrics) =
        linked(Outboxes::new(Publisher::new(store.thread_conns(), &prefix), Duration::ZERO), &addr);
    for cs in 1..=20 {
        outboxes.send("node-b", act(cs)).await.expect("sent through Redis");
    }
    let mut seen = Vec::new();
    while seen.len() < 20 {
        let delivered = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("frames").unwrap();
        seen.extend(acts_in(&delivered));
    }
    assert_eq!(seen, (1..=20).collect::<Vec<_>>());
    assert_eq!(metrics.bus_frames_sent.with_label_values(&["redis"]).get(), 20);
    assert_eq!(metrics.bus_frames_sent.with_label_values(&["link"]).get(), 0);
    // The dial is still waiting for its answer: the 20 frames did not wait for it (a dial
    // in the outbox's way would have held the first frame until the handshake timed out,
    // and closed this connection).
    silent.set_nonblocking(false).unwrap();
    let (mut pending, _) = silent.accept().unwrap();
    pending.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    // The whole hello: magic, two ids with their lengths, the link id, the nonce.
    let mut hello = [0u8; 4 + 7 + 7 + 8 + 16];
    std::io::Read::read_exact(&mut pending, &mut hello).unwrap();
    assert_eq!(&hello[..4], b"RDL3");
    let mut rest = [0u8; 16];
    let more = std::io::Read::read(&mut pending, &mut rest);
    let still_open =
        more.as_ref().is_err_and(|e| matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
    assert!(still_open, "the dial gave up before the frames were through: {more:?}");
}

/// A burst for one node leaves its outbox in a few frames (not one publish per message),
/// every envelope once and in the order it was sent.
#[tokio::test]
async fn an_outbox_sends_a_burst_in_few_frames_in_order() {
    let (outboxes, mut rx) = outboxes_to_node_b().await;
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
            if let Some(cs) = envelope_cs(&envelope) {
                if cs > 0 {
                    seen.push(cs);
                }
            }
        }
    }
    assert_eq!(seen, (1..=1001).collect::<Vec<_>>(), "every envelope once, in order");
    assert!(frames <= 20, "1001 envelopes in {frames} frames: the outbox batches");
}

/// A room's frames for a subscriber on another node go straight into that node's
/// outbox: they arrive for the session in the order sent, equal texts once per frame,
/// and a closing frame keeps its flag.
#[tokio::test]
async fn a_remote_subscribers_frames_reach_its_node_in_order_with_their_close_flag() {
    let (outboxes, mut rx) = outboxes_to_node_b().await;
    let out =
        Out::Remote(std::sync::Arc::new(RemoteOut { session: 7, node: "node-b".into(), outboxes: outboxes.clone() }));
    let other =
        Out::Remote(std::sync::Arc::new(RemoteOut { session: 8, node: "node-b".into(), outboxes: outboxes.clone() }));
    let update = ByteString::from_static(r#"{"t":"update"}"#);
    out.try_send(ToClient::frame(update.clone())).unwrap();
    other.try_send(ToClient::frame(update.clone())).unwrap();
    out.try_send(ToClient::frame(ByteString::from_static(r#"{"t":"ack"}"#))).unwrap();
    out.do_send(ToClient::closing(ByteString::from_static(r#"{"t":"error"}"#)));
    let mut got = Vec::new();
    while got.len() < 4 {
        let delivered = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("frames arrive").unwrap();
        for envelope in delivered.envelopes {
            if let Envelope::Sessions { texts, items } = envelope {
                for item in items {
                    got.push((item.session, texts[item.text as usize].to_string(), item.close));
                }
            }
        }
    }
    assert_eq!(
        got,
        vec![
            (7, r#"{"t":"update"}"#.to_owned(), false),
            (8, r#"{"t":"update"}"#.to_owned(), false),
            (7, r#"{"t":"ack"}"#.to_owned(), false),
            (7, r#"{"t":"error"}"#.to_owned(), true),
        ]
    );
}

/// The next frame through Redis (10 s at most).
async fn next_frame(rx: &mut bus::Subscription) -> bus::Delivered {
    tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a frame").expect("the bus is up")
}

/// Outboxes to `node-b` whose queue through Redis is busy at ~20 messages a second: a
/// burst of twenty (actions 100–119, whose frames are read and returned) makes its rate,
/// its first frame never waiting (nothing is known of its rate yet), and a second later
/// a frame waits 250 ms for five more (the window of 10 s brings more than two, and the
/// queue was free for less than it: busy). The window is long, so a slow machine's second
/// still finds the queue busy: the wait itself is set by the rate, not by it.
async fn a_busy_outbox_through_redis(
    store: &RedisStore,
    prefix: &str,
    rx: &mut bus::Subscription,
) -> (Outboxes, Vec<u64>) {
    let outboxes = Outboxes::new(Publisher::new(store.thread_conns(), prefix), Duration::from_secs(10));
    for cs in 100..120 {
        outboxes.post("node-b", act(cs));
    }
    let mut burst = Vec::new();
    while burst.len() < 20 {
        burst.extend(acts_in(&next_frame(rx).await));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    (outboxes, burst)
}

/// With a batch window, a busy outbox (its recent rate fills the window) sends the
/// messages that come one after another within the wait its rate needs in one frame, in
/// order, and the frame is stamped with its first message's time: the lag a ring is
/// credited with includes the time it waited.
#[tokio::test]
async fn a_busy_outbox_with_a_batch_window_sends_what_comes_within_it_as_one_frame() {
    let (store, prefix, mut rx) = bus_of_node_b().await;
    let (outboxes, burst) = a_busy_outbox_through_redis(&store, &prefix, &mut rx).await;
    assert_eq!(burst, (100..120).collect::<Vec<_>>());
    for cs in 1..=5 {
        outboxes.post("node-b", act(cs));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let delivered = next_frame(&mut rx).await;
    let sent = acts_in(&delivered);
    assert_eq!(sent, vec![1, 2, 3, 4, 5], "the five messages in one frame, in order");
    let spread = Duration::from_millis(40);
    assert!(delivered.lag >= spread, "stamped when its first message was taken: lag {:?}", delivered.lag);
}

/// A busy outbox through Redis cuts its frame as soon as the five messages it waits for
/// have come, not when its timer fires, and counts an update two sessions see once: after
/// an action come five updates, each for two sessions, then two more actions, all 10 ms
/// apart. The frame goes when the fifth update has come (its timer, ~250 ms at this rate,
/// would have taken all eight); the two actions after it go in a later frame.
#[tokio::test]
async fn a_busy_outboxs_frame_through_redis_is_cut_when_the_five_it_waits_for_have_come() {
    let (store, prefix, mut rx) = bus_of_node_b().await;
    let (outboxes, _) = a_busy_outbox_through_redis(&store, &prefix, &mut rx).await;
    let spaced = Duration::from_millis(10);
    outboxes.post("node-b", act(1));
    for n in 2..=6 {
        tokio::time::sleep(spaced).await;
        let update = ByteString::from(format!(r#"{{"t":"update","n":{n}}}"#));
        outboxes.session("node-b", 7, ToClient::frame(update.clone()));
        outboxes.session("node-b", 8, ToClient::frame(update));
    }
    for cs in 7..=8 {
        tokio::time::sleep(spaced).await;
        outboxes.post("node-b", act(cs));
    }
    let first = next_frame(&mut rx).await;
    let mut sessions = Vec::new();
    for envelope in &first.envelopes {
        if let Envelope::Sessions { texts, items } = envelope {
            assert_eq!(texts.len(), 5, "each update's text once");
            sessions.extend(items.iter().map(|i| i.session));
        }
    }
    assert_eq!(acts_in(&first), vec![1], "cut once the fifth update came, before the actions after it");
    assert_eq!(sessions, [7, 8].repeat(5), "the five updates, each for both sessions, in order");
    let mut rest = Vec::new();
    while rest.len() < 2 {
        rest.extend(acts_in(&next_frame(&mut rx).await));
    }
    assert_eq!(rest, vec![7, 8]);
}

/// The actions of the next frame a link brings.
async fn next_link_frame(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Inbound>) -> Vec<u64> {
    loop {
        let inbound = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a link frame");
        if let Some(Inbound::Frame { delivered, .. }) = inbound {
            return acts_in(&delivered);
        }
    }
}

/// The same busy outbox with its destination on a peer link waits for no window: a link
/// write saves no Redis round trip, so the five messages that one frame held through
/// Redis above each leave as they come, in order.
#[tokio::test]
async fn a_busy_outbox_on_a_peer_link_waits_for_no_window() {
    let (store, prefix, _redis_rx) = bus_of_node_b().await;
    let (addr, mut link_rx) = links_of_node_b().await;
    let window = Duration::from_secs(10);
    let (outboxes, _metrics) = linked(Outboxes::new(Publisher::new(store.thread_conns(), &prefix), window), &addr);
    // The first frames go through Redis while the link is dialled: probe until one
    // arrives on the link.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        outboxes.send("node-b", act(0)).await.expect("sent");
        if let Ok(Some(Inbound::Frame { .. })) = tokio::time::timeout(Duration::from_millis(50), link_rx.recv()).await {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the link never came up");
    }
    // The same burst and pause as through Redis: the outbox's rate is ~20 a second, its
    // queue busy, so a frame through Redis would wait 250 ms for five more.
    for cs in 100..120 {
        outboxes.post("node-b", act(cs));
    }
    let mut burst = Vec::new();
    while burst.len() < 20 {
        burst.extend(next_link_frame(&mut link_rx).await);
    }
    assert_eq!(burst, (100..120).collect::<Vec<_>>());
    tokio::time::sleep(Duration::from_secs(1)).await;
    for cs in 1..=5 {
        outboxes.post("node-b", act(cs));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first = next_link_frame(&mut link_rx).await;
    assert_eq!(first, vec![1], "the first message left alone, without waiting for the others");
    let mut rest = Vec::new();
    while rest.len() < 4 {
        rest.extend(next_link_frame(&mut link_rx).await);
    }
    assert_eq!(rest, vec![2, 3, 4, 5], "the others after it, in order");
}

/// An outbox that has seen no traffic sends its first message at once, whatever its
/// window: a quiet queue's window would only add latency (nothing else comes in it).
#[tokio::test]
async fn a_quiet_outbox_sends_at_once_whatever_its_window() {
    let (store, prefix, mut rx) = bus_of_node_b().await;
    let outboxes = Outboxes::new(Publisher::new(store.thread_conns(), &prefix), Duration::from_secs(30));
    outboxes.post("node-b", act(7));
    let delivered = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("delivered long before a 30 s window would have ended")
        .unwrap();
    assert_eq!(acts_in(&delivered), vec![7]);
}

/// Without a window, what rooms woken in the same round of their thread send goes in
/// one frame: here the first message wakes four tasks after it is posted, and the outbox
/// lets them run before it cuts the frame (it would otherwise send the first alone).
#[tokio::test]
async fn messages_of_tasks_woken_in_the_same_round_leave_in_one_frame_without_a_window() {
    let (outboxes, mut rx) = outboxes_to_node_b().await;
    while tokio::time::timeout(Duration::from_millis(100), rx.recv()).await.is_ok() {}
    let mut gos = Vec::new();
    for cs in 2..=5 {
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        gos.push(go);
        let outboxes = outboxes.clone();
        tokio::spawn(async move {
            wait.await.unwrap();
            outboxes.post("node-b", act(cs));
        });
    }
    // The four are parked on their signals before the first message goes in.
    tokio::task::yield_now().await;
    outboxes.post("node-b", act(1));
    for go in gos {
        go.send(()).unwrap();
    }
    let delivered = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a frame").unwrap();
    let sent = acts_in(&delivered);
    assert_eq!(sent, vec![1, 2, 3, 4, 5], "the five messages of one round in one frame, in order");
}

/// A frame nobody hears acknowledges none of what it carried: every waiter gets the
/// error, and the node's next message tries again (and fails again, no hang).
#[tokio::test]
async fn a_frame_nobody_hears_fails_every_message_in_it() {
    let (store, _) = store().await;
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    let outboxes = Outboxes::new(Publisher::new(store.thread_conns(), &prefix), Duration::ZERO);
    let sends = (1..=3).map(|cs| outboxes.send("node-gone", act(cs)));
    for result in futures_util::future::join_all(sends).await {
        assert!(matches!(result, Err(StoreError::Unavailable(_))), "{result:?}");
    }
    let again = tokio::time::timeout(Duration::from_secs(5), outboxes.send("node-gone", act(4))).await;
    assert!(matches!(again, Ok(Err(StoreError::Unavailable(_)))), "{again:?}");
}

/// Fenced appends of many rooms issued together share round trips (group commit), and
/// each room's entries are stored in the order they were handed over.
#[tokio::test]
async fn appends_of_many_rooms_share_a_round_trip_and_keep_each_rooms_order() {
    let (store, keys) = store().await;
    let leases = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let mut rooms = Vec::new();
    for i in 0..20 {
        let room = format!("r_batch{i}");
        let token = leases.claim(&room).await.unwrap().expect("free lease");
        rooms.push((game_pk(&room, "01"), token));
    }
    let (batches, entries) = store.append_batches();
    // Five entries per room at once (more than a room ever has in flight), all rooms at once.
    let appends = rooms
        .iter()
        .flat_map(|(pk, token)| (1..=5).map(|seq| store.append_fenced(pk.clone(), entry(seq), token.clone())));
    for result in futures_util::future::join_all(appends).await {
        result.expect("stored");
    }
    let (batches_after, entries_after) = store.append_batches();
    assert_eq!(entries_after - entries, 100);
    assert!(batches_after - batches <= 2, "100 appends in {} batches", batches_after - batches);
    for (pk, _) in &rooms {
        for seq in 1..=5 {
            let stored = store.entry(pk, seq).await.unwrap().expect("every entry stored");
            assert_eq!(stored.seq, seq);
        }
        assert_eq!(store.entry(pk, 6).await.unwrap(), None);
    }
}

/// An append joins its thread's queue when it is asked for, not when its future is first
/// polled: a room's entries go in the order it asked, however their futures are awaited
/// (awaited last to first here, each later entry would otherwise meet a log one short).
#[tokio::test]
async fn appends_are_queued_in_the_order_they_are_asked_for_not_the_order_they_are_awaited() {
    let (store, keys) = store().await;
    let leases = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let room = "r_asked";
    let token = leases.claim(room).await.unwrap().expect("free lease");
    let pk = game_pk(room, "01");
    let mut appends: Vec<_> = (1..=4).map(|seq| store.append_fenced(pk.clone(), entry(seq), token.clone())).collect();
    while let Some(append) = appends.pop() {
        append.await.expect("stored in the order asked");
    }
    for seq in 1..=4 {
        assert_eq!(store.entry(&pk, seq).await.unwrap().map(|e| e.seq), Some(seq));
    }
}

/// With a batch window, a busy queue (its recent rate fills the window) stores the
/// appends of many rooms handed over one after another in one batch (without one, each
/// would go as soon as the one before returned), and cuts that batch as soon as the five
/// it waits for after its first have come, not when its timer fires.
#[tokio::test]
async fn a_busy_queues_appends_share_a_batch_cut_when_the_five_it_waits_for_have_come() {
    let (store, keys) = store().await;
    // Long, so a slow machine's half second below still finds the queue busy: the wait
    // itself is set by the rate, not by this.
    let store = store.with_batch_window(Duration::from_secs(10));
    let leases = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let mut rooms = Vec::new();
    for i in 0..8 {
        let room = format!("r_window{i}");
        let token = leases.claim(&room).await.unwrap().expect("free lease");
        rooms.push((game_pk(&room, "01"), token));
    }
    // A burst first (all eight rooms' first entries at once, one batch: the queue's first
    // batch never waits) makes the queue's rate.
    let burst = rooms.iter().map(|(pk, token)| store.append_fenced(pk.clone(), entry(1), token.clone()));
    for result in futures_util::future::join_all(burst).await {
        result.expect("stored");
    }
    let (batches, entries) = store.append_batches();
    assert_eq!(entries, 8);
    // Half a second later the queue's rate is ~16 a second: the wait for five more is
    // ~310 ms (the window of 10 s brings more than two, and the queue was free for less
    // than it: busy).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut appends = Vec::new();
    for (pk, token) in rooms.iter().cloned() {
        let store = store.clone();
        appends.push(tokio::spawn(async move { store.append_fenced(pk, entry(2), token).await }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for append in appends {
        append.await.unwrap().expect("stored");
    }
    // The first six in one batch, cut when the sixth came (its timer, ~310 ms, would have
    // taken all eight); the last two in the next (which waits out its own timer: no
    // five more come).
    assert_eq!(
        store.append_batches(),
        (batches + 2, 16),
        "eight appends spread over 80 ms: six in one batch, cut as they came, then two"
    );
}

/// An append queue that has seen no traffic sends its first entry at once, whatever its
/// window.
#[tokio::test]
async fn a_quiet_append_queue_sends_at_once_whatever_its_window() {
    let (store, keys) = store().await;
    let store = store.with_batch_window(Duration::from_secs(30));
    let leases = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let token = leases.claim("r_quiet").await.unwrap().expect("free lease");
    let append = store.append_fenced(game_pk("r_quiet", "01"), entry(1), token);
    tokio::time::timeout(Duration::from_secs(10), append)
        .await
        .expect("stored long before a 30 s window would have ended")
        .expect("stored");
    assert_eq!(store.append_batches(), (1, 1));
}

/// Without a window, the appends of rooms woken in the same round of their thread share
/// one batch: here the first room hands its entry over and then wakes seven more, and
/// the queue lets them run before it cuts the batch (it would otherwise send the first
/// alone and the seven a round trip later).
#[tokio::test]
async fn appends_of_rooms_woken_in_the_same_round_share_one_batch_without_a_window() {
    let (store, keys) = store().await;
    let leases = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let mut rooms = Vec::new();
    for i in 0..9 {
        let room = format!("r_round{i}");
        let token = leases.claim(&room).await.unwrap().expect("free lease");
        rooms.push((game_pk(&room, "01"), token));
    }
    // One append first: the thread's queue, its task and its connection are up and idle.
    let (pk, token) = rooms.pop().unwrap();
    store.append_fenced(pk, entry(1), token).await.expect("stored");
    let (batches, entries) = store.append_batches();
    let mut gos = Vec::new();
    let mut woken = Vec::new();
    for (pk, token) in rooms[1..].iter().cloned() {
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        gos.push(go);
        let store = store.clone();
        woken.push(tokio::spawn(async move {
            wait.await.unwrap();
            store.append_fenced(pk, entry(1), token).await
        }));
    }
    tokio::task::yield_now().await;
    let (pk, token) = rooms[0].clone();
    let first = store.append_fenced(pk, entry(1), token);
    let mut first = std::pin::pin!(first);
    assert!(futures_util::poll!(first.as_mut()).is_pending(), "the first entry is handed over and waits");
    for go in gos {
        go.send(()).unwrap();
    }
    first.await.expect("stored");
    for append in woken {
        append.await.unwrap().expect("stored");
    }
    let (batches_after, entries_after) = store.append_batches();
    assert_eq!((batches_after - batches, entries_after - entries), (1, 8), "eight appends of one round, one batch");
}

/// Each appending thread has its own queue and connection (made on that thread): rooms on
/// three threads all get their entries stored, and on each thread a second runtime,
/// started after the first one stopped (taking its queue's task and the driver of the
/// thread's connection with it), appends again: on a new queue and a new connection.
#[test]
fn appends_from_threads_of_their_own_are_stored_and_a_stopped_runtimes_queue_is_replaced() {
    let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let main = runtime();
    let (store, keys) = main.block_on(store());
    let leases = Leases::new(store.connection(), keys, "node-a", 60_000);
    let rooms: Vec<(String, String)> = main.block_on(async {
        let mut rooms = Vec::new();
        for i in 0..3 {
            let room = format!("r_thread{i}");
            rooms.push((game_pk(&room, "01"), leases.claim(&room).await.unwrap().expect("free lease")));
        }
        rooms
    });
    let threads: Vec<_> = rooms
        .iter()
        .cloned()
        .map(|(pk, token)| {
            let store = store.clone();
            std::thread::spawn(move || {
                for seqs in [1..=3u64, 4..=6] {
                    // A runtime per round: the first one's queue dies with it.
                    runtime().block_on(async {
                        for seq in seqs {
                            store.append_fenced(pk.clone(), entry(seq), token.clone()).await.expect("stored");
                        }
                    });
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("the appending thread");
    }
    main.block_on(async {
        for (pk, _) in &rooms {
            for seq in 1..=6 {
                assert_eq!(store.entry(pk, seq).await.unwrap().map(|e| e.seq), Some(seq), "{pk} seq {seq}");
            }
            assert_eq!(store.entry(pk, 7).await.unwrap(), None);
        }
    });
}

/// In one batch, an entry whose room's lease is someone else's is refused as fenced, one
/// out of sequence as a conflict, and the entries of the other rooms are stored.
#[tokio::test]
async fn a_fenced_append_in_a_batch_refuses_only_its_own_room() {
    let (store, keys) = store().await;
    let a = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let b = Leases::new(store.connection(), keys.clone(), "node-b", 60_000);
    let mut tokens = Vec::new();
    for room in ["r_fa", "r_fb", "r_fc", "r_fd"] {
        tokens.push(a.claim(room).await.unwrap().expect("free lease"));
    }
    // r_fb's lease moved to node-b: node-a's token for it is stale.
    b.take_over("r_fb", &tokens[1]).await.unwrap().expect("taken over");
    let pks: Vec<String> = ["r_fa", "r_fb", "r_fc", "r_fd"].iter().map(|r| game_pk(r, "01")).collect();
    let (batches, _) = store.append_batches();
    let results = futures_util::future::join_all([
        store.append_fenced(pks[0].clone(), entry(1), tokens[0].clone()),
        store.append_fenced(pks[1].clone(), entry(1), tokens[1].clone()),
        store.append_fenced(pks[2].clone(), entry(1), tokens[2].clone()),
        store.append_fenced(pks[3].clone(), entry(5), tokens[3].clone()),
    ])
    .await;
    assert_eq!(store.append_batches().0 - batches, 1, "the four went in one batch");
    assert_eq!(results[0], Ok(()));
    assert_eq!(results[1], Err(StoreError::Fenced));
    assert_eq!(results[2], Ok(()));
    assert_eq!(results[3], Err(StoreError::Conflict { game_pk: pks[3].clone(), expected: 1, got: 5 }));
    assert!(store.entry(&pks[0], 1).await.unwrap().is_some());
    assert_eq!(store.entry(&pks[1], 1).await.unwrap(), None, "the fenced entry changed nothing");
    assert!(store.entry(&pks[2], 1).await.unwrap().is_some());
    assert_eq!(store.entry(&pks[3], 5).await.unwrap(), None, "the conflicting entry changed nothing");
}

/// An entry whose log cannot take it (its key holds a string, so `XADD` fails) is refused
/// alone, as certainly not stored; the other entries of its batch are stored, and each
/// game's last seq agrees with its log afterwards (the next seq goes in).
#[tokio::test]
async fn an_entry_whose_log_cannot_take_it_fails_alone() {
    let (store, keys) = store().await;
    let pks: Vec<String> = ["r_ua", "r_ub", "r_uc"].iter().map(|r| game_pk(r, "01")).collect();
    let mut conn = store.connection();
    let _: () =
        redis::cmd("SET").arg(keys.log("r_ub", &pks[1])).arg("not a stream").query_async(&mut conn).await.unwrap();
    let (batches, _) = store.append_batches();
    let results =
        futures_util::future::join_all(pks.iter().map(|pk| store.append_fenced(pk.clone(), entry(1), String::new())))
            .await;
    assert_eq!(store.append_batches().0 - batches, 1, "one batch: {results:?}");
    assert_eq!(results[0], Ok(()));
    assert!(matches!(&results[1], Err(StoreError::Unavailable(why)) if why.contains("WRONGTYPE")), "{results:?}");
    assert_eq!(results[2], Ok(()));
    assert!(store.entry(&pks[0], 1).await.unwrap().is_some());
    assert!(store.entry(&pks[2], 1).await.unwrap().is_some());
    for pk in [&pks[0], &pks[2]] {
        assert_eq!(store.append_fenced(pk.clone(), entry(2), String::new()).await, Ok(()), "{pk}: seq 2 is next");
    }
    // r_ub's counter did not move: once its key is a log again, seq 1 goes in.
    let _: () = redis::cmd("DEL").arg(keys.log("r_ub", &pks[1])).query_async(&mut conn).await.unwrap();
    assert_eq!(store.append_fenced(pks[1].clone(), entry(1), String::new()).await, Ok(()));
}

/// The ids of a game's log stream, in order (entries and fence marks).
async fn log_ids(store: &RedisStore, keys: &Keys, pk: &str) -> Vec<String> {
    let room = room_actor::redis::keys::room_of(pk).unwrap();
    let mut conn = store.connection();
    let range: redis::streams::StreamRangeReply =
        redis::cmd("XRANGE").arg(keys.log(room, pk)).arg("-").arg("+").query_async(&mut conn).await.unwrap();
    range.ids.into_iter().map(|id| id.id).collect()
}

fn seqs(game: &room_actor::log::StoredGame) -> Vec<u64> {
    game.entries.iter().map(|e| e.seq).collect()
}

/// A room's first append under its lease is checked by the script and the ones after it are bare `XADD`s, their ids the lease's
/// epoch and the seq; the log reads back whole and entry by entry, and an entry sent
/// again (its first answer lost) is a conflict at its own seq, never a second copy.
#[tokio::test]
async fn on_the_fast_path_a_rooms_appends_after_its_first_are_bare_xadds_under_its_epoch() {
    let (store, keys) = store().await;
    let leases = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let token = leases.claim("r_fast").await.unwrap().expect("free lease");
    assert_eq!(token, "node-a/1");
    let pk = game_pk("r_fast", "01");
    store.begin(start_of(&pk)).await.unwrap();
    let fast = store.fast_appends();
    for seq in 1..=5 {
        store.append_fenced(pk.clone(), entry(seq), token.clone()).await.expect("stored");
    }
    assert_eq!(store.fast_appends() - fast, 4, "the first append is checked, the four after it are not");
    assert_eq!(log_ids(&store, &keys, &pk).await, ["1-1", "1-2", "1-3", "1-4", "1-5"]);
    assert_eq!(seqs(&store.load(&pk).await.unwrap().unwrap()), [1, 2, 3, 4, 5]);
    for seq in 1..=5 {
        assert_eq!(store.entry(&pk, seq).await.unwrap(), Some(entry(seq)));
    }
    assert_eq!(store.entry(&pk, 6).await.unwrap(), None);
    assert_eq!(
        store.append_fenced(pk.clone(), entry(5), token.clone()).await,
        Err(StoreError::Conflict { game_pk: pk.clone(), expected: 6, got: 5 })
    );
    store.append_fenced(pk.clone(), entry(6), token).await.expect("the next seq goes in");
    assert_eq!(log_ids(&store, &keys, &pk).await.len(), 6);
}

/// A node that takes a room over fences its log before it reads it: the old owner, still
/// sure of its lease, sends its next entry on the fast path and Redis itself refuses it
/// (the id is below the fence); the check tells it the room is fenced. Readers skip the
/// fence, the new owner carries on from the log, and a fence with a stale token is
/// refused.
#[tokio::test]
async fn a_node_taking_a_room_over_fences_its_log_so_the_old_owners_fast_path_is_refused() {
    let (store, keys) = store().await;
    let a = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let b = Leases::new(store.connection(), keys.clone(), "node-b", 60_000);
    let token_a = a.claim("r_fence").await.unwrap().expect("free lease");
    let pk = game_pk("r_fence", "01");
    store.begin(start_of(&pk)).await.unwrap();
    for seq in 1..=3 {
        store.append_fenced(pk.clone(), entry(seq), token_a.clone()).await.expect("stored");
    }
    let token_b = b.take_over("r_fence", &token_a).await.unwrap().expect("taken over");
    assert_eq!(token_b, "node-b/2");
    store.fence(&pk, &token_b).await.expect("fenced by its new owner");
    assert_eq!(log_ids(&store, &keys, &pk).await, ["1-1", "1-2", "1-3", "2-3"], "a mark above the log");

    let fast = store.fast_appends();
    assert_eq!(store.append_fenced(pk.clone(), entry(4), token_a.clone()).await, Err(StoreError::Fenced));
    assert_eq!(store.fast_appends() - fast, 1, "it was sent on the fast path");
    assert_eq!(seqs(&store.load(&pk).await.unwrap().unwrap()), [1, 2, 3], "the mark is no entry");
    assert_eq!(store.entry(&pk, 3).await.unwrap(), Some(entry(3)), "the entry below its mark");

    for seq in 4..=5 {
        store.append_fenced(pk.clone(), entry(seq), token_b.clone()).await.expect("the new owner goes on");
    }
    assert_eq!(log_ids(&store, &keys, &pk).await, ["1-1", "1-2", "1-3", "2-3", "2-4", "2-5"]);
    assert_eq!(seqs(&store.load(&pk).await.unwrap().unwrap()), [1, 2, 3, 4, 5]);
    assert_eq!(store.fence(&pk, &token_a).await, Err(StoreError::Fenced));
}

/// Redis losing writes under the fast path is found, and nothing goes in above the hole.
/// The loss is made by hand as a restart from an append-only file that had not got the
/// last write would leave it: the room's entry 3 and its queue's last canary `INCR` are
/// gone (Redis keeps a prefix of what it ran). The room's next entry goes on the fast
/// path (its queue still thinks 3 is there); the canary shows the loss, the check takes
/// that entry out again and tells the room where its log really ends; the room writes
/// from there.
#[tokio::test]
async fn redis_losing_writes_under_the_fast_path_is_found_and_nothing_goes_in_above_the_hole() {
    let (store, keys) = store().await;
    let leases = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let token = leases.claim("r_lost").await.unwrap().expect("free lease");
    let pk = game_pk("r_lost", "01");
    store.begin(start_of(&pk)).await.unwrap();
    for seq in 1..=3 {
        store.append_fenced(pk.clone(), entry(seq), token.clone()).await.expect("stored");
    }
    let mut conn = store.connection();
    let log = keys.log("r_lost", &pk);
    let _: i64 = redis::cmd("XDEL").arg(&log).arg("1-3").query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("XSETID").arg(&log).arg("1-2").query_async(&mut conn).await.unwrap();
    let (_, canaries): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg(format!("{}:*", keys.appender_canary()))
        .arg("COUNT")
        .arg(100_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(canaries.len(), 1, "one queue, one canary: {canaries:?}");
    let _: i64 = redis::cmd("DECR").arg(&canaries[0]).query_async(&mut conn).await.unwrap();

    let fast = store.fast_appends();
    assert_eq!(
        store.append_fenced(pk.clone(), entry(4), token.clone()).await,
        Err(StoreError::Conflict { game_pk: pk.clone(), expected: 3, got: 4 })
    );
    assert_eq!(store.fast_appends() - fast, 1, "it was sent on the fast path");
    assert_eq!(log_ids(&store, &keys, &pk).await, ["1-1", "1-2"], "the entry above the hole was taken out");
    for seq in 3..=5 {
        store.append_fenced(pk.clone(), entry(seq), token.clone()).await.expect("the room writes from its log's end");
    }
    assert_eq!(log_ids(&store, &keys, &pk).await, ["1-1", "1-2", "1-3", "1-4", "1-5"]);
}

/// A batch that fails as a whole acknowledges none of its entries, even ones Redis then
/// stores: on a private Redis of the test's own, writes are paused for longer than an
/// answer may take, so the batch times out (every entry `Unknown`) and runs once the pause
/// ends. Reading the log back (as a room does) is what finds the entries, and sending one
/// again is a conflict at its own seq, never a second copy.
#[tokio::test]
async fn a_batch_that_times_out_acknowledges_none_of_its_entries() {
    let server = Server::start(&[]);
    let target = RedisTarget::Single(server.url());
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    let store = RedisStore::connect_to(&target, &prefix).await.unwrap();
    let pks: Vec<String> = ["r_ta", "r_tb", "r_tc"].iter().map(|r| game_pk(r, "01")).collect();
    // A first append connects the queue (and loads the script) before the pause.
    store.append_fenced(game_pk("r_warm", "01"), entry(1), String::new()).await.unwrap();
    let pause_ms = room_actor::redis::target::TIMEOUT.as_millis() as u64 + 1500;
    let paused = Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "client", "pause", &pause_ms.to_string(), "write"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&paused.stdout).contains("OK"), "{paused:?}");
    let results =
        futures_util::future::join_all(pks.iter().map(|pk| store.append_fenced(pk.clone(), entry(1), String::new())))
            .await;
    for result in &results {
        assert!(matches!(result, Err(StoreError::Unknown(_))), "{results:?}");
    }
    // The pause ends, the batch runs: every entry is there, though none was acknowledged.
    let deadline = Instant::now() + Duration::from_secs(20);
    for pk in &pks {
        while store.entry(pk, 1).await.ok().flatten().is_none() {
            assert!(Instant::now() < deadline, "{pk}: the paused batch never ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            store.append_fenced(pk.clone(), entry(1), String::new()).await,
            Err(StoreError::Conflict { game_pk: pk.clone(), expected: 2, got: 1 })
        );
    }
}

/// Many rooms' lease holders in one read, in order, unheld rooms as `None`, past the
/// thousand rooms one `MGET` reads.
#[tokio::test]
async fn holders_of_many_rooms_are_read_in_order() {
    let (store, keys) = store().await;
    let a = Leases::new(store.connection(), keys.clone(), "node-a", 60_000);
    let b = Leases::new(store.connection(), keys.clone(), "node-b", 60_000);
    assert_eq!(a.holders(&[]).await.unwrap(), Vec::<Option<String>>::new());
    let rooms: Vec<String> = (0..2500).map(|i| format!("r_h{i}")).collect();
    let token_a = a.claim(&rooms[3]).await.unwrap().expect("free");
    let token_b = b.claim(&rooms[1999]).await.unwrap().expect("free");
    let holders = a.holders(&rooms).await.unwrap();
    assert_eq!(holders.len(), 2500);
    for (i, holder) in holders.iter().enumerate() {
        let expected = match i {
            3 => Some(token_a.clone()),
            1999 => Some(token_b.clone()),
            _ => None,
        };
        assert_eq!(holder, &expected, "room {i}");
    }
}

/// A `redis-server` of this test's own, killed when dropped. Its working directory is a
/// fresh temporary one: a replica writes the master's snapshot there on a full sync,
/// which `--save ""` does not stop (it used to leave `dump.rdb` in `room-actor/`).
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().expect("a temporary directory for redis-server");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (./scripts/test installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, port, _dir: dir }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn info(&self, section: &str) -> String {
        let out = Command::new("redis-cli").args(["-p", &self.port.to_string(), "info", section]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Group-committed appends with replicated acknowledgements (`ROOMD__REDIS__ACK_REPLICAS`)
/// on a private master and replica of this test's own: a batch counts only once the
/// replica holds it; with the replica gone, every entry of a batch is `Unknown`.
#[tokio::test]
async fn a_batch_counts_once_the_replica_holds_it_and_none_of_it_counts_without_the_replica() {
    let master = Server::start(&[]);
    let master_port = master.port.to_string();
    let replica = Server::start(&["--replicaof", "127.0.0.1", &master_port]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !replica.info("replication").contains("master_link_status:up") {
        assert!(Instant::now() < deadline, "the replica never linked to its master");
        std::thread::sleep(Duration::from_millis(50));
    }
    let target = RedisTarget::Single(master.url());
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    let store = RedisStore::connect_to(&target, &prefix).await.unwrap().with_acks(&target, 1, 300).await.unwrap();
    let pks: Vec<String> = (0..3).map(|i| game_pk(&format!("r_rep{i}"), "01")).collect();

    let (batches, _) = store.append_batches();
    let results =
        futures_util::future::join_all(pks.iter().map(|pk| store.append_fenced(pk.clone(), entry(1), String::new())))
            .await;
    assert_eq!(results, vec![Ok(()), Ok(()), Ok(())]);
    assert_eq!(store.append_batches().0 - batches, 1, "the three went in one batch, one WAIT");

    // The replica gone, the entries reach the master only: none of them is acknowledged.
    drop(replica);
    let results =
        futures_util::future::join_all(pks.iter().map(|pk| store.append_fenced(pk.clone(), entry(2), String::new())))
            .await;
    for result in &results {
        match result {
            Err(StoreError::Unknown(why)) => assert!(why.contains("ROOMD__REDIS__ACK_REPLICAS"), "{why}"),
            other => panic!("an unreplicated batch was answered {other:?}"),
        }
    }
}

/// The cap on seats in waiting rooms reads the user's own index: rooms still waiting with
/// the user seated count (other than the one they ask for), and rooms they left, that
/// started, or that were never created are dropped from the index as it is read.
#[tokio::test]
async fn waiting_seats_are_counted_from_the_users_own_rooms() {
    use room_actor::cluster::quota::WaitingSeats;
    use room_actor::spawn::{initial_info, NewRoom};
    let (store, keys) = store().await;
    let seats = WaitingSeats::new(store.connection(), keys.clone(), Duration::from_secs(1800));
    let (user, other) = (PlayerId::from("u_seated"), PlayerId::from("u_other"));
    let waiting = |room: &str, host: &PlayerId| {
        let new = NewRoom {
            room_id: room.into(),
            game: "tally".into(),
            options: None,
            host: host.clone(),
            host_name: "host".into(),
            grace_sec: 60,
            seed: None,
            listed: None,
        };
        initial_info(&new, "n1", 0).unwrap()
    };
    // Two waiting rooms: the cap of 2 is reached for a third, not for either of the two.
    for room in ["r_s1", "r_s2"] {
        assert!(seats.take(&user, room, 2).await.unwrap());
        store.put_room(&waiting(room, &user)).await.unwrap();
    }
    assert!(!seats.take(&user, "r_s3", 2).await.unwrap(), "a third waiting seat is refused");
    assert!(seats.take(&user, "r_s1", 2).await.unwrap(), "the room asked for is not counted against itself");
    // Another user's rooms never count.
    store.put_room(&waiting("r_o1", &other)).await.unwrap();
    assert!(seats.take(&other, "r_o2", 1).await.unwrap());
    // r_s1 starts: its seat no longer waits, so a new one fits; a seat refused after it
    // was counted (r_s3's room was never created) does not linger.
    let mut started = waiting("r_s1", &user);
    started.status = room_actor::RoomStatus::Playing;
    store.put_room(&started).await.unwrap();
    assert!(seats.take(&user, "r_s3", 2).await.unwrap());
    let mut conn = store.connection();
    let mut index: Vec<String> =
        redis::cmd("SMEMBERS").arg(keys.user_seated("u_seated")).query_async(&mut conn).await.unwrap();
    index.sort();
    assert_eq!(index, ["r_s2", "r_s3"], "r_s1 started and was dropped; r_s3 was just added");
    // The user leaves r_s2 (the room is saved without their seat): r_s4 fits beside r_s3.
    let mut left = waiting("r_s2", &other);
    left.seats.retain(|s| s.user_id != user);
    store.put_room(&left).await.unwrap();
    assert!(seats.take(&user, "r_s4", 2).await.unwrap(), "r_s3 was never created, r_s2 was left");
    let ttl: i64 = redis::cmd("TTL").arg(keys.user_seated("u_seated")).query_async(&mut conn).await.unwrap();
    assert!((1800..=1860).contains(&ttl), "the index expires after a room could still wait: {ttl}");
}

/// The per-user socket cap across nodes: sockets count on every live node together; a node
/// not live (dead) is not counted, so its leftovers lock nobody out; a close never takes a
/// count below zero; and a node restarted with the same id zeroes what its previous run
/// counted before it counts again.
#[tokio::test]
async fn user_sockets_are_counted_on_the_live_nodes_together() {
    use room_actor::cluster::quota::{UserSockets, SOCKETS_TTL};
    let (store, keys) = store().await;
    let node = |id: &str| UserSockets::new(store.connection(), keys.clone(), id);
    let (a, b, dead) = (node("na"), node("nb"), node("nx"));
    let user = PlayerId::from("u_sockets");
    // "nx" counted 5 sockets, then died: the live nodes do not see it.
    for _ in 0..5 {
        assert!(dead.open(&user, 8).await.unwrap());
    }
    a.set_live(["na".to_owned(), "nb".to_owned()]);
    b.set_live(["na".to_owned(), "nb".to_owned()]);
    for i in 0..8 {
        let on = if i % 2 == 0 { &a } else { &b };
        assert!(on.open(&user, 8).await.unwrap(), "socket {i}");
    }
    assert!(!a.open(&user, 8).await.unwrap(), "a 9th on a");
    assert!(!b.open(&user, 8).await.unwrap(), "a 9th on b");
    // Were "nx" live, its sockets would count too.
    a.set_live(["nb".to_owned(), "nx".to_owned()]);
    b.close(&user).await.unwrap();
    assert!(!a.open(&user, 8).await.unwrap(), "7 + 5 of a live nx");
    a.set_live(["nb".to_owned()]);
    assert!(a.open(&user, 8).await.unwrap(), "one closed on b: one more fits");
    // b closes more than it counted: its field goes, never below zero.
    for _ in 0..6 {
        b.close(&user).await.unwrap();
    }
    let mut conn = store.connection();
    let counts: std::collections::HashMap<String, i64> =
        redis::AsyncCommands::hgetall(&mut conn, keys.user_sockets("u_sockets")).await.unwrap();
    assert_eq!(counts.get("na"), Some(&5));
    assert_eq!(counts.get("nb"), None, "{counts:?}");
    let ttl: i64 = redis::AsyncCommands::pttl(&mut conn, keys.user_sockets("u_sockets")).await.unwrap();
    assert!(ttl > 0 && ttl <= SOCKETS_TTL.as_millis() as i64, "{ttl}");
    // "na" restarts with the same id: its 5 sockets died with it.
    let restarted = node("na");
    assert_eq!(restarted.forget_previous().await.unwrap(), 1);
    let counts: std::collections::HashMap<String, i64> =
        redis::AsyncCommands::hgetall(&mut conn, keys.user_sockets("u_sockets")).await.unwrap();
    assert_eq!(counts.get("na"), None, "{counts:?}");
    assert_eq!(counts.get("nx"), Some(&5), "another node's leftovers are its own to zero");
    restarted.set_live(["nb".to_owned()]);
    for i in 0..8 {
        assert!(restarted.open(&user, 8).await.unwrap(), "socket {i} after the restart");
    }
    assert!(!restarted.open(&user, 8).await.unwrap());
}
