//! The room log: a start entry, then one entry per applied input, plus snapshots and
//! the finished-game record. Encoded with bincode (serde mode); inputs travel inside as
//! the JSON the game's serde types produce, because game actions are internally tagged
//! enums (`{"type":"flip"}`) that bincode cannot decode.

use crate::error::StoreError;
use engine::{Actor, PlayerId, RngState, Seed};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The first entry of a game's log: everything `setup` needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StartEntry {
    pub game_pk: String,
    pub room_id: String,
    pub game: String,
    pub seed: Seed,
    /// Seats from the host clockwise.
    pub players: Vec<PlayerId>,
    pub bots: Vec<PlayerId>,
    /// Display names by seat (results and game lists show them).
    pub names: Vec<String>,
    /// The validated options, as JSON.
    pub options_json: String,
    pub state_version: u32,
    pub started_at: i64,
    /// Everyone's RTT as the room knew it at the start. Views may show it (halli-galli
    /// `showRtt`), and a replay's scenes must equal the views players received.
    pub rtt: BTreeMap<PlayerId, u32>,
}

/// One applied input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    pub seq: u64,
    /// `now` passed to `apply` (serverTs).
    pub at: i64,
    pub actor: Actor,
    /// The client's sequence number; `None` for server inputs (timeouts, ticks, bots).
    pub cs: Option<u64>,
    /// The actor's RTT passed to `apply` (latency compensation), logged so replays match.
    pub rtt_ms: Option<u32>,
    /// True for inputs the server made (timeouts, ticks, bot moves).
    pub auto: bool,
    /// `Input<Action, System>` as JSON.
    pub input_json: String,
    /// The room's RTT table for the views of this entry, when it changed since the
    /// previous entry (`None`: unchanged).
    pub rtt: Option<BTreeMap<PlayerId, u32>>,
}

/// The state after `seq` entries, to bound recovery time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub seq: u64,
    pub at: i64,
    pub state_json: String,
    pub rng: RngState,
}

/// A finished game, listed by `/api/me/games` and checked by replays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GameRecord {
    pub game_pk: String,
    pub room_id: String,
    pub game: String,
    pub players: Vec<PlayerId>,
    pub names: Vec<String>,
    pub started_at: i64,
    pub ended_at: i64,
    pub state_version: u32,
    pub final_seq: u64,
    /// `GameResult` as JSON.
    pub result_json: String,
    /// The final state as JSON: a replay must rebuild exactly this.
    pub final_state_json: String,
}

/// Everything stored for one game.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredGame {
    pub start: StartEntry,
    pub snapshot: Option<Snapshot>,
    /// Every entry in seq order (replays need all of them; recovery skips those the
    /// snapshot covers).
    pub entries: Vec<LogEntry>,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// The format version this build writes in front of every stored start entry, log entry,
/// snapshot and record, in every store. Bump it (and keep decoding the older ones) when
/// the encoding of a stored type changes, so logs written by an older release still load.
///
/// - 0: bare bincode (serde, standard config), as written before versions existed; the
///   first byte is then the varint of a `u64` or of a string length, never `0xFF`.
/// - 1: `[0xFF, 1]` followed by the same bincode as version 0.
pub const FORMAT_VERSION: u8 = 1;

/// First byte of a versioned value. Bincode's varint never starts with it (251–254 mark
/// wider integers; 255 is unused), so it tells a versioned value from a version-0 one.
const VERSIONED: u8 = 0xFF;

/// Encodes a stored value: the format header, then bincode.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    // Written in place after the header (no second buffer and copy per entry).
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(&[VERSIONED, FORMAT_VERSION]);
    encode_body_into(value, &mut out)?;
    Ok(out)
}

/// Decodes a stored value of any known format version; an unknown (newer) version is
/// [`StoreError::UnsupportedFormat`], never a guess.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes {
        [VERSIONED, 1, body @ ..] => decode_body(body),
        [VERSIONED, found, ..] => Err(StoreError::UnsupportedFormat { found: *found, newest: FORMAT_VERSION }),
        [VERSIONED] => Err(StoreError::Corrupt("format header without a version".into())),
        legacy => decode_body(legacy),
    }
}

/// Bare bincode, for frames that carry a version of their own (the cluster bus).
pub fn encode_body<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Bare bincode appended to `out`.
pub fn encode_body_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), StoreError> {
    bincode::serde::encode_into_std_write(value, out, config())
        .map(drop)
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Decodes bare bincode; every byte must be used. Stored values come back from Redis (or
/// a file), so every length in them is bounded by the bytes read before anything is
/// allocated for it, as in bus frames (`cluster::frame::decode_bounded`, whose
/// configuration is this one's with a limit).
pub fn decode_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    crate::cluster::frame::decode_bounded(bytes).map_err(StoreError::Corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_through_bincode() {
        let start = StartEntry {
            game_pk: "g1".into(),
            room_id: "r1".into(),
            game: "tally".into(),
            seed: Seed(0xfeed),
            players: vec!["a".into(), "b".into()],
            bots: vec!["b".into()],
            names: vec!["에이".into(), "비".into()],
            options_json: r#"{"target":10}"#.into(),
            state_version: 1,
            started_at: 1_700_000_000_000,
            rtt: BTreeMap::from([("a".into(), 35)]),
        };
        assert_eq!(decode::<StartEntry>(&encode(&start).unwrap()).unwrap(), start);
        for (actor, rtt) in
            [(Actor::Player("a".into()), None), (Actor::Server, Some(BTreeMap::from([("b".into(), 90)])))]
        {
            let entry = LogEntry {
                seq: 7,
                at: 5,
                actor,
                cs: Some(3),
                rtt_ms: Some(40),
                auto: false,
                input_json: r#"{"client":{"type":"bump"}}"#.into(),
                rtt,
            };
            assert_eq!(decode::<LogEntry>(&encode(&entry).unwrap()).unwrap(), entry);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode::<LogEntry>(&[0xff, 0xff, 0xff]).is_err());
        let mut bytes =
            encode(&Snapshot { seq: 1, at: 2, state_json: "{}".into(), rng: RngState { a: 1, b: 2, c: 3, d: 4 } })
                .unwrap();
        bytes.push(0);
        assert!(decode::<Snapshot>(&bytes).is_err());
    }
}
