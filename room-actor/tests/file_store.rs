#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The file store beyond the shared contract: what is acknowledged is there after the
//! store is opened again; concurrent appends from many rooms are committed together and
//! all land; a corrupt, truncated or foreign file is a clear error naming the file (never
//! an empty start); one node per data directory; retention deletes old finished games
//! only; the memory store keeps a bounded number of finished games; the data directory
//! and its files are private to roomd's user.

use engine::{Actor, PlayerId, RngState, Seed};
use room_actor::log::{GameRecord, LogEntry, Snapshot, StartEntry};
use room_actor::redis::keys::game_pk;
use room_actor::store::file::{OpenError, DB_FILE};
use room_actor::{FileStore, MemoryStore, RoomStore};
use std::path::Path;
use std::time::Duration;

fn start(pk: &str) -> StartEntry {
    StartEntry {
        game_pk: pk.into(),
        room_id: pk.split('.').next().unwrap().into(),
        game: "tally".into(),
        seed: Seed(7),
        players: vec!["a".into(), "b".into()],
        bots: vec![],
        names: vec!["a".into(), "b".into()],
        options_json: r#"{"target":10}"#.into(),
        state_version: 1,
        started_at: 1_000,
        rtt: Default::default(),
    }
}

fn entry(seq: u64) -> LogEntry {
    LogEntry {
        seq,
        at: 1_000 + seq as i64,
        actor: Actor::Player("a".into()),
        cs: Some(seq),
        rtt_ms: None,
        auto: false,
        input_json: r#"{"client":{"type":"bump"}}"#.into(),
        rtt: None,
    }
}

fn record(pk: &str, ended_at: i64) -> GameRecord {
    GameRecord {
        game_pk: pk.into(),
        room_id: pk.split('.').next().unwrap().into(),
        game: "tally".into(),
        players: vec!["a".into(), "b".into()],
        names: vec![],
        started_at: 1_000,
        ended_at,
        state_version: 1,
        final_seq: 1,
        result_json: "{}".into(),
        final_state_json: "{}".into(),
    }
}

/// Opens the store again once the previous handle's thread let go of the file (a drop
/// closes it asynchronously); any other error fails at once.
async fn reopen(dir: &Path) -> FileStore {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match FileStore::open(dir, 90) {
            Ok(store) => return store,
            Err(OpenError::Locked { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("reopen: {e}"),
        }
    }
}

#[actix::test]
async fn acknowledged_writes_are_there_after_the_store_is_opened_again() {
    let dir = tempfile::tempdir().unwrap();
    let pk = game_pk("r_keep", "01");
    // Ended just now: well inside the retention that is applied when the store opens.
    let ended_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    {
        let store = FileStore::open(dir.path(), 90).unwrap();
        store.begin(start(&pk)).await.unwrap();
        for seq in 1..=5 {
            store.append(&pk, entry(seq)).await.unwrap();
        }
        let snap = Snapshot { seq: 4, at: 1_004, state_json: "{}".into(), rng: RngState { a: 1, b: 2, c: 3, d: 4 } };
        store.put_snapshot(&pk, snap).await.unwrap();
        store.finish(record(&pk, ended_at)).await.unwrap();
    }
    let store = reopen(dir.path()).await;
    let loaded = store.load(&pk).await.unwrap().expect("the game is still there");
    assert_eq!(loaded.entries, (1..=5).map(entry).collect::<Vec<_>>());
    assert_eq!(loaded.snapshot.map(|s| s.seq), Some(4));
    assert_eq!(store.record(&pk).await.unwrap(), Some(record(&pk, ended_at)));
    assert_eq!(store.games_of(&"b".into(), None, 5).await.unwrap().len(), 1);
    // The log continues where it stopped.
    assert!(store.append(&pk, entry(5)).await.is_err());
    store.append(&pk, entry(6)).await.unwrap();
}

#[actix::test]
async fn concurrent_appends_of_many_rooms_all_land_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), 90).unwrap();
    let pks: Vec<String> = (0..20).map(|i| game_pk(&format!("r_many{i}"), "01")).collect();
    for pk in &pks {
        store.begin(start(pk)).await.unwrap();
    }
    // Every room's appends are issued at once (not awaited one by one): the store
    // thread takes them in batches, in call order per room.
    let mut calls = Vec::new();
    for seq in 1..=25 {
        for pk in &pks {
            calls.push(store.append(pk, entry(seq)));
        }
    }
    for result in futures_util::future::join_all(calls).await {
        result.unwrap();
    }
    for pk in &pks {
        assert_eq!(store.load(pk).await.unwrap().unwrap().entries.len(), 25);
    }
}

