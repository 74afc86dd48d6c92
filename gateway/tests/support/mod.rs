//! Shared helpers for the end-to-end tests: a real roomd node on `127.0.0.1:0` in its own
//! actix system, HTTP helpers for the API, a WebSocket client that records every message
//! it receives, and the rebuild of a game's state at every `seq` from the store.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use engine::{Game, PlayerId};
use futures_util::{SinkExt, StreamExt};
use gateway::config::Settings;
use room_actor::log::StoredGame;
use room_actor::rebuild;
use room_actor::RoomStore;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub mod fault_play;
pub mod procs;
pub mod redis_cluster;
pub mod tcp_proxy;

/// How long any single wait for a message or condition may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// A fixed seed (32 hex characters) for scripted games.
pub const SEED: &str = "00000000000000000000000000c0ffee";

/// A running node.
#[derive(Clone)]
pub struct Server {
    pub addr: SocketAddr,
    pub store: Arc<dyn RoomStore>,
    /// The node's file store, when `store.kind = file`.
    pub file_store: Option<room_actor::FileStore>,
    pub http: reqwest::Client,
}

/// A guest user.
#[derive(Clone, Debug)]
pub struct User {
    pub id: String,
    pub token: String,
}

impl User {
    pub fn pid(&self) -> PlayerId {
        PlayerId::new(&self.id)
    }
}

/// The token secret of test servers (set, so no test node writes a data directory).
pub const TEST_SECRET: &str = "gateway-tests-secret-0123456789abcdef";

/// The settings every test server starts from: any free port, one worker, fixed seeds
/// allowed, its own token secret, generous rate limits (per socket and per address: every
/// test client comes from 127.0.0.1) and heartbeat timeout (test clients that are not
/// reading for a while must not be closed for silence).
pub fn test_settings() -> Settings {
    let mut s = Settings::load(None).expect("default settings load");
    s.auth.secret = Some(TEST_SECRET.into());
    s.http.addr_rate_per_min = 1_000_000;
    s.http.addr_burst = 1_000_000;
    s.http.addr_max_sockets = 1_000_000;
    s.rooms.max_waiting_seats_per_user = 1_000;
    s.http.bind = "127.0.0.1".into();
    s.http.port = 0;
    s.http.workers = 1;
    s.dev.allow_fixed_seed = true;
    s.ws.rate_per_s = 10_000;
    s.ws.burst = 10_000;
    s.ws.client_timeout_s = 600;
    s.rooms.max_open_per_user = 100;
    // Tests never write a data directory (the file store has tests of its own).
    s.store.kind = gateway::config::StoreKind::Memory;
    s
}

/// A node with the test settings.
pub fn start_server() -> Server {
    start_server_with(|_| {})
}

/// A node with the test settings changed by `tweak`.
pub fn start_server_with(tweak: impl FnOnce(&mut Settings)) -> Server {
    let mut settings = test_settings();
    tweak(&mut settings);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            let running = gateway::server::start(settings).expect("server starts");
            let state = &running.state;
            tx.send((running.addr, state.rooms.store(), state.rooms.file_store())).expect("test is waiting");
            let _ = running.server.await;
        });
    });
    let (addr, store, file_store) = rx.recv_timeout(Duration::from_secs(30)).expect("server reports its address");
    Server { addr, store, file_store, http: reqwest::Client::new() }
}

