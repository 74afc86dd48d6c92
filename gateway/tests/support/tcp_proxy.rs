//! A TCP proxy in front of a node's peer-link port or its Redis, so a test can make the
//! connections through it die without closing: what a partition, a host gone behind a
//! stable address, or a firewall that forgets a connection looks like to both ends. Or a
//! relay that changes what passes it (`Proxy::rewriting`): what a hop on the link path
//! that is not to be trusted can do.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How much of what a client sends first a connection keeps, for [`Proxy::black_hole_where`].
const OPENING: usize = 4096;

/// One connection through the proxy.
struct Conn {
    /// Set: it passes nothing either way.
    hole: Arc<AtomicBool>,
    /// Set: a rewriting proxy rewrites what its client sends.
    tamper: Arc<AtomicBool>,
    /// The first bytes its client sent.
    opening: Arc<Mutex<Vec<u8>>>,
    /// The proxy's end of the connection upstream: the client address the upstream
    /// server sees (what Redis's `CLIENT KILL ADDR` names).
    upstream: SocketAddr,
}

/// Which new connections the proxy holes as soon as their client's first bytes satisfy it.
type Opening = Arc<Mutex<Option<Box<dyn Fn(&[u8]) -> bool + Send>>>>;

pub struct Proxy {
    /// Where to connect through the proxy (a node's `ROOMD__CLUSTER__PEER_ADVERTISE`, or
    /// the host and port of its `ROOMD__REDIS__URL`).
    pub addr: String,
    conns: Arc<Mutex<Vec<Conn>>>,
    /// How many times a rewriting proxy replaced its needle.
    pub rewritten: Arc<AtomicUsize>,
    /// See [`Proxy::black_hole_new_where`].
    hole_new: Opening,
    accepting: JoinHandle<()>,
}

/// What a rewriting proxy replaces, client to server, in the connections it was told to
/// tamper with: every `needle` (within one read) by `replacement`, of the same length.
#[derive(Clone)]
struct Rewrite {
    needle: Vec<u8>,
    replacement: Vec<u8>,
    count: Arc<AtomicUsize>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: String) -> Proxy {
        Proxy::launch(upstream, None).await
    }

    /// [`Proxy::start`], but once [`Proxy::tamper`] is called, every `needle` the client of
    /// a connection open then sends is replaced by `replacement` (the same length) on its
    /// way to `upstream`; connections made later pass unchanged.
    pub async fn rewriting(upstream: String, needle: &[u8], replacement: &[u8]) -> Proxy {
        assert_eq!(needle.len(), replacement.len(), "a rewrite keeps every length");
        let rewrite = Rewrite { needle: needle.to_vec(), replacement: replacement.to_vec(), count: Arc::default() };
        Proxy::launch(upstream, Some(rewrite)).await
    }

    async fn launch(upstream: String, rewrite: Option<Rewrite>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let conns: Arc<Mutex<Vec<Conn>>> = Arc::default();
        let rewritten = rewrite.as_ref().map(|r| r.count.clone()).unwrap_or_default();
        let hole_new: Opening = Arc::default();
        let (taken, holes) = (conns.clone(), hole_new.clone());
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let Ok(local) = server.local_addr() else { continue };
                let conn =
                    Conn { hole: Arc::default(), tamper: Arc::default(), opening: Arc::default(), upstream: local };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let opening = Some((conn.opening.clone(), holes.clone()));
                let rewrite = rewrite.clone().map(|r| (r, conn.tamper.clone()));
                tokio::spawn(pump(client_read, server_write, conn.hole.clone(), opening, rewrite));
                tokio::spawn(pump(server_read, client_write, conn.hole.clone(), None, None));
                taken.lock().unwrap().push(conn);
            }
        });
        Proxy { addr, conns, rewritten, hole_new, accepting }
    }

    /// From now on a connection whose client's first bytes satisfy `opened` is holed the
    /// moment they do, before those bytes pass: it opens, and what it asks is never
    /// answered. Open connections are left as they are.
    pub fn black_hole_new_where(&self, opened: impl Fn(&[u8]) -> bool + Send + 'static) {
        *self.hole_new.lock().unwrap() = Some(Box::new(opened));
    }

    /// New connections pass again (see [`Proxy::black_hole_new_where`]).
    pub fn pass_new(&self) {
        *self.hole_new.lock().unwrap() = None;
    }

    /// The upstream addresses (what the server sees as its clients' addresses) of the
    /// open connections, not holed, whose client's first bytes satisfy `opened`.
    pub fn upstream_where(&self, opened: impl Fn(&[u8]) -> bool) -> Vec<SocketAddr> {
        let conns = self.conns.lock().unwrap();
        conns
            .iter()
            .filter(|c| !c.hole.load(Ordering::Relaxed) && opened(&c.opening.lock().unwrap()))
            .map(|c| c.upstream)
            .collect()
    }

    /// From now on the connections open now pass nothing either way, and never close;
    /// connections made later pass as before. How many it holed.
    pub fn black_hole(&self) -> usize {
        self.black_hole_where(|_| true)
    }

    /// From now on a rewriting proxy rewrites what the clients of the connections open now
    /// send; how many connections that is.
    pub fn tamper(&self) -> usize {
        let conns = self.conns.lock().unwrap();
        conns.iter().filter(|conn| !conn.tamper.swap(true, Ordering::Relaxed)).count()
    }

    /// [`Proxy::black_hole`] for the open connections whose client's first bytes satisfy
    /// `opened`.
    pub fn black_hole_where(&self, opened: impl Fn(&[u8]) -> bool) -> usize {
        let conns = self.conns.lock().unwrap();
        let mut holed = 0;
        for conn in conns.iter() {
            if opened(&conn.opening.lock().unwrap()) && !conn.hole.swap(true, Ordering::Relaxed) {
                holed += 1;
            }
        }
        holed
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Copies `from` to `to` until `from` ends (then ends `to`), keeping the first bytes in
/// `opening` (and holing the connection when they satisfy the proxy's test for new
/// connections) and applying `rewrite`; once `hole` is set, swallows what comes and keeps
/// both ends open.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    hole: Arc<AtomicBool>,
    opening: Option<(Arc<Mutex<Vec<u8>>>, Opening)>,
    rewrite: Option<(Rewrite, Arc<AtomicBool>)>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        if hole.load(Ordering::Relaxed) {
            if n == 0 {
                // Nothing passes, not even the close: hold `to` open for good.
                std::future::pending::<()>().await;
            }
            continue;
        }
        if let Some((opening, hole_new)) = &opening {
            let mut opening = opening.lock().unwrap();
            let room = OPENING.saturating_sub(opening.len()).min(n);
            opening.extend_from_slice(&buf[..room]);
            if hole_new.lock().unwrap().as_ref().is_some_and(|opened| opened(&opening)) {
                hole.store(true, Ordering::Relaxed);
                continue;
            }
        }
        if let Some((r, _)) = rewrite.as_ref().filter(|(_, on)| on.load(Ordering::Relaxed)) {
            let mut at = 0;
            while let Some(found) = buf[at..n].windows(r.needle.len()).position(|w| w == r.needle.as_slice()) {
                buf[at + found..at + found + r.needle.len()].copy_from_slice(&r.replacement);
                r.count.fetch_add(1, Ordering::Relaxed);
                at += found + r.needle.len();
            }
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Whether a client's first bytes hold `needle` (a Redis command name, say).
pub fn holds(opening: &[u8], needle: &str) -> bool {
    opening.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}