#[actix::test]
async fn a_garbage_store_file_is_a_clear_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(DB_FILE), vec![0x42; 8192]).unwrap();
    let err = FileStore::open(dir.path(), 90).err().expect("garbage is refused");
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&dir.path().join(DB_FILE).display().to_string()), "{message}");
    assert!(message.contains("backup") && message.contains("aside"), "says what to do: {message}");
}

#[actix::test]
async fn a_truncated_store_file_is_a_clear_error_never_an_empty_start() {
    for keep in [0.0, 0.5] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = FileStore::open(dir.path(), 90).unwrap();
            let mut calls = Vec::new();
            for i in 0..40 {
                let pk = game_pk(&format!("r_t{i}"), "01");
                store.begin(start(&pk)).await.unwrap();
                for seq in 1..=20 {
                    calls.push(store.append(&pk, entry(seq)));
                }
            }
            for result in futures_util::future::join_all(calls).await {
                result.unwrap();
            }
        }
        // The store thread closes the database (checkpointing the WAL into the file)
        // once its last handle is gone; wait for that before cutting the file.
        drop(reopen(dir.path()).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let file = dir.path().join(DB_FILE);
        let len = std::fs::metadata(&file).unwrap().len();
        assert!(len > 8192, "the games are in the file ({len} bytes)");
        std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len((len as f64 * keep) as u64).unwrap();
        let err = FileStore::open(dir.path(), 90).err().unwrap_or_else(|| panic!("truncated to {keep} opened"));
        assert!(matches!(err, OpenError::Corrupt { .. }), "truncated to {keep}: {err:?}");
        assert!(err.to_string().contains(&file.display().to_string()), "{err}");
    }
}

#[actix::test]
async fn one_node_per_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), 90).unwrap();
    store.begin(start(&game_pk("r_lock", "01"))).await.unwrap();
    let err = FileStore::open(dir.path(), 90).err().expect("a second opener is refused");
    assert!(matches!(err, OpenError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("another roomd"), "{err}");
}

#[actix::test]
async fn retention_deletes_old_finished_games_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), 90).unwrap();
    let old = game_pk("r_old", "01");
    let new = game_pk("r_new", "01");
    let open = game_pk("r_open", "01");
    for pk in [&old, &new, &open] {
        store.begin(start(pk)).await.unwrap();
        store.append(pk, entry(1)).await.unwrap();
    }
    store.finish(record(&old, 1_000)).await.unwrap();
    store.finish(record(&new, 5_000)).await.unwrap();
    assert_eq!(store.purge_finished_before(2_000).await.unwrap(), 1);
    assert_eq!(store.load(&old).await.unwrap(), None);
    assert_eq!(store.record(&old).await.unwrap(), None);
    let mine: Vec<String> =
        store.games_of(&PlayerId::from("a"), None, 10).await.unwrap().into_iter().map(|r| r.game_pk).collect();
    assert_eq!(mine, vec![new.clone()]);
    assert!(store.load(&new).await.unwrap().is_some());
    assert_eq!(store.load(&open).await.unwrap().unwrap().entries.len(), 1, "running games are never purged");
}

