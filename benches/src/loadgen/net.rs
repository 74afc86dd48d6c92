//! Talking to the servers: guest sessions and room calls over HTTP(S), player sockets
//! over WS(S), and the room setup of the ramp. `https://` URLs become `wss://` sockets;
//! [`Tls::insecure`] accepts any certificate (self-signed test proxies).

use super::{Config, GameKind, Target, PLAYERS};
use anyhow::{anyhow, bail, Context};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

/// Deadline for one HTTP call or one WebSocket handshake during the ramp.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A guest session.
#[derive(Clone, Debug)]
pub struct Session {
    pub user_id: String,
    pub token: String,
}

/// A connected, subscribed player of one room.
pub struct Player {
    pub ws: Ws,
    pub me: String,
    pub room: String,
    /// The host restarts the game when it ends.
    pub restart: Option<Restart>,
}

#[derive(Clone)]
pub struct Restart {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

/// How sockets and HTTP calls do TLS (only used for `https://` URLs).
#[derive(Clone)]
pub struct Tls {
    connector: Connector,
    insecure: bool,
}

impl Tls {
    /// Web PKI roots, or (`insecure`) any certificate at all.
    pub fn new(insecure: bool) -> anyhow::Result<Tls> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder =
            rustls::ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
        let config = if insecure {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCert(provider))).with_no_client_auth()
        } else {
            let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        Ok(Tls { connector: Connector::Rustls(Arc::new(config)), insecure })
    }

    /// The HTTP client for the ramp's calls.
    pub fn http(&self, pool: usize) -> anyhow::Result<reqwest::Client> {
        // Idle pooled connections are dropped well before the server's keep-alive (5 s in
        // actix-web) closes them, so a request is never sent on a connection being closed.
        Ok(reqwest::Client::builder()
            .use_rustls_tls()
            .danger_accept_invalid_certs(self.insecure)
            .pool_max_idle_per_host(pool.max(1))
            .pool_idle_timeout(Duration::from_secs(1))
            .build()?)
    }
}

/// `--insecure`: a verifier that accepts every certificate (signatures are still checked,
/// so the handshake itself is sound; only the identity is not).
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The socket URL for a base URL: `http://h/` → `ws://h/ws?token=…`, `https://` → `wss://`.
pub fn ws_url(base: &str, token: &str) -> anyhow::Result<String> {
    let (scheme, rest) = if let Some(rest) = base.strip_prefix("http://") {
        ("ws", rest)
    } else if let Some(rest) = base.strip_prefix("https://") {
        ("wss", rest)
    } else {
        bail!("url must start with http:// or https:// (got {base:?})")
    };
    Ok(format!("{scheme}://{}/ws?token={token}", rest.trim_end_matches('/')))
}

/// Setup calls answered `503 room_unavailable` (a room between owners, or still starting
/// on its owner) are tried this many times in all, as the protocol asks of a client.
const UNAVAILABLE_TRIES: u32 = 8;

/// A setup `POST`. A connection that failed before any response is tried once more; a
/// `503 room_unavailable` again after its `Retry-After` (250 ms when it names none, at
/// most 2 s), up to [`UNAVAILABLE_TRIES`] times, each retry said on stderr.
pub async fn post(http: &reqwest::Client, url: String, token: Option<&str>, body: Value) -> anyhow::Result<Value> {
    call(http, reqwest::Method::POST, url, token, Some(body)).await
}

/// A setup `GET`, tried as [`post`] is.
pub async fn get(http: &reqwest::Client, url: String, token: Option<&str>) -> anyhow::Result<Value> {
    call(http, reqwest::Method::GET, url, token, None).await
}

async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: Option<&str>,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let send = || {
        let mut req = http.request(method.clone(), &url);
        if let Some(body) = &body {
            req = req.json(body);
        }
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let res = match timeout(SETUP_TIMEOUT, send()).await.context("timed out")? {
            Ok(res) => res,
            // The connection failed before a response: send once more on a fresh one.
            Err(e) if e.is_connect() || e.is_request() => {
                timeout(SETUP_TIMEOUT, send()).await.context("timed out")?.with_context(|| format!("{method} {url}"))?
            }
            Err(e) => return Err(e).with_context(|| format!("{method} {url}")),
        };
        let status = res.status();
        let retry_after = res
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_millis(250), |s| Duration::from_secs(s).min(Duration::from_secs(2)));
        let v: Value = res.json().await.with_context(|| format!("{method} {url}: body"))?;
        if status.is_success() {
            return Ok(v);
        }
        let unavailable = status == reqwest::StatusCode::SERVICE_UNAVAILABLE
            && v.get("code").and_then(Value::as_str) == Some("room_unavailable");
        if !unavailable || tries >= UNAVAILABLE_TRIES {
            bail!("{method} {url}: {status} {v} (try {tries})");
        }
        eprintln!("loadgen: {method} {url} answered {status} room_unavailable; trying again in {retry_after:?}");
        tokio::time::sleep(retry_after).await;
    }
}