/// Sends `req` (with `token` as bearer, if any): `(status, JSON body or Null)`.
async fn answer(mut req: reqwest::RequestBuilder, token: Option<&str>) -> (u16, Value) {
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("http request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POST with an optional bearer token and a raw body; `(status, JSON body or Null)`.
    pub async fn post_raw(&self, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
        let req = self.http.post(self.url(path)).header("content-type", "application/json").body(body.to_owned());
        answer(req, token).await
    }

    pub async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
        self.post_raw(path, token, &body.to_string()).await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        answer(self.http.get(self.url(path)), token).await
    }

    /// `POST /api/session`.
    pub async fn guest(&self, name: &str) -> User {
        let (status, body) = self.post("/api/session", None, json!({ "name": name })).await;
        assert_eq!(status, 200, "session: {body}");
        User { id: body["userId"].as_str().unwrap().to_owned(), token: body["token"].as_str().unwrap().to_owned() }
    }

    /// `POST /api/rooms` with a fixed seed; the host takes the first seat.
    pub async fn create_room(&self, host: &User, game: &str, options: Value, grace_sec: u32) -> String {
        let body = json!({ "game": game, "options": options, "graceSec": grace_sec, "seed": SEED });
        let (status, body) = self.post("/api/rooms", Some(&host.token), body).await;
        assert_eq!(status, 200, "create room: {body}");
        body["roomId"].as_str().unwrap().to_owned()
    }

    pub async fn seat(&self, room: &str, user: &User) {
        let (status, body) = self.post(&format!("/api/rooms/{room}/seats"), Some(&user.token), json!({})).await;
        assert_eq!(status, 200, "seat: {body}");
    }

    pub async fn add_bot(&self, room: &str, host: &User) {
        let (status, body) =
            self.post(&format!("/api/rooms/{room}/seats"), Some(&host.token), json!({ "bot": true })).await;
        assert_eq!(status, 200, "bot: {body}");
    }

    /// `POST /api/rooms/{room}/start`: the game's `gamePk`.
    pub async fn start(&self, room: &str, host: &User) -> String {
        let (status, body) = self.post(&format!("/api/rooms/{room}/start"), Some(&host.token), json!({})).await;
        assert_eq!(status, 200, "start: {body}");
        body["gamePk"].as_str().unwrap().to_owned()
    }

    /// A room with `host` and `others` seated, started: `(roomId, gamePk)`.
    pub async fn started_room(&self, game: &str, options: Value, host: &User, others: &[&User]) -> (String, String) {
        let room = self.create_room(host, game, options, 60).await;
        for u in others {
            self.seat(&room, u).await;
        }
        let game_pk = self.start(&room, host).await;
        (room, game_pk)
    }

    pub async fn ws(&self, user: &User) -> WsClient {
        WsClient::connect(self.addr, &user.token).await.expect("websocket upgrade")
    }

    /// Everything stored for a game.
    pub async fn stored(&self, game_pk: &str) -> StoredGame {
        self.store.load(game_pk).await.expect("store answers").expect("game is stored")
    }

    /// Number of applied entries in a game's log.
    pub async fn entries(&self, game_pk: &str) -> usize {
        self.stored(game_pk).await.entries.len()
    }
}

type Stream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A WebSocket client that records every message it receives.
pub struct WsClient {
    stream: Stream,
    /// Every JSON message received, in order.
    pub log: Vec<Value>,
    /// The close frame, once the server closed the socket.
    pub closed: Option<Option<CloseFrame>>,
    /// Latest `(seq, view)` per room from `sync` and `update`.
    pub latest: HashMap<String, (u64, Value)>,
    /// Messages received but not yet taken by a `next*` call.
    unread: std::collections::VecDeque<Value>,
    /// The last `cs` handed out by [`WsClient::cs`].
    last_cs: u64,
}

