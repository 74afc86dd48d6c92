//! The Redis store's lobby index (a sorted set per bucket, `redis/keys.rs`): its pages,
//! read for `GET /api/rooms`, and its upkeep (entries of ended rooms dropped).

use super::{unavailable, RedisStore};
use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::lobby::{self, LobbyFilter};
use redis::Cmd;

/// Index reads one lobby call may make before it answers a short page (a filter that
/// admits few rooms).
pub const LOBBY_ROUNDS: usize = 4;

impl RedisStore {
    /// One lobby page after `cursor` (see `lobby.rs`): up to `limit` open rooms `filter`
    /// admits, newest first, and the next page's cursor when more may remain. Reads
    /// `limit` index entries per bucket (one pipeline) and the rooms among the first
    /// `limit` of them (one more), at most [`LOBBY_ROUNDS`] times when the filter leaves a
    /// page short; then the page is answered short, with a cursor to go on from. Index
    /// entries whose room ended or expired are removed on the way.
    pub async fn lobby_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
        filter: &LobbyFilter,
    ) -> Result<(Vec<RoomInfo>, Option<String>), StoreError> {
        let limit = limit.clamp(1, lobby::MAX_PAGE);
        let mut after = cursor.map(str::to_owned);
        let mut page = Vec::new();
        for _ in 0..LOBBY_ROUNDS {
            let from = after.as_ref().map_or_else(|| "-".to_owned(), |c| format!("({c}"));
            let ranges: Vec<Cmd> = (0..lobby::BUCKETS)
                .map(|b| {
                    let mut range = redis::cmd("ZRANGE");
                    range.arg(self.keys.lobby(b)).arg(&from).arg("+").arg("BYLEX").arg("LIMIT").arg(0).arg(limit);
                    range
                })
                .collect();
            let buckets: Vec<Vec<String>> = self.conn.each(&ranges).await.map_err(unavailable)?;
            let full_bucket = buckets.iter().any(|b| b.len() >= limit);
            let mut next: Vec<String> = buckets.into_iter().flatten().collect();
            next.sort();
            let truncated = next.len() > limit;
            next.truncate(limit);
            let gets: Vec<Cmd> = next
                .iter()
                .map(|position| Cmd::get(self.keys.meta(lobby::room_of_position(position).unwrap_or_default())))
                .collect();
            let metas: Vec<Option<String>> = self.conn.each(&gets).await.map_err(unavailable)?;
            let (mut stale, mut filled) = (Vec::new(), None);
            for (i, (position, meta)) in next.iter().zip(metas).enumerate() {
                match meta.and_then(|j| serde_json::from_str::<RoomInfo>(&j).ok()) {
                    Some(info) if info.status != RoomStatus::Ended => {
                        if filter.admits(&info) {
                            page.push(info);
                        }
                    }
                    _ => stale.push(position),
                }
                if page.len() == limit {
                    filled = Some(i);
                    break;
                }
            }
            self.unindex(&stale).await;
            if let Some(i) = filled {
                // Full: more remain if this was not the last entry there is.
                let more = i + 1 < next.len() || truncated || full_bucket;
                return Ok((page, more.then(|| next[i].clone())));
            }
            if !(truncated || full_bucket) {
                return Ok((page, None));
            }
            after = next.last().cloned();
        }
        Ok((page, after))
    }

    /// Drops lobby index entries whose room ended or expired (best effort: a later page
    /// finds them again).
    async fn unindex(&self, positions: &[&String]) {
        if positions.is_empty() {
            return;
        }
        let removals: Vec<Cmd> = positions
            .iter()
            .map(|position| {
                let room = lobby::room_of_position(position).unwrap_or_default();
                Cmd::zrem(self.keys.lobby(lobby::bucket(room)), position.as_str())
            })
            .collect();
        let _ = self.conn.each::<i64>(&removals).await;
    }
}
