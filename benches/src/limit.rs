//! The reference "physical limit" server: the least a server can do to speak tally over
//! WebSocket. It accepts any `GET /ws?token=…`, creates a room on first `sub`, and answers
//! `act` with an `update` (`{"count","last"}`) to every socket of the room and an `ack` to
//! the sender, with no persistence, no validation beyond the JSON shape, no per-viewer
//! views and no actors. Its deliveries per CPU-second are the ceiling roomd's tally
//! fan-out is compared with (`run.sh`). Loadgen talks to it with `--limit`.

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

/// One room: its sequence, the tally and every subscribed socket.
#[derive(Default)]
struct Room {
    seq: u64,
    count: u64,
    last: Option<String>,
    subs: Vec<(u64, mpsc::UnboundedSender<Message>)>,
}

/// Rooms by id. A std mutex: it is held only for a few map operations and never across
/// an await, which is what roomd's own room mailbox gives it for free.
#[derive(Default)]
struct Rooms(Mutex<HashMap<String, Room>>);

#[derive(Deserialize)]
struct ClientMsg {
    t: String,
    room: Option<String>,
    cs: Option<u64>,
}

/// A pause for tests of the load generator: starting `after` the first `act` the server
/// receives, every `act` waits until `length` has passed (answers stop, then arrive all
/// at once), as a server stalled by a GC pause, a full disk or a stop-the-world would.
#[derive(Debug)]
pub struct Stall {
    pub after: Duration,
    pub length: Duration,
    /// Only this connection stalls (the first accepted is 1); `None`: every connection.
    pub connection: Option<u64>,
    first_act: OnceLock<tokio::time::Instant>,
}

impl Stall {
    pub fn new(after: Duration, length: Duration) -> Stall {
        Stall { after, length, connection: None, first_act: OnceLock::new() }
    }

    /// The same stall for connection `id` alone (the others answer at once).
    pub fn on_connection(self, id: u64) -> Stall {
        Stall { connection: Some(id), ..self }
    }

    /// When the stall ends (once the first `act` has come).
    pub fn ends_at(&self) -> Option<tokio::time::Instant> {
        self.first_act.get().map(|first| *first + self.after + self.length)
    }

    /// Waits out the stall if `now` falls in it and it is `id`'s.
    async fn wait(&self, id: u64) {
        let now = tokio::time::Instant::now();
        if self.connection.is_some_and(|only| only != id) {
            let _ = self.first_act.get_or_init(|| now);
            return;
        }
        let from = *self.first_act.get_or_init(|| now) + self.after;
        let until = from + self.length;
        if now >= from && now < until {
            tokio::time::sleep_until(until).await;
        }
    }
}

/// Serves until the listener fails; one task per connection.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    serve_with(listener, None).await
}

/// [`serve`] behind TLS (tests of loadgen's `https://` / `wss://` support).
pub async fn serve_tls(listener: TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    let rooms = Arc::new(Rooms::default());
    let mut next_id = 0u64;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let (acceptor, rooms) = (acceptor.clone(), rooms.clone());
        tokio::spawn(async move {
            if let Ok(tls) = acceptor.accept(stream).await {
                connection(tls, next_id, rooms, None).await;
            }
        });
    }
}

/// When the server saw each connection end (tests of the load generator's teardown).
#[derive(Debug, Default)]
pub struct Closes(Mutex<Vec<tokio::time::Instant>>);

impl Closes {
    /// The first connection end seen, if any.
    pub fn first(&self) -> Option<tokio::time::Instant> {
        self.0.lock().ok().and_then(|c| c.iter().min().copied())
    }

    pub fn count(&self) -> usize {
        self.0.lock().map_or(0, |c| c.len())
    }
}

/// [`serve`], stalling once as `stall` says.
pub async fn serve_with(listener: TcpListener, stall: Option<Stall>) -> std::io::Result<()> {
    serve_observed(listener, stall.map(Arc::new), Arc::default()).await
}