pub async fn session(http: &reqwest::Client, base: &str, name: String) -> anyhow::Result<Session> {
    let v = post(http, format!("{base}/api/session"), None, json!({ "name": name })).await?;
    let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| anyhow!("session: no {k}"));
    Ok(Session { user_id: field("userId")?, token: field("token")? })
}

/// Small socket buffers: tungstenite's default 128 KiB read buffer per socket would make
/// loadgen's memory (and page faults) the limit long before the server's.
pub fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(8 * 1024).write_buffer_size(0)
}

/// Opens a player socket (`ws://` or, through `tls`, `wss://`).
pub async fn connect(base: &str, token: &str, tls: &Tls) -> anyhow::Result<Ws> {
    let url = ws_url(base, token)?;
    let connector = if url.starts_with("wss://") { Some(tls.connector.clone()) } else { None };
    let (ws, _) = timeout(
        SETUP_TIMEOUT,
        tokio_tungstenite::connect_async_tls_with_config(url.as_str(), Some(ws_config()), true, connector),
    )
    .await
    .context("connect timed out")?
    .context("connect")?;
    Ok(ws)
}

/// The fields of a server message every client reads (the view is skipped).
#[derive(Deserialize)]
pub struct Envelope {
    pub t: String,
    pub seq: Option<u64>,
    pub cs: Option<u64>,
    pub code: Option<String>,
}

/// Connects, sends `sub` and waits for the `sync`.
async fn join(base: &str, token: &str, room: &str, tls: &Tls) -> anyhow::Result<Ws> {
    let mut ws = connect(base, token, tls).await?;
    ws.send(Message::text(json!({"t": "sub", "room": room}).to_string())).await?;
    await_sync(&mut ws, SETUP_TIMEOUT).await?;
    Ok(ws)
}

/// Reads up to the `sync` that answers a `sub`, within `within`; its text. An `error`
/// or `reject` before it means the `sub` was refused.
pub async fn await_sync(ws: &mut Ws, within: Duration) -> anyhow::Result<String> {
    let deadline = Instant::now() + within;
    loop {
        let msg = timeout(deadline.saturating_duration_since(Instant::now()), ws.next())
            .await
            .context("no sync")?
            .ok_or_else(|| anyhow!("closed before sync"))??;
        if let Message::Text(text) = msg {
            let env: Envelope = serde_json::from_str(text.as_str())?;
            match env.t.as_str() {
                "sync" => return Ok(text.as_str().to_owned()),
                "error" | "reject" => bail!("sub refused: {}", text.as_str()),
                _ => {}
            }
        }
    }
}

/// Sets up room `i` on `base`: four players connected and subscribed, game started.
pub async fn setup_room(
    cfg: &Config,
    http: &reqwest::Client,
    tls: &Tls,
    base: &str,
    i: usize,
) -> anyhow::Result<Vec<Player>> {
    if cfg.target == Target::Limit {
        let room = format!("L{i}");
        let mut players = Vec::with_capacity(PLAYERS);
        for k in 0..PLAYERS {
            let me = format!("u_{i}_{k}");
            let ws = join(base, &me, &room, tls).await?;
            players.push(Player { ws, me, room: room.clone(), restart: None });
        }
        return Ok(players);
    }
    // With several `--url`s the players of one room are spread over the nodes (player k
    // of room i on node i + k), so in a cluster most of a room's traffic crosses nodes;
    // `--whole-rooms` keeps them all on `base` (servers that are not one cluster).
    let node_of = |k: usize| {
        if cfg.whole_rooms {
            base
        } else {
            cfg.urls.get((i + k) % cfg.urls.len().max(1)).map_or(base, String::as_str)
        }
    };
    let mut sessions = Vec::with_capacity(PLAYERS);
    for k in 0..PLAYERS {
        sessions.push(session(http, node_of(k), format!("lg{i}-{k}")).await?);
    }
    let options = match cfg.game {
        GameKind::Tally => json!({"target": null}),
        GameKind::HalliGalli => json!({}),
        // Short games (three of a kind loses), so the host restarts often.
        GameKind::CockroachPoker => json!({"loseCount": 3, "turnSeconds": 15}),
    };
    let host = &sessions[0];
    // Unlisted: a load test's rooms never fill the players' lobby (they are joined by id).
    let body = json!({"game": cfg.game.id(), "options": options, "listed": false});
    let created = post(http, format!("{base}/api/rooms"), Some(&host.token), body).await?;
    let room = created.get("roomId").and_then(Value::as_str).ok_or_else(|| anyhow!("no roomId"))?.to_owned();
    for (k, s) in sessions.iter().enumerate().skip(1) {
        post(http, format!("{}/api/rooms/{room}/seats", node_of(k)), Some(&s.token), json!({})).await?;
    }
    // `--direct`: every player connects to the room's owner when room info names it (and
    // it is one of the `--url`s: the loadgen talks to no other address).
    let owner = if cfg.direct { owner_url(cfg, http, base, &room, &host.token).await? } else { None };
    let socket_of = |k: usize| owner.as_deref().unwrap_or_else(|| node_of(k));
    let mut players = Vec::with_capacity(PLAYERS);
    for (k, s) in sessions.iter().enumerate() {
        let ws = join(socket_of(k), &s.token, &room, tls).await?;
        let restart =
            (k == 0).then(|| Restart { http: http.clone(), base: socket_of(k).to_owned(), token: s.token.clone() });
        players.push(Player { ws, me: s.user_id.clone(), room: room.clone(), restart });
    }
    post(http, format!("{base}/api/rooms/{room}/start"), Some(&host.token), json!({})).await?;
    Ok(players)
}

