//! Store write latency and throughput, memory vs file store, on this machine:
//!
//! ```text
//! cargo run --release -p room-actor --example store_latency -- [SEQUENTIAL] [ROOMS] [PER_ROOM]
//! taskset -c 0 target/release/examples/store_latency 500 200 20     # one core
//! ```
//!
//! 1. one room appending one entry at a time (each waits for its ack, as a room does):
//!    p50 / p99 / max latency per append;
//! 2. `ROOMS` rooms appending at once, each waiting for its previous append (as rooms do,
//!    one append in flight per room): appends per second and p99. The file store commits
//!    whatever is queued as one transaction with one fsync (group commit).

use room_actor::log::{LogEntry, StartEntry};
use room_actor::redis::keys::game_pk;
use room_actor::{FileStore, MemoryStore, RoomStore, StoreError};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn start(pk: &str) -> StartEntry {
    StartEntry {
        game_pk: pk.into(),
        room_id: pk.split('.').next().unwrap_or_default().into(),
        game: "tally".into(),
        seed: engine::Seed(1),
        players: vec!["u_a".into(), "u_b".into()],
        bots: vec![],
        names: vec!["a".into(), "b".into()],
        options_json: r#"{"target":null}"#.into(),
        state_version: 1,
        started_at: 0,
        rtt: Default::default(),
    }
}

fn entry(seq: u64) -> LogEntry {
    LogEntry {
        seq,
        at: 1_700_000_000_000 + seq as i64,
        actor: engine::Actor::Player("u_a".into()),
        cs: Some(seq),
        rtt_ms: Some(30),
        auto: false,
        input_json: r#"{"client":{"type":"bump"}}"#.into(),
        rtt: None,
    }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len().saturating_sub(1)) as f64 * p).round() as usize;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

async fn measure(
    name: &str,
    store: Arc<dyn RoomStore>,
    sequential: u64,
    rooms: usize,
    per_room: u64,
) -> Result<(), StoreError> {
    let pk = game_pk("r_seq", "01");
    store.begin(start(&pk)).await?;
    let mut lat = Vec::with_capacity(sequential as usize);
    for seq in 1..=sequential {
        let t = Instant::now();
        store.append(&pk, entry(seq)).await?;
        lat.push(t.elapsed());
    }
    lat.sort();
    println!(
        "{name:<7} sequential  {sequential} appends   p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
    let pks: Vec<String> = (0..rooms).map(|i| game_pk(&format!("r_c{i}"), "01")).collect();
    for pk in &pks {
        store.begin(start(pk)).await?;
    }
    let t = Instant::now();
    let tasks: Vec<_> = pks
        .into_iter()
        .map(|pk| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_room as usize);
                for seq in 1..=per_room {
                    let t = Instant::now();
                    store.append(&pk, entry(seq)).await?;
                    lat.push(t.elapsed());
                }
                Ok::<_, StoreError>(lat)
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.map_err(|e| StoreError::Unavailable(e.to_string()))??);
    }
    let secs = t.elapsed().as_secs_f64();
    all.sort();
    println!(
        "{name:<7} concurrent  {rooms} rooms x {per_room}   {:.0} appends/s  p50 {:.3} ms  p99 {:.3} ms",
        all.len() as f64 / secs,
        pct(&all, 0.5),
        pct(&all, 0.99)
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let sequential: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(500);
    let rooms: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    let per_room: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20);
    measure("memory", Arc::new(MemoryStore::new()), sequential, rooms, per_room).await?;
    let dir = tempfile::tempdir()?;
    println!("file store in {} (a temp dir on the machine's disk)", dir.path().display());
    measure("file", Arc::new(FileStore::open(dir.path(), 90)?), sequential, rooms, per_room).await?;
    Ok(())
}