#[actix::test]
async fn the_memory_store_keeps_a_bounded_number_of_finished_games() {
    let store = MemoryStore::keeping(2);
    let pks: Vec<String> = (0..3).map(|i| game_pk(&format!("r_m{i}"), "01")).collect();
    for (i, pk) in pks.iter().enumerate() {
        store.begin(start(pk)).await.unwrap();
        store.append(pk, entry(1)).await.unwrap();
        store.finish(record(pk, 1_000 + i as i64)).await.unwrap();
    }
    assert_eq!(store.load(&pks[0]).await.unwrap(), None, "the oldest finished game is forgotten");
    assert_eq!(store.record(&pks[0]).await.unwrap(), None);
    assert!(store.record(&pks[2]).await.unwrap().is_some());
    assert_eq!(store.games_of(&"a".into(), None, 10).await.unwrap().len(), 2);
    // Ended rooms are bounded the same way.
    for i in 0..3 {
        let mut info = room_info(&format!("r_e{i}"));
        store.put_room(&info).await.unwrap();
        info.status = room_actor::RoomStatus::Ended;
        store.put_room(&info).await.unwrap();
    }
    assert_eq!(store.room("r_e0").await.unwrap(), None);
    assert!(store.room("r_e2").await.unwrap().is_some());
}

fn room_info(id: &str) -> room_actor::RoomInfo {
    room_actor::RoomInfo {
        room_id: id.into(),
        game: "tally".into(),
        options: serde_json::json!({"target": 10}).into(),
        host: "a".into(),
        seats: vec![],
        status: room_actor::RoomStatus::Waiting,
        game_pk: None,
        node: None,
        node_url: None,
        grace_sec: 60,
        min_players: 1,
        max_players: 8,
        created_at: 5,
        gone: Vec::new(),
        kicked: Vec::new(),
        removed: Vec::new(),
        listed: None,
    }
}

/// Issue 55: the data directory holds every game's seed (and the token secret), yet it was
/// 0755 and the database and its WAL 0644. New ones are made private to roomd's user, and
/// existing ones made readable by others beforehand are tightened when the store opens.
#[cfg(unix)]
#[actix::test]
async fn the_data_directory_and_its_files_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| format!("{:o}", std::fs::metadata(p).unwrap().permissions().mode() & 0o777);
    let set = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    let root = tempfile::tempdir().unwrap();
    let wal = |dir: &Path| dir.join(format!("{DB_FILE}-wal"));

    // New: the directory, the database and the WAL SQLite creates beside it.
    let fresh = root.path().join("fresh");
    let store = FileStore::open(&fresh, 90).unwrap();
    store.put_room(&room_info("r_new")).await.unwrap();
    assert_eq!(mode(&fresh), "700");
    assert_eq!(mode(&fresh.join(DB_FILE)), "600");
    assert!(wal(&fresh).exists(), "a store in WAL mode that took a write has its -wal file");
    assert_eq!(mode(&wal(&fresh)), "600");
    drop(store);

    // Existing: a store an older roomd left (its meta table is what marks it as one), a
    // -wal file beside it, all readable by everyone.
    let old = root.path().join("old");
    std::fs::create_dir(&old).unwrap();
    {
        let conn = rusqlite::Connection::open(old.join(DB_FILE)).unwrap();
        conn.execute_batch("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);").unwrap();
    }
    std::fs::write(wal(&old), b"").unwrap();
    set(&old, 0o755);
    set(&old.join(DB_FILE), 0o644);
    set(&wal(&old), 0o644);
    let store = FileStore::open(&old, 90).unwrap();
    store.put_room(&room_info("r_old")).await.unwrap();
    assert_eq!(mode(&old), "700");
    assert_eq!(mode(&old.join(DB_FILE)), "600");
    assert_eq!(mode(&wal(&old)), "600");
    assert!(store.room("r_old").await.unwrap().is_some());
}

