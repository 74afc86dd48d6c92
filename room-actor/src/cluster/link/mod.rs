//! Peer links: bus frames straight from one node to another over TCP, instead of through
//! Redis pub/sub (`ROOMD__CLUSTER__PEER_LISTEN`: on by default in cluster mode, `off`
//! sends every frame through Redis).
//!
//! Through Redis, a frame costs a `PUBLISH`, Redis's copy to the subscriber, and the
//! parsing of both replies on the nodes: about a third of what an action across nodes
//! costs, and two of its four hops. A link costs one write and one read. Redis stays
//! what it is for everything else: the log, leases, membership, and the bus for any node
//! without a link (an older roomd, a peer not dialable yet, a link that broke).
//!
//! - **Who may talk.** Every node of a cluster shares the token secret; a link's key is
//!   derived from it (never the secret itself). The dialer and the listener prove to each
//!   other that they hold it (HMAC-SHA256 over both node ids, a link id and a nonce from
//!   each side), so no process without it can feed a node frames or receive one (frames
//!   carry players' hidden views).
//! - **What passes.** The handshake also gives the link a session key of its own (derived
//!   from the link key over the same transcript: both ids, the link id, both nonces), and
//!   every frame after it, each way, carries an HMAC under that key over its direction,
//!   its implicit sequence number and its bytes (`link_wire.rs`). A relay on the path (an
//!   address advertised through something that forwards, a compromised hop) can still
//!   read the frames, but a frame or acknowledgement it changes, replays, drops or
//!   reorders fails its check: the reader ends the link (counted in
//!   `roomd_bad_frames_total{source="link"}`), and the frames go through Redis until a
//!   new link is up, as when any link breaks. (Before, a relay could swap one user id for
//!   another of the same length and the owner applied the actions as the wrong user.)
//!   Links are not encrypted: run them on the private network the nodes share, as a
//!   plain `redis://` is.
//! - **Who may knock.** At most [`MAX_HANDSHAKES`] connections to the peer port may be in
//!   their handshake at once, each for at most [`HANDSHAKE_TIMEOUT`]; more are closed at
//!   once. Refusals are counted (`roomd_bus_links_refused_total`) and logged once per
//!   10 s with their count (`summary.rs`), so a flood of connections holds a bounded
//!   number of sockets and writes a bounded number of lines.
//! - **Which address.** A node advertises the address it takes links on in the
//!   membership (`ROOMD__CLUSTER__PEER_ADVERTISE`); peers read it with the live nodes.
//! - **Order.** One outbox task per destination writes its frames, in order, on one
//!   link. When a destination moves from Redis to a new link, the last thing the task
//!   publishes through Redis is an [`Envelope::Link`](crate::cluster::bus::Envelope)
//!   mark naming the link; the receiver holds the link's frames until the mark has come
//!   out of its Redis subscription ([`Gate`]), so nothing sent on the link overtakes what
//!   was published before it. A link that breaks is dropped and its frame goes through
//!   Redis; a new link is tried a second later. When the sender gives a link up because
//!   a write failed or timed out (the receiver stopped reading), frames it wrote may
//!   still sit unread in the receiver's socket: it first publishes an
//!   [`Envelope::Unlink`](crate::cluster::bus::Envelope) naming the link, and the receiver
//!   drops whatever of that link it takes after the mark, so those frames are lost (as a
//!   pub/sub message is when a subscription drops), never delivered after what the sender
//!   published since. Dials run beside the outbox (frames go
//!   through Redis meanwhile), so an address that never answers delays nothing.
//!
//! - **Liveness.** A link can die without closing: a partition between two nodes that
//!   both still reach Redis, a firewall or NAT that forgets the connection, a receiver
//!   that stopped reading. Its writes still succeed (into the kernel's buffers) and its
//!   frames vanish, while the membership says both nodes are alive, so nothing moves the
//!   rooms: every action across it would be lost until TCP gave up, many minutes later.
//!   So the listener acknowledges what it reads: while frames come, at most every
//!   [`ACK_EVERY`], it writes back how many it has read. A sender whose frames written
//!   [`ACK_TIMEOUT`] ago are still unacknowledged gives the link up before its next
//!   frame, as it does when a write fails (the `Unlink` mark, then Redis), and dials a
//!   new one a second later. TCP keepalive closes an idle link whose peer is gone, on
//!   both sides.
//!
//! On the wire, after the handshake, a frame is a 4-byte little-endian length, the bus
//! frame itself (`frame.rs`: version, timestamp, envelopes) and its 32-byte tag; the
//! listener writes back only acknowledgements, each the count of frames it has read as a
//! little-endian u64 and its tag (`link_wire.rs`).
//!
//! **Versions.** A dialer says `RDL3` in its hello (frames tagged one by one). A listener
//! takes only `RDL3` and refuses any other hello with a line that quotes it, so a roomd
//! whose links speak another version (a later release that changes the link) is never
//! half understood: frames between the two go through Redis (both directions), and links
//! come back once both speak the same version.
//!
//! # Layout
//!
//! - this file: what a node needs to dial its peers ([`Links`], [`PeerBook`]) and the TCP
//!   keepalive both sides of a link set.
//! - `handshake`: the hello, both sides' proofs, the link key and each link's session key.
//! - `dialer`: dialling, and the [`Link`] that writes frames and watches their
//!   acknowledgements.
//! - `listener`: taking links on the peer port, reading their frames, acknowledging them.
//! - `gate`: the receiver's order rule, a link's mark and its cut ([`Gate`]).
//! - `link_wire.rs` (beside this folder; compiled by path in fuzz/): a frame's and an
//!   acknowledgement's bytes and tags.

