#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The lobby at scale (issue #16, item 6): `GET /api/rooms` answers pages (`limit`,
//! `cursor`, a `Link: <…>; rel="next"` header), filtered by `game` and `status`, newest
//! first, in both modes; in cluster mode 10,000 open rooms are walked page by page from a
//! real node and a real Redis (`REDIS_URL`: these fail, never skip, without it), and
//! index entries of rooms that are gone are skipped and removed.

mod support;

use engine::PlayerId;
use room_actor::{RedisStore, RoomInfo, RoomStatus, RoomStore};
use serde_json::{json, Value};
use std::collections::HashSet;
use support::procs::{prefix, redis_url, token, Proc, Settings};
use support::start_server;

/// `GET path` with `token`: (status, body, the next page's path from `Link`).
async fn page(http: &reqwest::Client, base: &str, path: &str, token: &str) -> (u16, Value, Option<String>) {
    let resp = http.get(format!("{base}{path}")).bearer_auth(token).send().await.unwrap();
    let status = resp.status().as_u16();
    let next = resp.headers().get("link").map(|l| {
        let l = l.to_str().unwrap();
        assert!(l.ends_with("; rel=\"next\""), "{l}");
        l.trim_start_matches('<').split('>').next().unwrap().to_owned()
    });
    (status, resp.json().await.unwrap_or(Value::Null), next)
}

/// Every room id of every page from `first` on, checking each page's size (`full`: every
/// page but the last is full; a filtered page may come back short after a bounded
/// amount of index reading, with a link to go on).
async fn walk(http: &reqwest::Client, base: &str, first: &str, token: &str, limit: usize, full: bool) -> Vec<String> {
    let (mut ids, mut path) = (Vec::new(), Some(first.to_owned()));
    let mut pages = 0;
    while let Some(p) = path {
        let (status, body, next) = page(http, base, &p, token).await;
        assert_eq!(status, 200, "{p}: {body}");
        let rooms = body.as_array().expect("the body is the JSON array of rooms");
        assert!(rooms.len() <= limit, "{p}: {} rooms", rooms.len());
        if next.is_some() && full {
            assert_eq!(rooms.len(), limit, "only the last page is short: {p}");
        }
        ids.extend(rooms.iter().map(|r| r["roomId"].as_str().unwrap().to_owned()));
        pages += 1;
        assert!(pages < 10_000, "pages never end");
        path = next;
    }
    ids
}

fn room(i: usize) -> RoomInfo {
    RoomInfo {
        room_id: format!("r_lobby{i:05}"),
        game: if i.is_multiple_of(3) { "halli-galli" } else { "tally" }.into(),
        options: json!({}).into(),
        host: PlayerId::from(format!("u_host{i}")),
        seats: vec![],
        status: if i.is_multiple_of(5) { RoomStatus::Playing } else { RoomStatus::Waiting },
        game_pk: None,
        node: None,
        node_url: None,
        grace_sec: 60,
        min_players: 2,
        max_players: 4,
        // Ties on purpose (four rooms per millisecond): the id orders them.
        created_at: 1_800_000_000_000 + (i / 4) as i64,
        gone: vec![],
        kicked: vec![],
        removed: vec![],
        listed: Some(true),
    }
}

/// Newest first, then by id: the lobby's order.
fn in_lobby_order(mut rooms: Vec<RoomInfo>) -> Vec<String> {
    rooms.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.room_id.cmp(&b.room_id)));
    rooms.into_iter().map(|r| r.room_id).collect()
}