/// The schema-1 data directory of `tests/fixtures/file_store_v1` (see its README), copied
/// into a fresh directory.
fn schema_1_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/file_store_v1").join(DB_FILE);
    std::fs::copy(fixture, dir.path().join(DB_FILE)).unwrap();
    dir
}

const V1_DONE: &str = "r_v1done.5f3d8f29663bf7d4";
const V1_RUNNING: &str = "r_v1run.dc511638d2b2d76c";

/// Issue 57: a data directory written by the schema-1 store opens with today's, which
/// upgrades it in place and keeps every game, record, replay and open room; a running
/// game's appends go on from its stored seq (read from its log: schema 2 keeps no
/// `last_seq`), before and after the store is opened again, and the game finishes.
#[actix::test]
async fn a_schema_1_data_directory_is_upgraded_in_place_and_keeps_every_game_record_and_replay() {
    let dir = schema_1_copy();
    let store = FileStore::open(dir.path(), 36_500).expect("a schema-1 directory opens");

    let mut open: Vec<(String, usize)> =
        store.open_rooms().await.unwrap().into_iter().map(|r| (r.room_id, r.seats.len())).collect();
    open.sort();
    assert_eq!(open, vec![("r_v1run".to_owned(), 2), ("r_v1wait".to_owned(), 2)]);
    let done = store.load(V1_DONE).await.unwrap().expect("the finished game");
    assert_eq!(done.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());
    assert!(done.snapshot.is_some(), "its snapshot is kept");
    let done_record = store.record(V1_DONE).await.unwrap().expect("its record");
    assert_eq!(done_record.final_seq, 10);
    let mine = store.games_of(&PlayerId::from("bob"), None, 10).await.unwrap();
    assert_eq!(mine.iter().map(|r| r.game_pk.as_str()).collect::<Vec<_>>(), vec![V1_DONE], "bob's games");
    let replay = room_actor::replay::build_any(&done, &done_record, &PlayerId::from("alice")).expect("its replay");
    assert_eq!(replay.scenes, 11, "the deal and ten bumps");

    let running = store.load(V1_RUNNING).await.unwrap().expect("the running game");
    assert_eq!(running.entries.len(), 3);
    let conflict = store.append(V1_RUNNING, entry(3)).await;
    assert!(matches!(conflict, Err(room_actor::StoreError::Conflict { expected: 4, .. })), "{conflict:?}");
    store.append(V1_RUNNING, entry(4)).await.expect("the next seq of the stored log");
    drop(store);

    let store = reopen(dir.path()).await;
    let conflict = store.append(V1_RUNNING, entry(4)).await;
    assert!(matches!(conflict, Err(room_actor::StoreError::Conflict { expected: 5, .. })), "{conflict:?}");
    store.append(V1_RUNNING, entry(5)).await.expect("appends go on after a restart");
    let seqs: Vec<u64> = store.load(V1_RUNNING).await.unwrap().unwrap().entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5], "the schema-1 entries, then the new ones");
    // Finished: its whole log is kept in one place, and reads the same.
    store.finish(record(V1_RUNNING, 1_796_000_000_000)).await.unwrap();
    let seqs: Vec<u64> = store.load(V1_RUNNING).await.unwrap().unwrap().entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5], "a finished game's log");
    drop(store);
    let _ = reopen(dir.path()).await;
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    let schema: String = conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).unwrap();
    assert_eq!(schema, "3", "upgraded in place");
}

/// A data directory of a schema this roomd does not know is refused with "run a newer
/// roomd", and left as it was.
#[actix::test]
async fn a_data_directory_of_a_newer_schema_is_refused_and_left_alone() {
    let dir = schema_1_copy();
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema'", []).unwrap();
    }
    let refused = FileStore::open(dir.path(), 36_500).err().expect("refused");
    assert!(matches!(refused, OpenError::NewerSchema { found: 99, .. }), "{refused:?}");
    assert!(refused.to_string().contains("newer roomd"), "{refused}");
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    let schema: String = conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).unwrap();
    assert_eq!(schema, "99");
}