mod dialer;
mod gate;
mod handshake;
mod listener;

pub use crate::cluster::link_wire::MAX_FRAME;
pub use dialer::{dial, encode_frame, Link, ACK_TIMEOUT, MAX_RETRY_AFTER, RETRY_AFTER, WRITE_TIMEOUT};
pub use gate::{Gate, MARK_WAIT};
pub use handshake::{handshake, LinkKey, HANDSHAKE_TIMEOUT};
pub use listener::{listen, Inbound, ACK_EVERY, MAX_HANDSHAKES};

use crate::metrics::RoomMetrics;
use socket2::{SockRef, TcpKeepalive};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpStream;
use tracing::debug;

/// TCP keepalive on links: an idle link whose peer went away without a word (its host
/// gone, a partition) is closed after about 30 s + 3 × 10 s.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_PROBES: u32 = 3;

/// Keepalive on a link's socket (see [`KEEPALIVE_IDLE`]); a socket that takes none works
/// on without it.
fn keep_alive(stream: &TcpStream) {
    let keepalive =
        TcpKeepalive::new().with_time(KEEPALIVE_IDLE).with_interval(KEEPALIVE_INTERVAL).with_retries(KEEPALIVE_PROBES);
    if let Err(e) = SockRef::from(stream).set_tcp_keepalive(&keepalive) {
        debug!(error = %e, "no TCP keepalive on a peer link");
    }
}

/// Where other nodes take links: node id → advertised address, from the membership.
#[derive(Clone, Default)]
pub struct PeerBook(Arc<RwLock<HashMap<String, String>>>);

impl PeerBook {
    pub fn addr(&self, node: &str) -> Option<String> {
        self.0.read().ok()?.get(node).cloned()
    }

    /// Replaces the book with the live nodes' addresses.
    pub fn set(&self, addrs: HashMap<String, String>) {
        if let Ok(mut book) = self.0.write() {
            *book = addrs;
        }
    }
}

/// What a node needs to dial its peers.
pub struct Links {
    pub key: Arc<LinkKey>,
    pub me: String,
    pub book: PeerBook,
    pub metrics: RoomMetrics,
}

#[cfg(test)]
mod tests;
