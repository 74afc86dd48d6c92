//! What the store thread keeps in memory of the running games ([`Running`]: each one's
//! last seq and `log` rows), and that state as one batch sees it before it commits
//! ([`BatchSeqs`]). Apart because it is the store's one state outside SQLite, with a rule
//! of its own: a batch's changes count only once the batch committed.

use crate::FastMap;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

/// What the store thread keeps of the running games: each one's last seq (the sequence
/// check of an append reads nothing) and the rows of the `log` table that hold its
/// entries (a running game's entries are appended there, in rowid order and without a
/// secondary index, so a commit writes the table's last pages instead of one page per
/// game; `Finish` moves them to `entries`, keyed by game). Rebuilt at open from the `log`
/// table; a game whose entries are all in `entries` (finished, or written by schema 2)
/// has its last seq read from there once.
#[derive(Default)]
pub(super) struct Running {
    last: FastMap<String, u64>,
    rows: FastMap<String, Vec<i64>>,
}

impl Running {
    /// Reads the `log` table (open): every running game's rows and last seq.
    pub(super) fn load(conn: &Connection) -> Result<Running, rusqlite::Error> {
        let mut running = Running::default();
        let mut stmt = conn.prepare("SELECT id, pk, seq FROM log ORDER BY id")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let (id, pk, seq): (i64, String, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
            let seq = u64::try_from(seq).unwrap_or(0);
            let last = running.last.entry(pk.clone()).or_insert(0);
            *last = (*last).max(seq);
            running.rows.entry(pk).or_default().push(id);
        }
        Ok(running)
    }

    pub(super) fn apply(&mut self, changes: BatchChanges) {
        for (pk, last) in changes.last {
            match last {
                Some(last) => self.last.insert(pk, last),
                None => self.last.remove(&pk),
            };
        }
        for (pk, id) in changes.rows {
            self.rows.entry(pk).or_default().push(id);
        }
        for pk in changes.moved {
            self.rows.remove(&pk);
        }
    }
}

/// [`Running`] as one batch sees it: its own changes first, then what was committed.
/// The batch's changes reach [`Running`] only once it committed; a batch rolled back
/// leaves it as it was.
pub(super) struct BatchSeqs<'a> {
    pub(super) committed: &'a Running,
    pub(super) changes: BatchChanges,
}

#[derive(Default)]
pub(super) struct BatchChanges {
    /// Last seqs set (`None`: no longer kept, read again if needed).
    last: FastMap<String, Option<u64>>,
    /// `log` rows added, in order.
    rows: Vec<(String, i64)>,
    /// Games whose `log` rows moved to `entries`.
    moved: Vec<String>,
}

impl BatchSeqs<'_> {
    /// The last seq of `pk`'s log, `None` when no such game is stored.
    pub(super) fn last(&self, tx: &Transaction<'_>, pk: &str) -> Result<Option<u64>, rusqlite::Error> {
        let known = match self.changes.last.get(pk) {
            Some(changed) => *changed,
            None => self.committed.last.get(pk).copied(),
        };
        if let Some(last) = known {
            return Ok(Some(last));
        }
        // Not running here since the store opened (its `log` rows, if any, would be
        // known): its entries are all in `entries`.
        let mut stmt =
            tx.prepare_cached("SELECT (SELECT max(seq) FROM entries WHERE pk = ?1) FROM games WHERE pk = ?1")?;
        let found: Option<Option<i64>> = stmt.query_row(params![pk], |r| r.get(0)).optional()?;
        Ok(found.map(|max| max.map_or(0, |m| u64::try_from(m).unwrap_or(0))))
    }

    /// `pk`'s last seq is `last` from now on; `None`: no longer kept.
    pub(super) fn set(&mut self, pk: &str, last: Option<u64>) {
        self.changes.last.insert(pk.to_owned(), last);
    }

    /// A `log` row of `pk` was added.
    pub(super) fn added(&mut self, pk: &str, id: i64) {
        self.changes.rows.push((pk.to_owned(), id));
    }

    /// `pk`'s `log` rows as this batch sees them, in order.
    pub(super) fn rows(&self, pk: &str) -> Vec<i64> {
        if self.changes.moved.iter().any(|m| m == pk) {
            return Vec::new();
        }
        let mut rows = self.committed.rows.get(pk).cloned().unwrap_or_default();
        rows.extend(self.changes.rows.iter().filter(|(p, _)| p == pk).map(|(_, id)| *id));
        rows
    }

    /// `pk`'s `log` rows were moved to `entries`.
    pub(super) fn moved(&mut self, pk: &str) {
        self.changes.rows.retain(|(p, _)| p != pk);
        self.changes.moved.push(pk.to_owned());
    }
}