#[tokio::test]
async fn ten_thousand_open_rooms_are_walked_page_by_page_through_a_cluster_node() {
    let prefix = prefix("lobby");
    let store = RedisStore::connect(&redis_url(), &prefix).await.expect("Redis at REDIS_URL");
    let rooms: Vec<RoomInfo> = (0..10_050).map(room).collect();
    for chunk in rooms.chunks(500) {
        futures_util::future::try_join_all(chunk.iter().map(|i| store.put_room(i))).await.unwrap();
    }
    // Ended rooms leave the lobby; a room whose meta vanished is skipped (and unindexed).
    let mut ended = room(20_000);
    store.put_room(&ended).await.unwrap();
    ended.status = RoomStatus::Ended;
    store.put_room(&ended).await.unwrap();
    let vanished = room(20_001);
    store.put_room(&vanished).await.unwrap();
    redis::cmd("DEL")
        .arg(store.keys().meta(&vanished.room_id))
        .query_async::<()>(&mut store.connection())
        .await
        .unwrap();

    let node = Proc::spawn("lobby-1", Settings::cluster("lobby-1", &prefix, &redis_url()));
    let http = reqwest::Client::new();
    let (_, guest) = token(&http, &node, "guest").await;
    let all = rooms;

    // The plain call: the first 50, and a link to the rest.
    let (status, body, next) = page(&http, &node.base, "/api/rooms", &guest).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.as_array().unwrap().len(), 50);
    assert!(next.as_deref().is_some_and(|n| n.starts_with("/api/rooms?limit=50&cursor=")), "{next:?}");

    let walked = walk(&http, &node.base, "/api/rooms?limit=200", &guest, 200, true).await;
    assert_eq!(walked.len(), 10_050, "every open room once");
    assert_eq!(walked.iter().collect::<HashSet<_>>().len(), walked.len(), "no room twice");
    assert_eq!(walked, in_lobby_order(all.clone()), "newest first, then by id");

    // Filters keep their meaning across pages (and the Link carries them).
    let playing_hg: Vec<RoomInfo> =
        all.iter().filter(|r| r.game == "halli-galli" && r.status == RoomStatus::Playing).cloned().collect();
    let filtered =
        walk(&http, &node.base, "/api/rooms?game=halli-galli&status=playing&limit=100", &guest, 100, false).await;
    assert_eq!(filtered, in_lobby_order(playing_hg));

    // The vanished room's entry was removed on the way.
    let entries: usize = {
        let mut conn = store.connection();
        let mut n = 0;
        for b in 0..room_actor::lobby::BUCKETS {
            n += redis::cmd("ZCARD").arg(store.keys().lobby(b)).query_async::<usize>(&mut conn).await.unwrap();
        }
        n
    };
    assert_eq!(entries, 10_050, "only open rooms stay in the index");

    // Bad paging input is refused with its reason.
    for bad in ["limit=0", "limit=201", "limit=x", "cursor=nope", "cursor=0000000000001.r%20x"] {
        let (status, body, _) = page(&http, &node.base, &format!("/api/rooms?{bad}"), &guest).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("bad_query")), "{bad}: {body}");
    }
}

#[tokio::test]
async fn an_embedded_node_pages_its_lobby_the_same_way() {
    let server = start_server();
    let mut users = Vec::new();
    for i in 0..3 {
        users.push(server.guest(&format!("host{i}")).await);
    }
    let mut created = Vec::new();
    for i in 0..12 {
        let game = if i % 2 == 0 { "tally" } else { "halli-galli" };
        created.push(server.create_room(&users[i % 3], game, json!({}), 60).await);
    }
    let (status, all) = server.get("/api/rooms?limit=200", Some(&users[0].token)).await;
    assert_eq!(status, 200);
    let all: Vec<String> = all.as_array().unwrap().iter().map(|r| r["roomId"].as_str().unwrap().to_owned()).collect();
    // Tally rooms are unlisted by default: the players' lobby shows the Halli Galli ones.
    let players: HashSet<_> = created.iter().skip(1).step_by(2).collect();
    assert_eq!(all.iter().collect::<HashSet<_>>(), players);
    let walked =
        walk(&server.http, &format!("http://{}", server.addr), "/api/rooms?limit=4", &users[1].token, 4, true).await;
    assert_eq!(walked, all, "pages of 4 give the one-page order");
    let tally = walk(
        &server.http,
        &format!("http://{}", server.addr),
        "/api/rooms?game=tally&limit=4",
        &users[2].token,
        4,
        true,
    )
    .await;
    assert_eq!(tally.len(), 6);
    assert!(tally.iter().all(|id| created.iter().position(|c| c == id).is_some_and(|i| i % 2 == 0)));
    let (status, body) = server.get("/api/rooms?limit=500", Some(&users[0].token)).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_query")), "{body}");
}