/// The seqs of `pk`'s log in the store copied into `dir`, opened as roomd would at start.
async fn seqs_after_crash(dir: &Path, pk: &str) -> Vec<u64> {
    let store = FileStore::open(dir, 36_500).unwrap_or_else(|e| panic!("a torn tail must not stop the start: {e}"));
    let seqs = store.load(pk).await.unwrap().expect("the game").entries.iter().map(|e| e.seq).collect();
    drop(store);
    seqs
}

/// Issue 57: a crash in the middle of the last group commit. The store's files are
/// copied while it runs, then its write-ahead log is cut at a sample of byte offsets
/// inside the last commits (and, once, one byte of it is changed): every copy opens,
/// holds every entry acknowledged before the cut commits, and a log that is a clean
/// prefix (the torn tail is dropped, never read as entries).
#[actix::test]
async fn a_torn_last_commit_is_dropped_and_every_acknowledged_entry_before_it_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let wal_name = format!("{DB_FILE}-wal");
    let store = FileStore::open(dir.path(), 36_500).unwrap();
    let pk = game_pk("r_torn", "01");
    store.begin(start(&pk)).await.unwrap();
    for seq in 1..=20 {
        store.append(&pk, entry(seq)).await.unwrap();
    }
    let wal_before = std::fs::metadata(dir.path().join(&wal_name)).unwrap().len() as usize;
    // The last group: ten appends issued at once.
    let last: Vec<_> = (21..=30).map(|seq| store.append(&pk, entry(seq))).collect();
    for appended in futures_util::future::join_all(last).await {
        appended.unwrap();
    }
    let db = std::fs::read(dir.path().join(DB_FILE)).unwrap();
    let wal = std::fs::read(dir.path().join(&wal_name)).unwrap();
    assert!(wal.len() > wal_before, "the last commits are in the write-ahead log ({} bytes)", wal.len());

    let crash = |wal: &[u8]| {
        let copy = tempfile::tempdir().unwrap();
        std::fs::write(copy.path().join(DB_FILE), &db).unwrap();
        std::fs::write(copy.path().join(&wal_name), wal).unwrap();
        copy
    };
    let step = ((wal.len() - wal_before) / 40).max(1);
    let mut cuts: Vec<usize> = (wal_before..wal.len()).step_by(step).collect();
    cuts.extend([wal.len() - 1, wal.len()]);
    let mut kept_at_cut = Vec::new();
    for cut in cuts {
        let copy = crash(&wal[..cut]);
        let seqs = seqs_after_crash(copy.path(), &pk).await;
        let kept = seqs.len() as u64;
        assert_eq!(seqs, (1..=kept).collect::<Vec<_>>(), "cut at {cut}: the log is a clean prefix");
        assert!(kept >= 20, "cut at {cut}: only {kept} entries, 20 were acknowledged before the last commits");
        if cut == wal.len() {
            assert_eq!(kept, 30, "the whole log keeps every entry");
        }
        kept_at_cut.push(kept);
    }
    assert!(kept_at_cut.windows(2).all(|w| w[0] <= w[1]), "a longer log never keeps fewer entries: {kept_at_cut:?}");
    assert!(kept_at_cut[0] < 30, "a cut inside the last commits drops them: {kept_at_cut:?}");

    // One byte of the last commit changed (a torn sector rather than a short file).
    let mut flipped = wal.clone();
    let at = wal.len() - 100;
    flipped[at] ^= 0xff;
    let copy = crash(&flipped);
    let seqs = seqs_after_crash(copy.path(), &pk).await;
    assert!(seqs.len() >= 20 && seqs.len() < 30, "a damaged last commit is dropped, not read: {seqs:?}");
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    drop(store);
}
