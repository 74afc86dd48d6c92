#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Stored data outlives a release: values written before format versions existed
//! (`tests/fixtures/format_v0`, produced by `log::encode` as it was on main before this
//! change) still decode; every value written now carries the current version; a value
//! of an unknown version is a clear error, not a garbled game. Every store (memory,
//! file, Redis) goes through `log::{encode, decode}`, so this holds for all of them.

use engine::{Actor, RngState, Seed};
use room_actor::log::{decode, encode, GameRecord, LogEntry, Snapshot, StartEntry, FORMAT_VERSION};
use room_actor::StoreError;
use std::collections::BTreeMap;

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format_v0").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn start() -> StartEntry {
    StartEntry {
        game_pk: "r_fixture.00000000000000aa".into(),
        room_id: "r_fixture".into(),
        game: "tally".into(),
        seed: Seed(0xc0ffee),
        players: vec!["u_a".into(), "bot_r_fixture_1".into()],
        bots: vec!["bot_r_fixture_1".into()],
        names: vec!["에이".into(), "봇 1".into()],
        options_json: r#"{"target":3}"#.into(),
        state_version: 1,
        started_at: 1_700_000_000_000,
        rtt: BTreeMap::from([("u_a".into(), 35)]),
    }
}

fn player_entry() -> LogEntry {
    LogEntry {
        seq: 1,
        at: 1_700_000_000_500,
        actor: Actor::Player("u_a".into()),
        cs: Some(1),
        rtt_ms: Some(35),
        auto: false,
        input_json: r#"{"client":{"type":"bump"}}"#.into(),
        rtt: Some(BTreeMap::from([("u_a".into(), 40)])),
    }
}

fn server_entry() -> LogEntry {
    LogEntry {
        seq: 300,
        at: 1_700_000_001_000,
        actor: Actor::Server,
        cs: None,
        rtt_ms: None,
        auto: true,
        input_json: r#"{"system":{"type":"tick"}}"#.into(),
        rtt: None,
    }
}

fn snapshot() -> Snapshot {
    Snapshot {
        seq: 1,
        at: 1_700_000_000_500,
        state_json: r#"{"count":1}"#.into(),
        rng: RngState { a: 1, b: 2, c: 3, d: 4 },
    }
}

fn record() -> GameRecord {
    let s = start();
    GameRecord {
        game_pk: s.game_pk.clone(),
        room_id: "r_fixture".into(),
        game: "tally".into(),
        players: s.players.clone(),
        names: s.names.clone(),
        started_at: s.started_at,
        ended_at: 1_700_000_002_000,
        state_version: 1,
        final_seq: 300,
        result_json: r#"{"winners":["u_a"]}"#.into(),
        final_state_json: r#"{"count":3}"#.into(),
    }
}

#[test]
fn values_written_before_format_versions_still_decode() {
    assert_eq!(decode::<StartEntry>(&fixture("start.bin")).unwrap(), start());
    assert_eq!(decode::<LogEntry>(&fixture("entry_player.bin")).unwrap(), player_entry());
    assert_eq!(decode::<LogEntry>(&fixture("entry_server.bin")).unwrap(), server_entry());
    assert_eq!(decode::<Snapshot>(&fixture("snapshot.bin")).unwrap(), snapshot());
    assert_eq!(decode::<GameRecord>(&fixture("record.bin")).unwrap(), record());
}

#[test]
fn every_stored_value_carries_the_current_format_version() {
    let encoded = [
        encode(&start()).unwrap(),
        encode(&player_entry()).unwrap(),
        encode(&server_entry()).unwrap(),
        encode(&snapshot()).unwrap(),
        encode(&record()).unwrap(),
    ];
    for bytes in &encoded {
        assert_eq!(&bytes[..2], &[0xFF, FORMAT_VERSION], "format header");
    }
    // The body after the header is today's bincode: version 1 = version 0 + header.
    assert_eq!(&encoded[1][2..], &fixture("entry_player.bin")[..]);
    assert_eq!(decode::<LogEntry>(&encoded[1]).unwrap(), player_entry());
    assert_eq!(decode::<GameRecord>(&encoded[4]).unwrap(), record());
}

#[test]
fn an_unknown_format_version_is_a_clear_error_not_a_garbled_game() {
    let mut bytes = encode(&player_entry()).unwrap();
    bytes[1] = FORMAT_VERSION + 1;
    let err = decode::<LogEntry>(&bytes).unwrap_err();
    assert_eq!(err, StoreError::UnsupportedFormat { found: FORMAT_VERSION + 1, newest: FORMAT_VERSION });
    let message = err.to_string();
    assert!(
        message.contains(&format!("format version {}", FORMAT_VERSION + 1)) && message.contains("newer roomd"),
        "{message}"
    );
    // Version 0 is only ever unversioned: a header claiming 0 is no known format either.
    bytes[1] = 0;
    assert!(matches!(decode::<LogEntry>(&bytes), Err(StoreError::UnsupportedFormat { found: 0, .. })));
    assert!(matches!(decode::<LogEntry>(&[0xFF]), Err(StoreError::Corrupt(_))));
}