/// [`serve_with`], noting in `closes` when each connection ends.
pub async fn serve_observed(
    listener: TcpListener,
    stall: Option<Arc<Stall>>,
    closes: Arc<Closes>,
) -> std::io::Result<()> {
    let rooms = Arc::new(Rooms::default());
    let mut next_id = 0u64;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let (rooms, stall, closes) = (rooms.clone(), stall.clone(), closes.clone());
        tokio::spawn(async move {
            connection(stream, next_id, rooms, stall).await;
            if let Ok(mut c) = closes.0.lock() {
                c.push(tokio::time::Instant::now());
            }
        });
    }
}

fn view_json(room: &Room) -> String {
    json!({"count": room.count, "last": room.last}).to_string()
}

// The handshake callback's error type is tungstenite's (an HTTP response); not ours to shrink.
#[allow(clippy::result_large_err)]
async fn connection<S>(stream: S, id: u64, rooms: Arc<Rooms>, stall: Option<Arc<Stall>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut user = String::new();
    let callback = |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                    res: tokio_tungstenite::tungstenite::handshake::server::Response| {
        if let Some(q) = req.uri().query() {
            user = q.split('&').find_map(|kv| kv.strip_prefix("token=")).unwrap_or("anon").to_owned();
        }
        Ok(res)
    };
    let Ok(ws) =
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(crate::loadgen::ws_config())).await
    else {
        return;
    };
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            if sink.send(msg).await.is_err() {
                break;
            }
        }
    });
    let mut joined: Vec<String> = Vec::new();
    while let Some(Ok(msg)) = source.next().await {
        let Message::Text(text) = msg else { continue };
        let Ok(m) = serde_json::from_str::<ClientMsg>(text.as_str()) else {
            let _ = tx.send(Message::text(r#"{"t":"error","code":"bad_message","reason":"bad"}"#));
            continue;
        };
        let Some(room_id) = m.room else { continue };
        if let (Some(stall), "act") = (&stall, m.t.as_str()) {
            stall.wait(id).await;
        }
        let Ok(mut all) = rooms.0.lock() else { break };
        match m.t.as_str() {
            "sub" => {
                let room = all.entry(room_id.clone()).or_default();
                room.subs.push((id, tx.clone()));
                let sync = format!(
                    r#"{{"t":"sync","room":{},"seq":{},"view":{}}}"#,
                    json!(room_id),
                    room.seq,
                    view_json(room)
                );
                let _ = tx.send(Message::text(sync));
                joined.push(room_id);
            }
            "act" => {
                let cs = m.cs.unwrap_or(0);
                let Some(room) = all.get_mut(&room_id) else {
                    let reject =
                        json!({"t":"reject","room":room_id,"cs":cs,"code":"unknown_room","reason":"없는 방이에요"});
                    let _ = tx.send(Message::text(reject.to_string()));
                    continue;
                };
                room.seq += 1;
                room.count += 1;
                room.last = Some(user.clone());
                let update: Utf8Bytes = format!(
                    r#"{{"t":"update","room":{},"seq":{},"view":{},"events":[{{"type":"bumped"}}]}}"#,
                    json!(room_id),
                    room.seq,
                    view_json(room)
                )
                .into();
                for (_, sub) in &room.subs {
                    let _ = sub.send(Message::Text(update.clone()));
                }
                let ack = json!({"t":"ack","room":room_id,"cs":cs,"seq":room.seq});
                let _ = tx.send(Message::text(ack.to_string()));
            }
            "unsub" => {
                if let Some(room) = all.get_mut(&room_id) {
                    room.subs.retain(|(s, _)| *s != id);
                }
            }
            _ => {}
        }
    }
    if let Ok(mut all) = rooms.0.lock() {
        for room_id in joined {
            if let Some(room) = all.get_mut(&room_id) {
                room.subs.retain(|(s, _)| *s != id);
                if room.subs.is_empty() {
                    all.remove(&room_id);
                }
            }
        }
    }
    writer.abort();
}
