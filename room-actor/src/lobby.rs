//! The lobby (`GET /api/rooms`): open rooms newest first (`createdAt` descending, then
//! `roomId`), one page at a time, the same order and cursors in both modes.
//!
//! A room's place in that order is one string, its *position*
//! (`<13 digits: 9999999999999 − createdAt ms>.<roomId>`), whose byte order is the lobby
//! order: a cursor is the position of the last room of a page, and the next page is what
//! comes after it. In Redis the open rooms are indexed by position in [`BUCKETS`] sorted
//! sets (one hash slot each, a room's bucket from its id), so a page costs one pipelined
//! `ZRANGE … BYLEX LIMIT` per bucket plus one pipelined `GET` per room on the page, never
//! a read of every open room, and no one key carries the lobby.

use crate::info::{RoomInfo, RoomStatus};
use xxhash_rust::xxh3::xxh3_64;

/// Rooms per page when the caller names no `limit`.
pub const DEFAULT_PAGE: usize = 50;
/// The largest `limit` a caller may ask for.
pub const MAX_PAGE: usize = 200;
/// Sorted sets the Redis lobby index is spread over.
pub const BUCKETS: u64 = 16;

const NEWEST: i64 = 9_999_999_999_999;

/// Which rooms a page shows: listed rooms, and unlisted ones only to a caller who names
/// their game (`PROTOCOL.md`: a load test's rooms never fill the players' lobby).
#[derive(Clone, Debug, Default)]
pub struct LobbyFilter {
    pub game: Option<String>,
    pub status: Option<RoomStatus>,
}

impl LobbyFilter {
    pub fn admits(&self, info: &RoomInfo) -> bool {
        let game = match &self.game {
            Some(g) => &info.game == g,
            None => info.is_listed(),
        };
        game && self.status.is_none_or(|s| info.status == s)
    }
}

/// `info`'s position in the lobby order.
pub fn position(info: &RoomInfo) -> String {
    format!("{:013}.{}", NEWEST - info.created_at.clamp(0, NEWEST), info.room_id)
}

/// The room id of a position.
pub fn room_of_position(position: &str) -> Option<&str> {
    position.get(14..).filter(|id| !id.is_empty())
}

/// Whether `cursor` is a position (what a `Link` header gave out), so that nothing else
/// reaches the index.
pub fn valid_cursor(cursor: &str) -> bool {
    let bytes = cursor.as_bytes();
    bytes.len() > 14
        && bytes.len() <= 14 + 64
        && bytes[..13].iter().all(u8::is_ascii_digit)
        && bytes[13] == b'.'
        && bytes[14..].iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
}

/// The index bucket of a room.
pub fn bucket(room_id: &str) -> u64 {
    xxh3_64(room_id.as_bytes()) % BUCKETS
}

/// One page of `rooms` (any order) after `cursor`: up to `limit` rooms `filter` admits, in
/// lobby order, and the cursor of the next page when more remain (the embedded node's
/// lobby, read from its directory).
pub fn page_of(
    rooms: impl IntoIterator<Item = RoomInfo>,
    cursor: Option<&str>,
    limit: usize,
    filter: &LobbyFilter,
) -> (Vec<RoomInfo>, Option<String>) {
    let mut placed: Vec<(String, RoomInfo)> = rooms
        .into_iter()
        .filter(|i| filter.admits(i))
        .map(|i| (position(&i), i))
        .filter(|(p, _)| cursor.is_none_or(|c| p.as_str() > c))
        .collect();
    placed.sort_by(|a, b| a.0.cmp(&b.0));
    let limit = limit.max(1);
    let next = (placed.len() > limit).then(|| placed[limit - 1].0.clone());
    placed.truncate(limit);
    (placed.into_iter().map(|(_, i)| i).collect(), next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::PlayerId;

    fn room(id: &str, created_at: i64, game: &str) -> RoomInfo {
        RoomInfo {
            room_id: id.into(),
            game: game.into(),
            options: serde_json::json!({}).into(),
            host: PlayerId::from("h"),
            seats: vec![],
            status: RoomStatus::Waiting,
            game_pk: None,
            node: None,
            node_url: None,
            grace_sec: 60,
            min_players: 2,
            max_players: 4,
            created_at,
            gone: vec![],
            kicked: vec![],
            removed: vec![],
            listed: Some(true),
        }
    }

    #[test]
    fn positions_sort_newest_first_then_by_id_and_are_valid_cursors() {
        let (a, b, c) = (room("r_b", 2_000, "tally"), room("r_a", 2_000, "tally"), room("r_c", 1_000, "tally"));
        let mut ps = [position(&c), position(&a), position(&b)];
        ps.sort();
        assert_eq!(ps, [position(&b), position(&a), position(&c)]);
        assert!(ps.iter().all(|p| valid_cursor(p)));
        assert_eq!(room_of_position(&ps[0]), Some("r_a"));
        for bad in [
            "",
            "123",
            "0000000000001-r_a",
            "000000000000x.r_a",
            "0000000000001.",
            "0000000000001.r a",
            "0000000000001.r\u{e9}",
        ] {
            assert!(!valid_cursor(bad), "{bad:?}");
        }
    }

    #[test]
    fn unlisted_rooms_are_shown_only_to_a_caller_who_names_their_game() {
        let listed = room("r_l", 1, "halli-galli");
        let unlisted = RoomInfo { listed: Some(false), ..room("r_u", 2, "halli-galli") };
        let everyone = LobbyFilter::default();
        assert!(everyone.admits(&listed));
        assert!(!everyone.admits(&unlisted));
        let named = LobbyFilter { game: Some("halli-galli".into()), status: None };
        assert!(named.admits(&listed) && named.admits(&unlisted));
        let other = LobbyFilter { game: Some("tally".into()), status: None };
        assert!(!other.admits(&unlisted));
        // Info saved before rooms said: the game's default (tally is not for players).
        let old_tally = RoomInfo { listed: None, ..room("r_t", 3, "tally") };
        let old_game = RoomInfo { listed: None, ..room("r_g", 4, "cockroach-poker") };
        assert!(!everyone.admits(&old_tally) && everyone.admits(&old_game));
        assert!(LobbyFilter { game: Some("tally".into()), status: None }.admits(&old_tally));
    }

    #[test]
    fn pages_walk_every_admitted_room_once_in_order() {
        let rooms: Vec<RoomInfo> = (0..25)
            .map(|i| room(&format!("r_{i:02}"), 1_000 + i / 3, if i % 4 == 0 { "halli-galli" } else { "tally" }))
            .collect();
        let filter = LobbyFilter { game: Some("tally".into()), status: None };
        let (mut seen, mut cursor) = (Vec::new(), None::<String>);
        loop {
            let (page, next) = page_of(rooms.clone(), cursor.as_deref(), 4, &filter);
            assert!(page.len() <= 4);
            seen.extend(page.iter().map(position));
            match next {
                Some(n) => {
                    assert_eq!(Some(&n), seen.last(), "the cursor is the page's last position");
                    cursor = Some(n);
                }
                None => break,
            }
        }
        let mut expected: Vec<String> = rooms.iter().filter(|r| r.game == "tally").map(position).collect();
        expected.sort();
        assert_eq!(seen, expected);
    }
}
