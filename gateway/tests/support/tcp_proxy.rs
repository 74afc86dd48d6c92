//! A TCP proxy in front of a node's peer-link port, so a test can make the links through
//! it die without closing: what a partition between two nodes that both still reach
//! Redis, or a firewall that forgets a connection, looks like to them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct LinkProxy {
    /// Where to dial the node through the proxy (its `ROOMD__CLUSTER__PEER_ADVERTISE`).
    pub addr: String,
    /// One flag per connection taken so far: set, it passes nothing.
    holes: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    accepting: JoinHandle<()>,
}

impl LinkProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: String) -> LinkProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let holes: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let taken = holes.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let hole = Arc::new(AtomicBool::new(false));
                taken.lock().unwrap().push(hole.clone());
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, hole.clone()));
                tokio::spawn(pump(server_read, client_write, hole));
            }
        });
        LinkProxy { addr, holes, accepting }
    }

    /// From now on the connections open now pass nothing either way, and never close;
    /// connections made later pass as before. How many it holed.
    pub fn black_hole(&self) -> usize {
        let holes = self.holes.lock().unwrap();
        let mut holed = 0;
        for hole in holes.iter() {
            if !hole.swap(true, Ordering::Relaxed) {
                holed += 1;
            }
        }
        holed
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Copies `from` to `to` until `from` ends (then ends `to`), or, once `hole` is set,
/// swallows what comes and keeps both ends open.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, hole: Arc<AtomicBool>) {
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
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