impl WsClient {
    pub async fn connect(addr: SocketAddr, token: &str) -> Result<WsClient, tokio_tungstenite::tungstenite::Error> {
        let (stream, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws?token={token}")).await?;
        Ok(WsClient {
            stream,
            log: Vec::new(),
            closed: None,
            latest: HashMap::new(),
            unread: Default::default(),
            last_cs: 0,
        })
    }

    /// A fresh client sequence number.
    pub fn cs(&mut self) -> u64 {
        self.last_cs += 1;
        self.last_cs
    }

    pub async fn send(&mut self, msg: Value) {
        self.send_text(msg.to_string()).await;
    }

    pub async fn send_text(&mut self, text: String) {
        self.stream.send(Message::text(text)).await.expect("send on websocket");
    }

    pub async fn sub(&mut self, room: &str) -> Value {
        self.send(json!({"t": "sub", "room": room})).await;
        self.next_where(|m| m["t"] == "sync" && m["room"] == room).await
    }

    /// Sends `act` and waits for its answer (`ack`, `reject` or `error` with this `cs`).
    pub async fn act(&mut self, room: &str, cs: u64, a: Value) -> Value {
        self.send(json!({"t": "act", "room": room, "cs": cs, "a": a})).await;
        self.next_where(|m| {
            matches!(m["t"].as_str(), Some("ack" | "reject" | "error")) && m["cs"] == cs && m["room"] == room
        })
        .await
    }

    /// Like [`act`], asserting an `ack`; its `seq`.
    pub async fn act_ok(&mut self, room: &str, cs: u64, a: Value) -> u64 {
        let answer = self.act(room, cs, a.clone()).await;
        assert_eq!(answer["t"], "ack", "{a} should be applied: {answer}");
        answer["seq"].as_u64().unwrap()
    }

    /// Like [`act`], asserting a `reject` with `code` and `reason`.
    pub async fn act_rejected(&mut self, room: &str, cs: u64, a: Value, code: &str, reason: &str) {
        let answer = self.act(room, cs, a.clone()).await;
        assert_eq!(answer["t"], "reject", "{a} should be refused: {answer}");
        assert_eq!((answer["code"].as_str(), answer["reason"].as_str()), (Some(code), Some(reason)), "{answer}");
    }

    /// One frame from the socket (recording it), `None` on close or after `deadline`.
    async fn read(&mut self, deadline: Instant) -> Option<Value> {
        if self.closed.is_some() {
            return None;
        }
        loop {
            let frame = tokio::time::timeout_at(deadline, self.stream.next()).await.ok()?;
            match frame {
                Some(Ok(Message::Text(text))) => {
                    let v: Value = serde_json::from_str(text.as_str()).expect("server sends JSON");
                    if let (Some("sync" | "update"), Some(room), Some(seq)) =
                        (v["t"].as_str(), v["room"].as_str(), v["seq"].as_u64())
                    {
                        self.latest.insert(room.to_owned(), (seq, v["view"].clone()));
                    }
                    self.log.push(v.clone());
                    return Some(v);
                }
                Some(Ok(Message::Close(frame))) => {
                    self.closed = Some(frame);
                    return None;
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => {
                    self.closed.get_or_insert(None);
                    return None;
                }
            }
        }
    }

    /// The next unread message matching `pred` (others stay recorded in `log`); panics
    /// after [`WAIT`].
    pub async fn next_where(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        while let Some(m) = self.unread.pop_front() {
            if pred(&m) {
                return m;
            }
        }
        loop {
            match self.read(deadline).await {
                Some(m) if pred(&m) => return m,
                Some(_) => {}
                None => panic!("no matching message (closed: {:?}); last received: {:?}", self.closed, self.log.last()),
            }
        }
    }

    /// The next message of type `t`.
    pub async fn next_of(&mut self, t: &str) -> Value {
        self.next_where(|m| m["t"] == t).await
    }

    /// Any next message, or `None` if the socket closed or nothing came within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Value> {
        if let Some(m) = self.unread.pop_front() {
            return Some(m);
        }
        self.read(Instant::now() + wait).await
    }

    /// Reads until the server closes the socket; the close code.
    pub async fn close_code(&mut self) -> Option<u16> {
        let deadline = Instant::now() + WAIT;
        while self.closed.is_none() {
            if self.read(deadline).await.is_none() && self.closed.is_none() {
                panic!("socket not closed in time");
            }
        }
        self.closed.clone().flatten().map(|f| u16::from(f.code))
    }

    /// Reads until this client's view of `room` is at `seq` or later; the view.
    pub async fn wait_seq(&mut self, room: &str, seq: u64) -> Value {
        self.wait_view(room, |s, _| s >= seq).await
    }

    /// Reads until this client's latest view of `room` satisfies `pred(seq, view)`.
    pub async fn wait_view(&mut self, room: &str, pred: impl Fn(u64, &Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some((seq, view)) = self.latest.get(room) {
                if pred(*seq, view) {
                    return view.clone();
                }
            }
            if let Some(m) = self.read(deadline).await {
                self.unread.push_back(m);
            } else {
                panic!("view of {room} never matched; latest: {:?}", self.latest.get(room));
            }
        }
    }

    /// Latest view of `room`.
    pub fn view(&self, room: &str) -> Value {
        self.latest.get(room).map(|(_, v)| v.clone()).expect("a view of this room")
    }

    pub fn seq(&self, room: &str) -> u64 {
        self.latest.get(room).map(|(s, _)| *s).expect("a view of this room")
    }

    /// Sends one raw frame (e.g. a fragment of a message).
    pub async fn send_frame(&mut self, frame: tokio_tungstenite::tungstenite::protocol::frame::Frame) {
        self.stream.send(Message::Frame(frame)).await.expect("send frame on websocket");
    }

    /// Drops the connection without a close handshake.
    pub fn drop_connection(self) {
        drop(self.stream);
    }
}

/// The state of a game after each `seq` (index 0: right after `setup`), rebuilt from the
/// store the way replays do: setup from the seed, then every logged entry.
pub fn states_by_seq<G: Game>(stored: &StoredGame) -> Vec<G::State> {
    let (mut state, mut rng) = rebuild::initial::<G>(stored).expect("setup from the stored start entry");
    let mut out = vec![state.clone()];
    for (i, entry) in stored.entries.iter().enumerate() {
        assert_eq!(entry.seq, i as u64 + 1, "entries are contiguous");
        state = rebuild::apply_entry::<G>(&state, &mut rng, entry).expect("entry applies").state;
        out.push(state.clone());
    }
    out
}

/// Checks every message a client received in `room` against the secrets of the state
/// it was sent in: `sync`, `update` and `ack` by their `seq`, everything else by the
/// latest `seq` seen before it. `viewer` is `None` for a spectator.
pub fn assert_no_leaks<G: Game>(states: &[G::State], log: &[Value], room: &str, viewer: Option<&PlayerId>) -> usize {
    let mut seq = 0u64;
    let mut checked = 0;
    for msg in log {
        if msg["room"].as_str().is_some_and(|r| r != room) {
            continue;
        }
        if let Some(s) = msg["seq"].as_u64() {
            seq = s;
        }
        let state = states.get(seq as usize).unwrap_or_else(|| panic!("message at unknown seq {seq}: {msg}"));
        let secrets = G::secrets_of(state, viewer);
        let leaks = engine::testing::find_leaks(msg, &secrets);
        assert!(leaks.is_empty(), "{viewer:?} received hidden cards at seq {seq}: {leaks:?} in {msg}");
        checked += 1;
    }
    checked
}

/// A view without the fields that depend on when and for whom over which connection it
/// was built rather than on the game state: `now`, and halli-galli's `slowNotice` (from
/// the viewer's measured RTT, which a test client that is busy elsewhere inflates).
pub fn without_now(mut view: Value) -> Value {
    if let Some(obj) = view.as_object_mut() {
        obj.remove("now");
        obj.remove("slowNotice");
    }
    view
}

/// A halli-galli view shows exactly five of some fruit on the face-up tops (ringing is
/// right).
pub fn hg_five(view: &Value) -> bool {
    let mut sums: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for p in view["players"].as_object().unwrap().values() {
        if let Some(top) = p["top"].as_object() {
            *sums.entry(top["fruit"].as_str().unwrap().to_owned()).or_default() += top["count"].as_u64().unwrap();
        }
    }
    sums.values().any(|s| *s == 5)
}
