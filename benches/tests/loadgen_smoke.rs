#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Loadgen against an in-process roomd (port 0, embedded store): real rooms, real
//! sockets, short runs. Behaviour only: actions are acked, nothing errors; no speed
//! assertions.

use benches::loadgen::{self, Config, GameKind, Report};
use gateway::config::Settings;
use std::net::SocketAddr;
use std::time::Duration;

/// Starts roomd inside an actix system on its own thread and returns its address.
fn start_server() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            let mut settings = Settings::load(None).unwrap();
            settings.http.bind = "127.0.0.1".into();
            settings.http.port = 0;
            settings.http.workers = 2;
            // A secret of its own (no data directory written), and every client is
            // 127.0.0.1: the per-address limits are raised for the run.
            settings.auth.secret = Some("loadgen-smoke-secret-0123456789abcdef".into());
            settings.http.addr_rate_per_min = 1_000_000;
            settings.http.addr_burst = 1_000_000;
            settings.http.addr_max_sockets = 1_000_000;
            settings.store.kind = gateway::config::StoreKind::Memory;
            let running = gateway::server::start(settings).unwrap();
            tx.send(running.addr).unwrap();
            running.server.await.unwrap();
        });
    });
    rx.recv_timeout(Duration::from_secs(30)).expect("server did not start")
}

fn config(addr: SocketAddr, game: GameKind, duration: Duration) -> Config {
    Config {
        urls: vec![format!("http://{addr}")],
        game,
        rooms: 2,
        duration,
        concurrency: 2,
        ramp_timeout: Duration::from_secs(30),
        interval: Duration::from_millis(100),
        reaction: Duration::from_millis(50),
        ..Config::default()
    }
}

fn assert_clean(r: &Report) {
    assert_eq!(r.errors, 0, "{}", r.text());
    assert_eq!((r.rooms_ready, r.connected_clients, r.connected_at_end), (2, 8, 8), "{}", r.text());
    assert_eq!(r.unanswered, 0, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tally_bumps_are_acked_and_fanned_out_to_every_player() {
    let addr = start_server();
    let r = loadgen::run(config(addr, GameKind::Tally, Duration::from_secs(2))).await.unwrap();
    assert_clean(&r);
    // 8 clients bumping every 100 ms for 2 s: about 160 bumps, none refused.
    assert!(r.acks >= 40, "{}", r.text());
    assert!(r.rejects.is_empty(), "{}", r.text());
    assert_eq!(r.acks, r.actions_sent, "{}", r.text());
    // Every ack was matched with the sender's own update, and each bump reached the room.
    assert_eq!(r.latency.samples, r.acks, "{}", r.text());
    assert!(r.updates >= r.acks * 3, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halli_galli_players_flip_and_ring_through_real_games() {
    let addr = start_server();
    // The game opens with a 3 s countdown; 5 s leaves about 2 s of play.
    let r = loadgen::run(config(addr, GameKind::HalliGalli, Duration::from_secs(5))).await.unwrap();
    assert_clean(&r);
    assert!(r.acks > 0, "{}", r.text());
    assert!(r.updates > 0, "{}", r.text());
    assert_eq!(r.latency.samples, r.acks, "{}", r.text());
    assert_eq!(r.acks + r.rejects.values().sum::<u64>(), r.actions_sent, "{}", r.text());
    // The load test's rooms are unlisted: joinable by id, never in the players' lobby
    // (issue 59), though a lobby that names the game still shows them.
    let http = reqwest::Client::new();
    let session = loadgen::net::session(&http, &format!("http://{addr}"), "lobby".into()).await.unwrap();
    let lobby = |path: &str| http.get(format!("http://{addr}{path}")).bearer_auth(&session.token).send();
    let players: serde_json::Value = lobby("/api/rooms").await.unwrap().json().await.unwrap();
    assert_eq!(players, serde_json::json!([]), "the players' lobby shows load-test rooms");
    let named: serde_json::Value = lobby("/api/rooms?game=halli-galli").await.unwrap().json().await.unwrap();
    assert_eq!(named.as_array().map(Vec::len), Some(2), "{named}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cockroach_poker_players_offer_and_answer_through_real_games() {
    let addr = start_server();
    let r = loadgen::run(config(addr, GameKind::CockroachPoker, Duration::from_secs(3))).await.unwrap();
    assert_clean(&r);
    // Every room's starter offers at once, and the holders answer: actions are acked.
    assert!(r.acks >= 2, "{}", r.text());
    assert!(r.updates > 0, "{}", r.text());
    assert_eq!(r.latency.samples, r.acks, "{}", r.text());
    assert_eq!(r.acks + r.rejects.values().sum::<u64>(), r.actions_sent, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_rooms_play_on_two_servers_that_share_nothing_and_spread_rooms_fail_with_the_setup_error() {
    // Two embedded nodes with the same test secret and nothing else in common: a seat
    // taken on the server that did not make the room finds no room there.
    let (a, b) = (start_server(), start_server());
    let two = |whole_rooms| Config {
        urls: vec![format!("http://{a}"), format!("http://{b}")],
        whole_rooms,
        ..config(a, GameKind::Tally, Duration::from_secs(2))
    };
    let r = loadgen::run(two(true)).await.unwrap();
    assert_clean(&r);
    assert!(r.acks >= 40, "{}", r.text());
    assert_eq!(r.latency.samples, r.acks, "{}", r.text());

    let e = loadgen::run(two(false)).await.expect_err("every room's seats are taken on a server without the room");
    let e = format!("{e:#}");
    assert!(e.contains("no room was set up (2 setup failures"), "{e}");
    assert!(e.contains("unknown_room"), "the first setup error is named: {e}");
}
