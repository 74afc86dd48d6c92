#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Whole games over real WebSockets against a real node: Halli Galli and Cockroach Poker
//! with three players and a spectator, played to their `result`, with every message each
//! client received checked for hidden cards, and the finished game rebuilt from the store.

mod support;

use engine::games::cockroach_poker::CockroachPoker;
use engine::games::halli_galli::HalliGalli;
use engine::{Game, ViewCtx};
use room_actor::rebuild;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use support::{assert_no_leaks, start_server, states_by_seq, without_now, Server, User, WsClient};

/// Three seated players and a spectator, all subscribed to a started room.
struct Table {
    server: Server,
    room: String,
    game_pk: String,
    users: Vec<User>,
    clients: Vec<WsClient>,
    spectator: WsClient,
}

impl Table {
    async fn open(server: Server, game: &str, options: Value) -> Table {
        let users = vec![server.guest("도윤").await, server.guest("서연").await, server.guest("하준").await];
        let spectator_user = server.guest("구경꾼").await;
        let (room, game_pk) = server.started_room(game, options, &users[0], &[&users[1], &users[2]]).await;
        let mut clients = Vec::new();
        for u in &users {
            let mut c = server.ws(u).await;
            let sync = c.sub(&room).await;
            assert!(sync["view"]["order"].is_array(), "players get the game view: {sync}");
            clients.push(c);
        }
        let mut spectator = server.ws(&spectator_user).await;
        spectator.sub(&room).await;
        Table { server, room, game_pk, users, clients, spectator }
    }

    fn idx(&self, id: &Value) -> usize {
        let id = id.as_str().unwrap_or_else(|| panic!("a user id, got {id}"));
        self.users.iter().position(|u| u.id == id).unwrap_or_else(|| panic!("{id} is not seated"))
    }

    fn id(&self, i: usize) -> &str {
        &self.users[i].id
    }

    /// Every client (the spectator too) has seen the room at `seq`; the latest view of
    /// player 0.
    async fn sync_all(&mut self, seq: u64) -> Value {
        for c in &mut self.clients {
            c.wait_seq(&self.room, seq).await;
        }
        self.spectator.wait_seq(&self.room, seq).await;
        self.clients[0].view(&self.room)
    }

    /// Player `i` acts and is acknowledged; everyone has seen the result.
    async fn act_ok(&mut self, i: usize, a: Value) -> Value {
        let cs = self.clients[i].cs();
        let seq = self.clients[i].act_ok(&self.room, cs, a).await;
        self.sync_all(seq).await
    }

    async fn act_rejected(&mut self, i: usize, a: Value, code: &str, reason: &str) {
        let before = self.server.entries(&self.game_pk).await;
        let cs = self.clients[i].cs();
        self.clients[i].act_rejected(&self.room, cs, a, code, reason).await;
        assert_eq!(self.server.entries(&self.game_pk).await, before, "a reject logs nothing");
    }

    /// A fresh `sync` for player `i` (subscribing again is how a client asks for one).
    async fn resync(&mut self, i: usize) -> Value {
        self.clients[i].sub(&self.room).await["view"].clone()
    }

    /// Every client received `result`; the result (the same for everyone).
    async fn results(&mut self) -> Value {
        let room = self.room.clone();
        let first = self.spectator.next_where(|m| m["t"] == "result" && m["room"] == room.as_str()).await;
        for c in &mut self.clients {
            let r = c.next_where(|m| m["t"] == "result" && m["room"] == room.as_str()).await;
            assert_eq!(r, first, "everyone gets the same result");
        }
        assert_eq!(first["gamePk"], self.game_pk.as_str());
        first["result"].clone()
    }

    /// No client ever received a card it may not see, at the state each message was
    /// sent in (rebuilt from the store per seq).
    async fn assert_no_hidden_cards<G: Game>(&self) {
        let stored = self.server.stored(&self.game_pk).await;
        let states = states_by_seq::<G>(&stored);
        let checked = assert_no_leaks::<G>(&states, &self.spectator.log, &self.room, None);
        assert!(checked > 10, "the spectator followed the game ({checked} messages)");
        for (u, c) in self.users.iter().zip(&self.clients) {
            let checked = assert_no_leaks::<G>(&states, &c.log, &self.room, Some(&u.pid()));
            assert!(checked > 10, "{} followed the game ({checked} messages)", u.id);
        }
    }

