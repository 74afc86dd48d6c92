//! A real full filesystem under the file store (manual check, needs a small filesystem):
//!
//! ```text
//! mkdir -p /tmp/roomd-full && sudo mount -t tmpfs -o size=2m tmpfs /tmp/roomd-full
//! cargo run -p room-actor --example full_disk -- /tmp/roomd-full
//! sudo umount /tmp/roomd-full
//! ```
//!
//! Fills the filesystem with a filler file, appends until the store refuses
//! (`Unavailable`), checks that `probe` (what `/readyz` uses) fails, deletes the filler,
//! checks that appends succeed again, then reopens the store and checks that every
//! acknowledged entry (and no refused one) is there. Exits non-zero on any failure.

use room_actor::log::{LogEntry, StartEntry};
use room_actor::redis::keys::game_pk;
use room_actor::{FileStore, RoomStore, StoreError};
use std::io::Write;

fn entry(seq: u64) -> LogEntry {
    LogEntry {
        seq,
        at: seq as i64,
        actor: engine::Actor::Player("a".into()),
        cs: Some(seq),
        rtt_ms: None,
        auto: false,
        // ~1 KiB per entry, so the WAL grows quickly.
        input_json: format!(r#"{{"client":{{"type":"bump","pad":"{}"}}}}"#, "x".repeat(1000)),
        rtt: None,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let dir = std::env::args().nth(1).ok_or("usage: full_disk DIR (a small filesystem)")?;
    let dir = std::path::Path::new(&dir).join("data");
    let store = FileStore::open(&dir, 90).map_err(|e| e.to_string())?;
    let pk = game_pk("r_full", "01");
    let start = StartEntry {
        game_pk: pk.clone(),
        room_id: "r_full".into(),
        game: "tally".into(),
        seed: engine::Seed(1),
        players: vec!["a".into()],
        bots: vec![],
        names: vec!["a".into()],
        options_json: "{}".into(),
        state_version: 1,
        started_at: 0,
        rtt: Default::default(),
    };
    store.begin(start).await.map_err(|e| e.to_string())?;
    let mut acked = 0u64;
    for seq in 1..=50u64 {
        store.append(&pk, entry(seq)).await.map_err(|e| format!("before filling, seq {seq}: {e}"))?;
        acked = seq;
    }
    // Fill the filesystem, leaving a few pages.
    let filler_path = dir.parent().ok_or("no parent")?.join("filler");
    let mut filler = std::fs::File::create(&filler_path).map_err(|e| e.to_string())?;
    let chunk = vec![0u8; 4096];
    while filler.write_all(&chunk).is_ok() {}
    let _ = filler.sync_all();
    drop(filler);
    let mut refused = None;
    for seq in acked + 1..=10_000u64 {
        match store.append(&pk, entry(seq)).await {
            Ok(()) => acked = seq,
            Err(StoreError::Unavailable(e)) => {
                refused = Some(e);
                break;
            }
            Err(e) => return Err(format!("seq {seq}: unexpected {e}")),
        }
    }
    let refused = refused.ok_or("the filesystem never filled up")?;
    println!("full after {acked} acknowledged entries: {refused}");
    if store.probe().await {
        return Err("probe (readiness) succeeded on a full filesystem".into());
    }
    println!("probe fails while full (readyz would answer 503)");
    std::fs::remove_file(&filler_path).map_err(|e| e.to_string())?;
    if !store.probe().await {
        return Err("probe still fails after space came back".into());
    }
    store.append(&pk, entry(acked + 1)).await.map_err(|e| format!("append after space came back: {e}"))?;
    println!("space back: probe ok, entry {} appended", acked + 1);
    drop(store);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let store = FileStore::open(&dir, 90).map_err(|e| e.to_string())?;
    let stored = store.load(&pk).await.map_err(|e| e.to_string())?.ok_or("game gone")?;
    let seqs: Vec<u64> = stored.entries.iter().map(|e| e.seq).collect();
    if seqs != (1..=acked + 1).collect::<Vec<_>>() {
        return Err(format!("stored seqs 1..={} expected, got {} entries", acked + 1, seqs.len()));
    }
    println!("reopened: exactly the {} acknowledged entries are stored", acked + 1);
    Ok(())
}