/// The room's `nodeUrl` if it is one of `cfg.urls` (compared without a trailing `/`);
/// `None` when the owner names none or one the loadgen was not pointed at.
async fn owner_url(
    cfg: &Config,
    http: &reqwest::Client,
    base: &str,
    room: &str,
    token: &str,
) -> anyhow::Result<Option<String>> {
    let info = get(http, format!("{base}/api/rooms/{room}"), Some(token)).await?;
    Ok(known_url(cfg, info.get("nodeUrl").and_then(Value::as_str)))
}

fn known_url(cfg: &Config, url: Option<&str>) -> Option<String> {
    let url = url?.trim_end_matches('/');
    cfg.urls.iter().find(|u| u.trim_end_matches('/') == url).cloned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn direct_play_follows_only_an_owner_url_the_loadgen_was_pointed_at() {
        let cfg =
            Config { urls: vec!["http://127.0.0.1:8081".into(), "http://127.0.0.1:8082".into()], ..Config::default() };
        assert_eq!(known_url(&cfg, Some("http://127.0.0.1:8082/")).as_deref(), Some("http://127.0.0.1:8082"));
        assert_eq!(known_url(&cfg, Some("http://10.9.9.9:8082")), None, "not an address it was given");
        assert_eq!(known_url(&cfg, None), None, "the owner names no public URL");
    }

    #[test]
    fn https_urls_become_wss_sockets() {
        assert_eq!(ws_url("http://127.0.0.1:8080/", "t").unwrap(), "ws://127.0.0.1:8080/ws?token=t");
        assert_eq!(ws_url("https://rooms.example:443", "t").unwrap(), "wss://rooms.example:443/ws?token=t");
        assert!(ws_url("ftp://x", "t").is_err());
    }

    /// A server on a free loopback port answering each connection's request with the next
    /// of `answers` (status line, JSON body), then closing; how many it answered.
    async fn answering(answers: Vec<(&'static str, &'static str)>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/x", listener.local_addr().unwrap());
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            for (status, body) in answers.into_iter().cycle() {
                let Ok((mut sock, _)) = listener.accept().await else { return };
                let mut buf = vec![0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nretry-after: 0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = sock.write_all(reply.as_bytes()).await;
            }
        });
        (url, served)
    }

    const UNAVAILABLE: (&str, &str) =
        ("503 Service Unavailable", r#"{"code":"room_unavailable","reason":"잠시 후 다시 시도해 주세요"}"#);

    #[tokio::test]
    async fn a_setup_call_answered_room_unavailable_is_tried_again() {
        let (url, served) = answering(vec![UNAVAILABLE, UNAVAILABLE, ("200 OK", r#"{"ok":true}"#)]).await;
        let got = post(&reqwest::Client::new(), url, None, json!({})).await.unwrap();
        assert_eq!(got, json!({"ok": true}));
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_setup_call_gives_up_after_its_tries_and_other_errors_are_not_retried() {
        let (url, served) = answering(vec![UNAVAILABLE]).await;
        let err = post(&reqwest::Client::new(), url, None, json!({})).await.unwrap_err();
        assert!(format!("{err:#}").contains("(try 8)"), "{err:#}");
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 8);
        let (url, served) = answering(vec![("409 Conflict", r#"{"code":"room_full","reason":"x"}"#)]).await;
        let err = post(&reqwest::Client::new(), url, None, json!({})).await.unwrap_err();
        assert!(format!("{err:#}").contains("409"), "{err:#}");
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn tls_builds_with_and_without_verification() {
        assert!(Tls::new(false).unwrap().http(1).is_ok());
        assert!(Tls::new(true).unwrap().http(1).is_ok());
    }
}