/// `POST /api/rooms` `listed` (`PROTOCOL.md`, issue 59): an unlisted room is joinable by
/// id but not in the lobby unless `game=` names its game; player games are listed by
/// default, `tally` (load tests, the README's example) is not. The same in a cluster:
/// `unlisted_rooms_stay_out_of_a_cluster_lobby`.
#[tokio::test]
async fn unlisted_rooms_are_joinable_by_id_but_stay_out_of_the_lobby() {
    let server = start_server();
    let host = server.guest("host").await;
    let guest = server.guest("guest").await;
    let ids = |body: &Value| -> HashSet<String> {
        body.as_array().unwrap().iter().map(|r| r["roomId"].as_str().unwrap().to_owned()).collect()
    };
    let listed = server.create_room(&host, "halli-galli", json!({}), 60).await;
    let (status, body) =
        server.post("/api/rooms", Some(&host.token), json!({"game": "cockroach-poker", "listed": false})).await;
    assert_eq!(status, 200, "{body}");
    let hidden = body["roomId"].as_str().unwrap().to_owned();
    let tally = server.create_room(&host, "tally", json!({}), 60).await;
    let (status, body) = server.post("/api/rooms", Some(&host.token), json!({"game": "tally", "listed": true})).await;
    assert_eq!(status, 200, "{body}");
    let shown_tally = body["roomId"].as_str().unwrap().to_owned();

    let (_, lobby) = server.get("/api/rooms", Some(&guest.token)).await;
    assert_eq!(ids(&lobby), HashSet::from([listed.clone(), shown_tally.clone()]));
    let (_, waiting) = server.get("/api/rooms?status=waiting", Some(&guest.token)).await;
    assert_eq!(ids(&waiting), HashSet::from([listed.clone(), shown_tally.clone()]));
    // Naming the game shows its unlisted rooms too.
    let (_, cp) = server.get("/api/rooms?game=cockroach-poker", Some(&guest.token)).await;
    assert_eq!(ids(&cp), HashSet::from([hidden.clone()]));
    let (_, tallies) = server.get("/api/rooms?game=tally", Some(&guest.token)).await;
    assert_eq!(ids(&tallies), HashSet::from([tally.clone(), shown_tally]));

    // Joinable by id, and its info says it is unlisted.
    let (status, info) = server.get(&format!("/api/rooms/{hidden}"), Some(&guest.token)).await;
    assert_eq!((status, info["listed"].as_bool()), (200, Some(false)), "{info}");
    server.seat(&hidden, &guest).await;
    let (_, info) = server.get(&format!("/api/rooms/{listed}"), Some(&guest.token)).await;
    assert_eq!(info["listed"].as_bool(), Some(true), "{info}");
    let (_, info) = server.get(&format!("/api/rooms/{tally}"), Some(&guest.token)).await;
    assert_eq!(info["listed"].as_bool(), Some(false), "{info}");

    // A `listed` that is not a boolean is refused, and creates nothing.
    let (status, body) = server.post("/api/rooms", Some(&host.token), json!({"game": "tally", "listed": "no"})).await;
    assert_eq!(status, 400, "{body}");
    let (_, tallies) = server.get("/api/rooms?game=tally", Some(&guest.token)).await;
    assert_eq!(tallies.as_array().unwrap().len(), 2);
}
