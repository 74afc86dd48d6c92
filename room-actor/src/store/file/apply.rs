//! Each call's SQL, run inside the batch's transaction: the writes (a game's start,
//! appends, snapshot and finish, a room's info, the purge, the probe) and the reads
//! (rooms, a game to load, records). Apart from the commit loop (`commit`), which decides
//! when a batch commits and what its calls are told, not what a call does.

use super::ops::{Fail, Op, Out};
use super::running::BatchSeqs;
use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::log::{decode, GameRecord, LogEntry, Snapshot, StartEntry, StoredGame};
use rusqlite::{params, OptionalExtension, Transaction};
use tracing::info;

fn no_game(pk: &str) -> Fail {
    Fail::Refused(StoreError::Corrupt(format!("no game {pk}")))
}

/// Runs one call inside the batch's transaction. The statements of the hot path
/// (appends, snapshots, room info) are compiled once per connection (`prepare_cached`).
pub(super) fn apply(tx: &Transaction<'_>, op: &Op, seqs: &mut BatchSeqs<'_>) -> Result<Out, Fail> {
    match op {
        Op::Begin { pk, start } => {
            let inserted = tx
                .prepare_cached("INSERT OR IGNORE INTO games (pk, start) VALUES (?1, ?2)")?
                .execute(params![pk, start])?;
            if inserted == 0 {
                return Err(StoreError::Conflict { game_pk: pk.clone(), expected: 0, got: 0 }.into());
            }
            seqs.set(pk, Some(0));
            Ok(Out::Done)
        }
        Op::Append { pk, seq, body } => {
            let Some(last) = seqs.last(tx, pk)? else { return Err(no_game(pk)) };
            let expected = last + 1;
            if *seq != expected {
                return Err(StoreError::Conflict { game_pk: pk.clone(), expected, got: *seq }.into());
            }
            let at = i64::try_from(*seq).map_err(|_| StoreError::Corrupt(format!("seq {seq} out of range")))?;
            let id = tx
                .prepare_cached("INSERT INTO log (pk, seq, body) VALUES (?1, ?2, ?3)")?
                .insert(params![pk, at, body])?;
            seqs.set(pk, Some(*seq));
            seqs.added(pk, id);
            Ok(Out::Done)
        }
        Op::Snapshot { pk, body } => {
            if tx.prepare_cached("UPDATE games SET snapshot = ?2 WHERE pk = ?1")?.execute(params![pk, body])? == 0 {
                return Err(no_game(pk));
            }
            Ok(Out::Done)
        }
        Op::Finish { pk, ended_at, players, body } => {
            if tx
                .prepare_cached("UPDATE games SET record = ?2, ended_at = ?3 WHERE pk = ?1")?
                .execute(params![pk, body, ended_at])?
                == 0
            {
                return Err(no_game(pk));
            }
            let mut index =
                tx.prepare_cached("INSERT OR IGNORE INTO user_games (player, ended_at, pk) VALUES (?1, ?2, ?3)")?;
            for player in players {
                index.execute(params![player.as_str(), ended_at, pk])?;
            }
            // A finished game takes no more appends: its entries move from `log` to
            // `entries` (one game's rows together: its replay reads one range), and its
            // seq need not be kept.
            let ids = seqs.rows(pk);
            let mut copy =
                tx.prepare_cached("INSERT INTO entries (pk, seq, body) SELECT pk, seq, body FROM log WHERE id = ?1")?;
            let mut delete = tx.prepare_cached("DELETE FROM log WHERE id = ?1")?;
            for id in &ids {
                copy.execute(params![id])?;
                delete.execute(params![id])?;
            }
            seqs.moved(pk);
            seqs.set(pk, None);
            Ok(Out::Done)
        }
        Op::PutRoom { id, json, open, now } => {
            let ended_at = (!open).then_some(*now);
            tx.prepare_cached(
                "INSERT INTO rooms (id, info, open, ended_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET info = excluded.info, open = excluded.open,
                     ended_at = coalesce(rooms.ended_at, excluded.ended_at)",
            )?
            .execute(params![id, json, open, ended_at])?;
            Ok(Out::Done)
        }
        Op::Room { id } => {
            let json: Option<String> =
                tx.query_row("SELECT info FROM rooms WHERE id = ?1", params![id], |r| r.get(0)).optional()?;
            Ok(Out::Room(json.map(|j| room_info(&j)).transpose()?))
        }
        Op::OpenRooms => {
            let mut stmt = tx.prepare_cached("SELECT info FROM rooms WHERE open = 1")?;
            let jsons = stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<Result<Vec<_>, _>>()?;
            let mut rooms = Vec::with_capacity(jsons.len());
            for json in jsons {
                let info = room_info(&json)?;
                if info.status != RoomStatus::Ended {
                    rooms.push(info);
                }
            }
            Ok(Out::Rooms(rooms))
        }
        Op::Load { pk } => {
            let row: Option<(Vec<u8>, Option<Vec<u8>>)> = tx
                .query_row("SELECT start, snapshot FROM games WHERE pk = ?1", params![pk], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            let Some((start, snapshot)) = row else { return Ok(Out::Game(None)) };
            let mut stmt = tx.prepare_cached("SELECT body FROM entries WHERE pk = ?1 ORDER BY seq")?;
            let bodies = stmt.query_map(params![pk], |r| r.get::<_, Vec<u8>>(0))?.collect::<Result<Vec<_>, _>>()?;
            let mut entries = bodies.iter().map(|b| decode::<LogEntry>(b)).collect::<Result<Vec<_>, _>>()?;
            // A running game's entries are in `log` (after any a schema-2 store wrote
            // to `entries` before the upgrade).
            entries.extend(log_rows(tx, &seqs.rows(pk))?);
            entries.sort_by_key(|e| e.seq);
            Ok(Out::Game(Some(StoredGame {
                start: decode::<StartEntry>(&start)?,
                snapshot: snapshot.as_deref().map(decode::<Snapshot>).transpose()?,
                entries,
            })))
        }
        Op::Record { pk } => {
            let body: Option<Option<Vec<u8>>> =
                tx.query_row("SELECT record FROM games WHERE pk = ?1", params![pk], |r| r.get(0)).optional()?;
            Ok(Out::Record(body.flatten().as_deref().map(decode::<GameRecord>).transpose()?))
        }
        Op::GamesOf { player, before, limit } => {
            let mut stmt = tx.prepare_cached(
                "SELECT g.record FROM user_games u JOIN games g ON g.pk = u.pk
                 WHERE u.player = ?1 AND u.ended_at < ?2 AND g.record IS NOT NULL
                 ORDER BY u.ended_at DESC, u.pk DESC LIMIT ?3",
            )?;
            let bodies = stmt
                .query_map(params![player.as_str(), before, *limit as i64], |r| r.get::<_, Vec<u8>>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Out::Records(bodies.iter().map(|b| decode::<GameRecord>(b)).collect::<Result<Vec<_>, _>>()?))
        }
        Op::Purge { before } => {
            let old = "SELECT pk FROM games WHERE ended_at IS NOT NULL AND ended_at < ?1";
            tx.execute(&format!("DELETE FROM entries WHERE pk IN ({old})"), params![before])?;
            tx.execute(&format!("DELETE FROM user_games WHERE pk IN ({old})"), params![before])?;
            let games =
                tx.execute("DELETE FROM games WHERE ended_at IS NOT NULL AND ended_at < ?1", params![before])?;
            tx.execute("DELETE FROM rooms WHERE open = 0 AND ended_at < ?1", params![before])?;
            if games > 0 {
                info!(games, "finished games past the retention deleted");
            }
            Ok(Out::Purged(games))
        }
        Op::Probe { now } => {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('probe', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![now.to_string()],
            )?;
            Ok(Out::Done)
        }
    }
}

fn room_info(json: &str) -> Result<RoomInfo, Fail> {
    serde_json::from_str(json).map_err(|e| Fail::Refused(StoreError::Corrupt(format!("room info: {e}"))))
}

/// Reads the `log` rows `ids` (a running game's entries).
fn log_rows(tx: &Transaction<'_>, ids: &[i64]) -> Result<Vec<LogEntry>, Fail> {
    let mut stmt = tx.prepare_cached("SELECT body FROM log WHERE id = ?1")?;
    let mut entries = Vec::with_capacity(ids.len());
    for id in ids {
        let body: Vec<u8> = stmt.query_row(params![id], |r| r.get(0))?;
        entries.push(decode::<LogEntry>(&body)?);
    }
    Ok(entries)
}
