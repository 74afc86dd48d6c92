//! Operators' reads of the cluster (the admin API), each in a fixed number of Redis round
//! trips whatever the number of rooms or nodes: never one call per room in a loop.

use crate::error::StoreError;
use crate::info::{RoomInfo, RoomStatus};
use crate::redis::conn::RedisConn;
use crate::redis::keys::Keys;
use redis::RedisError;
use std::collections::HashMap;

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A live node as operators see it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRow {
    pub id: String,
    pub draining: bool,
    /// Epoch ms of its last membership heartbeat.
    pub last_heartbeat_ms: i64,
    /// What the node last reported about itself (address, rooms, sockets), as JSON.
    pub stats: Option<serde_json::Value>,
    /// Where it takes peer links, if it does.
    pub peer: Option<String>,
}

/// Live members with their heartbeat scores, draining flags, reported stats and peer link
/// addresses.
type NodesReply = (Vec<(String, f64)>, HashMap<String, String>, HashMap<String, String>, HashMap<String, String>);

/// Live nodes (heartbeat not expired at `now_ms`), sorted by id, in one pipelined round
/// trip. `ttl_ms` is the membership TTL (a heartbeat's score is its time plus the TTL).
pub async fn nodes(conn: &RedisConn, keys: &Keys, now_ms: i64, ttl_ms: i64) -> Result<Vec<NodeRow>, StoreError> {
    let mut conn = conn.clone();
    let (live, draining, stats, mut peers): NodesReply = redis::pipe()
        .cmd("ZRANGEBYSCORE")
        .arg(keys.nodes())
        .arg(format!("({now_ms}"))
        .arg("+inf")
        .arg("WITHSCORES")
        .hgetall(keys.draining())
        .hgetall(keys.node_stats())
        .hgetall(keys.node_peers())
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    let mut out: Vec<NodeRow> = live
        .into_iter()
        .map(|(id, expires)| NodeRow {
            draining: draining.get(&id).is_some_and(|f| f == "1"),
            last_heartbeat_ms: expires as i64 - ttl_ms,
            stats: stats.get(&id).and_then(|j| serde_json::from_str(j).ok()),
            peer: peers.remove(&id),
            id,
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Records what `node` reports about itself (one `HSET`); entries of nodes that are gone
/// are ignored by [`nodes`], which lists live members only.
pub async fn report(conn: &RedisConn, keys: &Keys, node: &str, stats: &serde_json::Value) -> Result<(), StoreError> {
    let mut conn = conn.clone();
    redis::cmd("HSET")
        .arg(keys.node_stats())
        .arg(node)
        .arg(stats.to_string())
        .query_async::<()>(&mut conn)
        .await
        .map_err(unavailable)
}

/// One open room as operators list it.
#[derive(Clone, Debug, PartialEq)]
pub struct RoomRow {
    pub info: RoomInfo,
    /// The node holding its lease now (`None`: not active anywhere this moment).
    pub owner: Option<String>,
    /// Applied inputs of its current game, if one started.
    pub seq: Option<u64>,
}

/// Filters of a room listing.
#[derive(Clone, Debug, Default)]
pub struct RoomFilter {
    pub game: Option<String>,
    /// Owner node.
    pub node: Option<String>,
}

/// Most batches of `limit` ids one page reads while filters skip rooms.
const MAX_BATCHES: usize = 8;

/// A page of open rooms in room-id order after `cursor` (a room id; `None` = from the
/// start): up to `limit` rows and the cursor of the next page (`None` at the end).
///
/// Round trips: one `SMEMBERS` of the open-room ids, then per batch of `limit` ids one
/// pipeline (`GET` meta and lease of each) and one for the seq counters of started
/// games. With filters a page reads at most [`MAX_BATCHES`] batches, so it may hold fewer
/// than `limit` rows while `next` is still set. (`SSCAN` would not bound pages: Redis
/// returns a small set whole whatever `COUNT` says.)
pub async fn rooms_page(
    conn: &RedisConn,
    keys: &Keys,
    cursor: Option<&str>,
    limit: usize,
    filter: &RoomFilter,
) -> Result<(Vec<RoomRow>, Option<String>), StoreError> {
    let mut conn = conn.clone();
    let limit = limit.max(1);
    let mut ids: Vec<String> =
        redis::cmd("SMEMBERS").arg(keys.open_rooms()).query_async(&mut conn).await.map_err(unavailable)?;
    ids.sort();
    ids.dedup();
    let start = cursor.map_or(0, |c| ids.partition_point(|id| id.as_str() <= c));
    let mut rows = Vec::new();
    let mut pos = start;
    for _ in 0..MAX_BATCHES {
        if pos >= ids.len() || rows.len() >= limit {
            break;
        }
        let batch = &ids[pos..(pos + limit).min(ids.len())];
        let gets: Vec<redis::Cmd> =
            batch.iter().flat_map(|id| [redis::Cmd::get(keys.meta(id)), redis::Cmd::get(keys.lease(id))]).collect();
        let values: Vec<Option<String>> = conn.each(&gets).await.map_err(unavailable)?;
        let mut found = Vec::new();
        for i in 0..batch.len() {
            let meta = values.get(2 * i).cloned().flatten();
            let lease = values.get(2 * i + 1).cloned().flatten();
            let Some(info) = meta.and_then(|j| serde_json::from_str::<RoomInfo>(&j).ok()) else { continue };
            if info.status == RoomStatus::Ended {
                continue;
            }
            let owner = lease.and_then(|t| t.split('/').next().map(str::to_owned)).filter(|n| !n.is_empty());
            let keep = filter.game.as_ref().is_none_or(|g| &info.game == g)
                && filter.node.as_ref().is_none_or(|n| owner.as_ref() == Some(n));
            found.push((i, keep.then_some(RoomRow { info, owner, seq: None })));
        }
        // The last seq of each kept room that started a game (its log's top id), in one
        // more pipeline.
        let mut tops = Vec::new();
        let mut asked = Vec::new();
        for (i, (_, row)) in found.iter().enumerate() {
            if let Some(pk) = row.as_ref().and_then(|r| r.info.game_pk.as_deref()) {
                if let Some(room) = crate::redis::keys::room_of(pk) {
                    let mut top = redis::cmd("XREVRANGE");
                    top.arg(keys.log(room, pk)).arg("+").arg("-").arg("COUNT").arg(1);
                    tops.push(top);
                    asked.push(i);
                }
            }
        }
        if !asked.is_empty() {
            let replies: Vec<redis::streams::StreamRangeReply> = conn.each(&tops).await.map_err(unavailable)?;
            for (i, top) in asked.into_iter().zip(replies) {
                if let Some(Some(row)) = found.get_mut(i).map(|(_, r)| r.as_mut()) {
                    row.seq = Some(top.ids.first().and_then(|id| crate::store::redis::seq_of_id(&id.id)).unwrap_or(0));
                }
            }
        }
        // Where in the batch this page stops: after the row that filled it, else the end.
        let mut used = batch.len();
        for (i, row) in found {
            if let Some(row) = row {
                rows.push(row);
                if rows.len() >= limit {
                    used = i + 1;
                    break;
                }
            }
        }
        pos += used;
    }
    let next = (pos < ids.len() && pos > start).then(|| ids[pos - 1].clone());
    Ok((rows, next))
}
