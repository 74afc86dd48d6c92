//! Memory per room, measured as the process's RSS growth: N idle rooms (created, one host
//! seated, nobody connected), then N Halli Galli games started with 4 seated players.
//!
//!     cargo run --release -p room-actor --example footprint -- 10000
//!
//! Prints bytes per idle room and per started 4-player room. The store is the in-memory
//! one, so a started room's figure includes its log start entry held by the store.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A measuring tool: fail loudly.

use engine::PlayerId;
use room_actor::messages::{Start, TakeSeat};
use room_actor::metrics::RoomMetrics;
use room_actor::room::Clock;
use room_actor::spawn::{create_room, NewRoom};
use room_actor::{Directory, MemoryStore, RoomDeps, RoomHandle};
use std::sync::Arc;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmRSS line");
    kib * 1024
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    actix::System::new().block_on(async move {
        let deps = RoomDeps {
            store: Arc::new(MemoryStore::new()),
            directory: Arc::new(Directory::new()),
            metrics: RoomMetrics::unregistered().unwrap(),
            node_id: "footprint".into(),
            public_url: None,
            snapshot_every: 1000,
            clock: Clock::System,
            ended_linger: room_actor::room::ENDED_LINGER,
            waiting_ttl: room_actor::room::WAITING_TTL,
            stall_give_up: room_actor::room::STALL_GIVE_UP,
        };
        let mut rooms: Vec<RoomHandle> = Vec::with_capacity(2 * n);
        let make = |i: usize, game: &str| NewRoom {
            room_id: format!("r{i:08}"),
            game: game.into(),
            options: None,
            host: PlayerId::new(format!("u{i:08}a")),
            host_name: "host".into(),
            grace_sec: 60,
            seed: None,
            listed: None,
        };
        // Warm up allocator arenas and the runtime before the first reading.
        for i in 0..100 {
            rooms.push(create_room(make(i, "halli-galli"), deps.clone()).unwrap());
        }
        tokio::task::yield_now().await;
        let before = rss_bytes();
        for i in 100..100 + n {
            rooms.push(create_room(make(i, "halli-galli"), deps.clone()).unwrap());
        }
        // Let every actor start (its mailbox is polled once).
        for room in &rooms[100..] {
            room.ask(room_actor::messages::GetInfo).await.unwrap();
        }
        let idle = rss_bytes();
        println!("idle rooms: {n}, RSS +{:.1} MiB, {:.0} bytes per room", mib(idle - before), per(idle - before, n));

        for (k, room) in rooms[100..].iter().enumerate() {
            for seat in ["b", "c", "d"] {
                let user = PlayerId::new(format!("u{:08}{seat}", k + 100));
                room.ask(TakeSeat { user, name: seat.into(), bot: false }).await.unwrap();
            }
            room.ask(Start { user: PlayerId::new(format!("u{:08}a", k + 100)) }).await.unwrap();
        }
        let started = rss_bytes();
        println!(
            "started 4-player halli-galli games: {n}, RSS +{:.1} MiB more, {:.0} bytes per room in all",
            mib(started - idle),
            per(started - before, n)
        );
    });
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn per(bytes: u64, n: usize) -> f64 {
    bytes as f64 / n as f64
}