    /// The finished game rebuilds from seed + log to the stored final state and result,
    /// and to the very view each client got last.
    async fn assert_rebuilds<G: Game>(&self, result: &Value) {
        let stored = self.server.stored(&self.game_pk).await;
        let rebuilt = rebuild::rebuild::<G>(&stored, rebuild::From::Seed).expect("rebuild from the seed");
        let record = self.server.store.record(&self.game_pk).await.unwrap().expect("finished game recorded");
        let final_state: Value = serde_json::from_str(&record.final_state_json).unwrap();
        assert_eq!(serde_json::to_value(&rebuilt.state).unwrap(), final_state, "final state");
        assert_eq!(rebuilt.seq, record.final_seq);
        let rebuilt_result = serde_json::to_value(G::result(&rebuilt.state).expect("rebuilt game is over")).unwrap();
        assert_eq!(rebuilt_result, serde_json::from_str::<Value>(&record.result_json).unwrap());
        // Over the socket the summary shows seat names where the game wrote player ids.
        let mut shown = rebuilt_result.clone();
        let mut summary = rebuilt_result["summary"].as_str().unwrap().to_owned();
        for (player, name) in stored.start.players.iter().zip(&stored.start.names) {
            summary = summary.replace(player.as_str(), name);
        }
        shown["summary"] = json!(summary);
        assert_eq!(&shown, result, "the result sent over the socket");
        let viewers = self.users.iter().map(|u| Some(u.pid())).chain([None]);
        let clients = self.clients.iter().chain([&self.spectator]);
        for (viewer, c) in viewers.zip(clients) {
            let (seq, last) = c.latest.get(&self.room).cloned().expect("a view");
            assert_eq!(seq, record.final_seq, "the last update is the final state");
            let ctx = ViewCtx::at(last["now"].as_i64().unwrap());
            let view = serde_json::to_value(G::view(&rebuilt.state, viewer.as_ref(), &ctx)).unwrap();
            assert_eq!(without_now(view), without_now(last), "{viewer:?}'s last view");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Halli Galli
// ---------------------------------------------------------------------------------------

fn hg_options(lockout_ms: u32) -> Value {
    json!({
        "flipSeconds": 8,
        "flipGuardMs": 400,
        "wrongRingLockoutMs": lockout_ms,
        "timeLimitMin": null,
        "leftoverCards": "remove",
        "showRtt": false,
    })
}

/// Whether the public tops show exactly five of one fruit.
fn five(view: &Value) -> bool {
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    for p in view["players"].as_object().unwrap().values() {
        if let Some(top) = p["top"].as_object() {
            *sums.entry(top["fruit"].as_str().unwrap().to_owned()).or_default() += top["count"].as_u64().unwrap();
        }
    }
    sums.values().any(|s| *s == 5)
}

fn decks(view: &Value) -> BTreeMap<String, u64> {
    view["players"].as_object().unwrap().iter().map(|(k, p)| (k.clone(), p["deck"].as_u64().unwrap())).collect()
}

fn active(view: &Value, id: &str) -> bool {
    view["players"][id]["active"] == true
}

fn version(view: &Value) -> u64 {
    view["tableVersion"].as_u64().unwrap()
}

fn ring(version: u64) -> Value {
    json!({"type": "ring", "version": version})
}

fn flip() -> Value {
    json!({"type": "flip"})
}

/// A player other than `i` who is still in.
fn other_active(t: &Table, view: &Value, i: usize) -> usize {
    (1..3).map(|d| (i + d) % 3).find(|j| active(view, t.id(*j))).unwrap()
}

impl Table {
    async fn wait_playing(&mut self) -> Value {
        let room = self.room.clone();
        for c in &mut self.clients {
            c.wait_view(&room, |_, v| v["phase"] == "playing").await;
        }
        self.clients[0].view(&room)
    }

    /// The turn player flips; waits until everyone sees the table change (a flip in the
    /// guard time is reserved and made by the server a moment later).
    async fn hg_flip(&mut self) -> Value {
        let v = self.clients[0].view(&self.room);
        let before = version(&v);
        let t = self.idx(&v["turn"]);
        let cs = self.clients[t].cs();
        let answer = self.clients[t].act(&self.room, cs, flip()).await;
        assert_eq!(answer["t"], "ack", "the turn player may flip: {answer}");
        let room = self.room.clone();
        for c in &mut self.clients {
            c.wait_view(&room, |_, v| version(v) > before || v["phase"] == "ended").await;
        }
        let seq = self.clients[0].seq(&room);
        self.sync_all(seq).await
    }
}

/// Plays a whole 3-player Halli Galli game over the sockets: flips by the turn player,
/// a refused flip out of turn, a wrong ring (penalty), a stale ring (`late`, no
/// penalty), a correct ring (the table is collected), then two players ring wrongly on
/// purpose until they are out. Returns the table and the result.
async fn play_halli_galli(server: Server) -> (Table, Value) {
    let mut t = Table::open(server, "halli-galli", hg_options(0)).await;
    let v = t.wait_playing().await;
    let turn = t.idx(&v["turn"]);
    let not_turn = (turn + 1) % 3;
    t.act_rejected(not_turn, flip(), "not_your_turn", "내 차례가 아니에요").await;

    let (mut correct, mut wrong, mut stale) = (false, false, false);
    for _ in 0..60 {
        if correct && wrong && stale {
            break;
        }
        let v = t.clients[0].view(&t.room);
        assert_eq!(v["phase"], "playing", "the game is still on: {v}");
        let ver = version(&v);
        let turn = t.idx(&v["turn"]);
        if five(&v) && !correct {
            // A correct ring: the ringer takes every face-up card and flips next.
            let r = other_active(&t, &v, turn);
            let face_up: u64 =
                v["players"].as_object().unwrap().values().map(|p| p["faceUpCount"].as_u64().unwrap()).sum();
            let before = decks(&v);
            let after = t.act_ok(r, ring(ver)).await;
            assert_eq!(after["lastBell"]["player"], t.id(r));
            assert_eq!(after["lastBell"]["correct"], true);
            assert_eq!(decks(&after)[t.id(r)], before[t.id(r)] + face_up, "the ringer collects the table");
            assert!(after["players"]
                .as_object()
                .unwrap()
                .values()
                .all(|p| p["faceUpCount"] == 0 && p["top"].is_null()));
            assert_eq!(after["turn"], t.id(r));
            assert_eq!(version(&after), ver + 1);
            correct = true;
        } else if !five(&v) && !wrong {
            // A wrong ring: one card to each other player still in.
            let w = other_active(&t, &v, turn);
            let before = decks(&v);
            let others: Vec<usize> = (0..3).filter(|j| *j != w && active(&v, t.id(*j))).collect();
            let after = t.act_ok(w, ring(ver)).await;
            assert_eq!(after["lastBell"]["correct"], false);
            let now = decks(&after);
            assert_eq!(now[t.id(w)], before[t.id(w)] - others.len() as u64, "the wrong ringer pays");
            for j in others {
                assert_eq!(now[t.id(j)], before[t.id(j)] + 1, "each other player gets a card");
            }
            assert_eq!(version(&after), ver, "a wrong ring leaves the table as it is");
            wrong = true;
        } else if ver >= 1 && !stale {
            // A ring quoting an older table: late, and nothing changes.
            let s = other_active(&t, &v, turn);
            let before = decks(&v);
            t.act_rejected(s, ring(ver - 1), "late", "늦었어요").await;
            let fresh = t.resync(s).await;
            assert_eq!(decks(&fresh), before, "no penalty for a late ring");
            assert_eq!(version(&fresh), ver);
            stale = true;
        } else {
            t.hg_flip().await;
        }
    }
    assert!(correct && wrong && stale, "flip, correct, wrong and stale rings all happened");

    // The end: the two players with fewer cards ring wrongly until they are out.
    let v = t.clients[0].view(&t.room);
    let held = |v: &Value, i: usize| {
        let p = &v["players"][t.id(i)];
        p["deck"].as_u64().unwrap() + p["faceUpCount"].as_u64().unwrap()
    };
    let winner = (0..3).filter(|i| active(&v, t.id(*i))).max_by_key(|i| held(&v, *i)).unwrap();
    for _ in 0..200 {
        let v = t.clients[0].view(&t.room);
        if v["phase"] == "ended" {
            break;
        }
        let ver = version(&v);
        if five(&v) {
            t.act_ok(winner, ring(ver)).await;
            continue;
        }
        let loser = (0..3).find(|i| *i != winner && active(&v, t.id(*i))).expect("someone left to lose");
        let cs = t.clients[loser].cs();
        let answer = t.clients[loser].act(&t.room, cs, ring(ver)).await;
        match answer["t"].as_str() {
            Some("ack") => {
                t.sync_all(answer["seq"].as_u64().unwrap()).await;
            }
            // The server flipped for an idle turn player in between: ring again.
            _ => assert_eq!(answer["code"], "late", "{answer}"),
        }
    }
    let v = t.clients[0].view(&t.room);
    assert_eq!(v["phase"], "ended", "{v}");
    let result = t.results().await;
    assert_eq!(result["ranking"][0], json!([t.id(winner)]), "{result}");
    assert_eq!(v["eliminated"].as_array().unwrap().len(), 2);
    (t, result)
}

#[tokio::test]
async fn halli_galli_full_game_with_flips_correct_stale_and_wrong_rings() {
    let (t, _) = play_halli_galli(start_server()).await;
    assert_eq!(t.server.entries(&t.game_pk).await as u64, t.clients[0].seq(&t.room));
}

#[tokio::test]
async fn halli_galli_ring_during_lockout_is_refused_without_penalty() {
    let mut t = Table::open(start_server(), "halli-galli", hg_options(1000)).await;
    let v = t.wait_playing().await;
    let w = other_active(&t, &v, t.idx(&v["turn"]));
    let before = decks(&v);
    let after = t.act_ok(w, ring(version(&v))).await;
    assert_eq!(decks(&after)[t.id(w)], before[t.id(w)] - 2, "the wrong ring is penalised");
    assert_eq!(after["players"][t.id(w)]["locked"], true, "{after}");
    t.act_rejected(w, ring(version(&after)), "locked", "종이 잠겨 있어요").await;
    let fresh = t.resync(w).await;
    assert_eq!(decks(&fresh), decks(&after), "no penalty for a ring while locked");
}

#[tokio::test]
async fn halli_galli_nobody_receives_a_hidden_card() {
    let (t, _) = play_halli_galli(start_server()).await;
    t.assert_no_hidden_cards::<HalliGalli>().await;
}

#[tokio::test]
async fn halli_galli_finished_game_rebuilds_from_the_store() {
    let (t, result) = play_halli_galli(start_server()).await;
    t.assert_rebuilds::<HalliGalli>(&result).await;
}

// ---------------------------------------------------------------------------------------
// Cockroach Poker
// ---------------------------------------------------------------------------------------

fn hand(view: &Value) -> Vec<(u64, String)> {
    view["hand"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_u64().unwrap(), c["kind"].as_str().unwrap().to_owned()))
        .collect()
}

fn offer(card: u64, to: &str, claim: &str) -> Value {
    json!({"type": "offer", "cardId": card, "to": to, "claim": claim})
}

fn call(word: &str) -> Value {
    json!({"type": "call", "call": word})
}

/// Plays a whole 3-player Cockroach Poker game (lose at 3 of a kind): an offer, a peek,
/// refusals (offer out of turn, call by a non-holder, call after peek, pass to someone
/// who saw the card), a pass and a right call; then one player takes card after card
/// until they lose.
async fn play_cockroach_poker(server: Server) -> (Table, Value) {
    let mut t = Table::open(server, "cockroach-poker", json!({"loseCount": 3, "turnSeconds": 60})).await;
    let room = t.room.clone();
    let v = t.clients[0].view(&room);
    let s = t.idx(&v["starter"]);
    let (x, y) = ((s + 1) % 3, (s + 2) % 3);

    let (xcard, _) = hand(&t.clients[x].view(&room))[0].clone();
    t.act_rejected(x, offer(xcard, t.id(y), "rat"), "not_starter", "지금은 카드를 건넬 차례가 아니에요").await;

    let (card, kind) = hand(&t.clients[s].view(&room))[0].clone();
    let v = t.act_ok(s, offer(card, t.id(x), &kind)).await;
    assert_eq!(v["holder"], t.id(x));
    assert_eq!(v["claim"], kind.as_str());
    assert!(t.clients[x].view(&room)["card"].is_null(), "the receiver has not seen the card yet");
    assert_eq!(t.clients[s].view(&room)["card"]["id"], card, "the starter sees the card");

    t.act_rejected(y, call("true"), "not_holder", "카드를 받은 사람만 할 수 있어요").await;
    let v = t.act_ok(x, json!({"type": "peek"})).await;
    assert_eq!(v["seen"], json!([t.id(s), t.id(x)]));
    assert_eq!(t.clients[x].view(&room)["card"]["id"], card, "a peeker sees the card");
    assert!(t.clients[y].view(&room)["card"].is_null());
    assert!(t.spectator.view(&room)["card"].is_null());
    t.act_rejected(x, call("true"), "must_pass", "카드를 이미 봤으니 다른 사람에게 넘겨야 해요").await;
    let pass_back = json!({"type": "pass", "to": t.id(s), "claim": kind});
    t.act_rejected(x, pass_back, "already_seen", "이 카드를 이미 본 사람에게는 넘길 수 없어요").await;
    let v = t.act_ok(x, json!({"type": "pass", "to": t.id(y), "claim": kind})).await;
    assert_eq!(v["holder"], t.id(y));
    let v = t.act_ok(y, call("true")).await;
    assert_eq!(v["lastReveal"]["correct"], true, "{v}");
    assert_eq!(v["lastReveal"]["takenBy"], t.id(x), "a right call sends the card to the last passer");
    assert_eq!(v["lastReveal"]["card"], card);
    assert_eq!(v["fronts"][t.id(x)][&kind], 1);
    assert_eq!(v["starter"], t.id(x), "the taker starts the next round");

    // `x` takes card after card until three of a kind lie in front of them.
    for _ in 0..40 {
        let v = t.clients[0].view(&room);
        if !v["loser"].is_null() {
            break;
        }
        let st = t.idx(&v["starter"]);
        if st == x {
            // `x` offers the kind they already have most of, truthfully; a right call
            // sends it back to `x`.
            let front = &v["fronts"][t.id(x)];
            let (c, k) =
                hand(&t.clients[x].view(&room)).into_iter().max_by_key(|(_, k)| front[k].as_u64().unwrap()).unwrap();
            t.act_ok(x, offer(c, t.id(y), &k)).await;
            t.act_ok(y, call("true")).await;
        } else {
            // Someone else offers `x` a card truthfully; `x` calls it a lie and takes it.
            let (c, k) = hand(&t.clients[st].view(&room))[0].clone();
            t.act_ok(st, offer(c, t.id(x), &k)).await;
            t.act_ok(x, call("false")).await;
        }
    }
    let v = t.clients[0].view(&room);
    assert_eq!(v["loser"], t.id(x), "{v}");
    let result = t.results().await;
    assert_eq!(result["details"]["loser"], t.id(x));
    assert_eq!(result["ranking"].as_array().unwrap().last().unwrap(), &json!([t.id(x)]));
    (t, result)
}

#[tokio::test]
async fn cockroach_poker_full_game_with_offer_peek_pass_call_and_refusals() {
    let (t, _) = play_cockroach_poker(start_server()).await;
    assert_eq!(t.server.entries(&t.game_pk).await as u64, t.clients[0].seq(&t.room));
}

#[tokio::test]
async fn cockroach_poker_nobody_receives_a_hidden_card() {
    let (t, _) = play_cockroach_poker(start_server()).await;
    t.assert_no_hidden_cards::<CockroachPoker>().await;
    // The checker does see card ids in these messages: a player's first sync shows their
    // hand, which is hidden from a spectator.
    let stored = t.server.stored(&t.game_pk).await;
    let states = states_by_seq::<CockroachPoker>(&stored);
    let first = t.clients[0].log.iter().find(|m| m["t"] == "sync").unwrap();
    let state = &states[first["seq"].as_u64().unwrap() as usize];
    assert!(!engine::testing::find_leaks(first, &CockroachPoker::secrets_of(state, None)).is_empty());
    // A second, independent check for the spectator: no card id of any hand or of the
    // card in flight appears anywhere in what it received.
    let mut seq = 0u64;
    for msg in &t.spectator.log {
        if let Some(s) = msg["seq"].as_u64() {
            seq = s;
        }
        let state = &states[seq as usize];
        if state.loser.is_some() {
            continue;
        }
        let hidden: Vec<u32> = state.hands.values().flatten().copied().chain(state.round.card).collect();
        let text = msg.to_string();
        for key in ["\"id\":", "\"cardId\":", "\"card\":"] {
            for c in &hidden {
                assert!(
                    !text.contains(&format!("{key}{c},")) && !text.contains(&format!("{key}{c}}}")),
                    "card {c} in {text}"
                );
            }
        }
    }
}

#[tokio::test]
async fn cockroach_poker_finished_game_rebuilds_from_the_store() {
    let (t, result) = play_cockroach_poker(start_server()).await;
    t.assert_rebuilds::<CockroachPoker>(&result).await;
}
