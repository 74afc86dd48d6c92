//! The soak's sockets and HTTP calls, every one bounded: subscribe (up to the `sync`),
//! drop without a close frame (RST or FIN), close gracefully, leave a seat.

use crate::loadgen::{self, Ws};
use anyhow::{bail, Context};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

/// One HTTP call (request and body) or one WebSocket handshake up to `sync`.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// One frame written (and flushed) to a socket.
pub(super) const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// A graceful close: our close frame out, the server's back.
pub(super) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects, sends `sub` and waits for the `sync`; returns the socket and the sync's text.
pub(super) async fn connect_sub(base: &str, token: &str, room: &str) -> anyhow::Result<(Ws, String)> {
    let url = loadgen::ws_url(base, token)?;
    let (mut ws, _) = timeout(
        CALL_TIMEOUT,
        tokio_tungstenite::connect_async_with_config(url.as_str(), Some(loadgen::ws_config()), true),
    )
    .await
    .context("connect timed out")?
    .context("connect")?;
    timeout(SEND_TIMEOUT, ws.send(Message::text(json!({"t": "sub", "room": room}).to_string())))
        .await
        .context("sub: send timed out")??;
    let sync = loadgen::net::await_sync(&mut ws, CALL_TIMEOUT).await?;
    Ok((ws, sync))
}

/// Closes the TCP connection without a close frame: a reset (SO_LINGER 0) or a plain FIN.
pub(super) fn drop_abruptly(ws: Ws, rst: bool) {
    if rst {
        if let MaybeTlsStream::Plain(tcp) = ws.get_ref() {
            let _ = tcp.set_zero_linger();
        }
    }
    drop(ws);
}

/// A close frame out, then reads until the server's close (or the socket's end).
pub(super) async fn close_gracefully(ws: &mut Ws) -> anyhow::Result<()> {
    timeout(CLOSE_TIMEOUT, ws.close(None)).await.context("close: send timed out")??;
    let deadline = Instant::now() + CLOSE_TIMEOUT;
    loop {
        match timeout(deadline.saturating_duration_since(Instant::now()), ws.next()).await {
            Err(_) => bail!("close: no answer"),
            Ok(None) | Ok(Some(Ok(Message::Close(_)))) => return Ok(()),
            // After our close frame the stream ends with this error (or None).
            Ok(Some(Err(tokio_tungstenite::tungstenite::Error::ConnectionClosed))) => return Ok(()),
            Ok(Some(Err(e))) => bail!("close: {e}"),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// `DELETE /api/rooms/{room}/seats/me`; 409 (the game is over already) is fine too.
pub(super) async fn leave_seat(http: &reqwest::Client, base: &str, token: &str, room: &str) -> anyhow::Result<()> {
    let url = format!("{base}/api/rooms/{room}/seats/me");
    timeout(CALL_TIMEOUT, async {
        let res = http.delete(&url).bearer_auth(token).send().await?;
        let status = res.status();
        let body = res.text().await?;
        if !status.is_success() && status != reqwest::StatusCode::CONFLICT {
            bail!("DELETE {url}: {status} {body:.200}");
        }
        anyhow::Ok(())
    })
    .await
    .context("leave: timed out")?
}

pub(super) async fn call(
    http: &reqwest::Client,
    url: String,
    token: Option<&str>,
    body: Value,
) -> anyhow::Result<Value> {
    timeout(CALL_TIMEOUT, loadgen::post(http, url, token, body)).await.context("HTTP call timed out")?
}
