//! Peer links: bus frames straight from one node to another over TCP, instead of through
//! Redis pub/sub (`ROOMD__CLUSTER__PEER_LISTEN`, off by default).
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
//! takes only `RDL3`: it refuses an older roomd's `RDL2` (acknowledgements, untagged
//! frames) or `RDL1` (neither) with a line saying so, since taking one would take frames
//! anyone on the path could change. An older listener refuses an `RDL3` hello the same
//! way. So during a rolling upgrade, frames between an upgraded node and an older one go
//! through Redis (both directions), and links come back as the nodes are upgraded.

use crate::cluster::bus::{self, Delivered, Envelope, FrameSource};
use crate::cluster::frame;
use crate::cluster::link_wire::{self, Check, Direction, FrameReader, Seal, SessionKey, ACK};
use crate::error::StoreError;
use crate::metrics::RoomMetrics;
use crate::summary::{Summarised, SUMMARY_EVERY};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use socket2::{SockRef, TcpKeepalive};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, Semaphore};
use tracing::{debug, warn};

pub use crate::cluster::link_wire::MAX_FRAME;

/// A dialer's hello: links whose frames and acknowledgements are tagged one by one.
const MAGIC: &[u8; 4] = b"RDL3";
/// The hellos of older roomds (`RDL2`: acknowledgements, frames untagged; `RDL1`: neither),
/// refused with a line that names them.
const OLDER: [&[u8; 4]; 2] = [b"RDL2", b"RDL1"];
const NONCE: usize = 16;
const TAG: usize = 32;
/// How long a dial, or the handshake on either side, may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this many connections to the peer port are in their handshake at once; more
/// are closed as they come. Peers need few: each other node dials one link to this one
/// and redials at most once a second, so even a cluster of dozens of nodes restarting at
/// once stays well below it. Anyone who reaches the port can open connections, and each
/// holds a socket and a task until its handshake ends (at most [`HANDSHAKE_TIMEOUT`]), so
/// this bounds what unauthenticated connections hold (the probe of issue 55 took a node
/// from 25 to 3,429 fds with idle connects). A flood that keeps every slot busy delays
/// links, never frames: those go through Redis meanwhile.
pub const MAX_HANDSHAKES: usize = 64;
/// A write that takes longer drops the link (its frame goes through Redis).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a destination waits before dialling again after a link broke or a first dial
/// failed (doubling with each failed dial in a row, to [`MAX_RETRY_AFTER`]).
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest between two dials of a destination whose dials keep failing.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// How long a link's frames wait for its mark before they are delivered anyway (the mark
/// was lost with a Redis subscription that dropped).
pub const MARK_WAIT: Duration = Duration::from_secs(1);
/// A listener acknowledges the frames it has read at most this often, and this long after
/// the first frame it has not yet acknowledged (never while no frames come).
pub const ACK_EVERY: Duration = Duration::from_millis(250);
/// A sender gives its link up when frames it wrote this long ago are not acknowledged
/// (the link died without closing): well above [`ACK_EVERY`] and a busy node's pauses,
/// below the 4 s after which a client resends an action it got no answer to.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(3);
/// Frames written within this long of one another share one stamp in a sender's record
/// of what is unacknowledged (so the record stays small: at most about
/// [`ACK_TIMEOUT`] / this, before the link is given up).
const STAMP_EVERY: Duration = Duration::from_millis(50);
/// TCP keepalive on links: an idle link whose peer went away without a word (its host
/// gone, a partition) is closed after about 30 s + 3 × 10 s.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_PROBES: u32 = 3;

/// Connections to the peer port refused (anyone who reaches it can make them).
static REFUSED: Summarised = Summarised::new(|count, last| {
    if count == 1 {
        warn!(refusal = last, "peer link refused");
    } else {
        warn!(count, last, "peer link refused {count} times in the last {SUMMARY_EVERY:?}");
    }
});

/// Links ended because a frame failed its check (a relay on the path can do this to
/// every link it carries, as often as they are redialled).
static FAILED_CHECK: Summarised = Summarised::new(|count, last| {
    if count == 1 {
        warn!(
            link = last,
            "peer link closed: a frame failed its check; frames go through Redis until a new link is up"
        );
    } else {
        warn!(count, last, "peer links closed {count} times in the last {SUMMARY_EVERY:?}: a frame failed its check");
    }
});

/// The listener's `accept` failing (out of file descriptors, say), retried every 50 ms.
static NOT_ACCEPTED: Summarised = Summarised::new(|count, last| {
    if count == 1 {
        warn!(error = last, "peer link not accepted");
    } else {
        warn!(count, last, "peer link not accepted {count} times in the last {SUMMARY_EVERY:?}");
    }
});

/// The key links are authenticated with, derived from the token secret.
pub struct LinkKey(hmac::Key);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

/// What a handshake HMAC is for: the proof of one side, or the link's session key.
#[derive(Clone, Copy)]
enum Side {
    Listener = 1,
    Dialer = 2,
    Session = 3,
}

impl LinkKey {
    /// A key of its own for links: a link's tag is never a token's signature.
    pub fn from_secret(secret: &str) -> LinkKey {
        let root = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
        let derived = hmac::sign(&root, b"roomd peer link key v1");
        LinkKey(hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()))
    }

    /// What a tag covers: what it is for, the dialer's whole hello (its version, both ids,
    /// the link id, its nonce) and the listener's nonce.
    fn transcript(side: Side, hello: &Hello, listener_nonce: &[u8; NONCE]) -> Vec<u8> {
        let mut t = vec![side as u8];
        t.extend_from_slice(&hello.encode());
        t.extend_from_slice(listener_nonce);
        t
    }

    fn tag(&self, side: Side, hello: &Hello, listener_nonce: &[u8; NONCE]) -> hmac::Tag {
        hmac::sign(&self.0, &Self::transcript(side, hello, listener_nonce))
    }

    fn verify(&self, side: Side, hello: &Hello, listener_nonce: &[u8; NONCE], tag: &[u8]) -> bool {
        hmac::verify(&self.0, &Self::transcript(side, hello, listener_nonce), tag).is_ok()
    }

    /// The link's session key: an HMAC under the link key over the transcript, so it is
    /// new for every link (both nonces) and known only to the two nodes (the link key);
    /// derived as the proofs are, with a label of its own, never sent.
    fn session(&self, hello: &Hello, listener_nonce: &[u8; NONCE]) -> SessionKey {
        SessionKey::new(self.tag(Side::Session, hello, listener_nonce).as_ref())
    }
}

/// What a dialer says first.
struct Hello {
    from: String,
    to: String,
    link: u64,
    nonce: [u8; NONCE],
}

impl Hello {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.from.len() + self.to.len());
        out.extend_from_slice(MAGIC);
        for id in [&self.from, &self.to] {
            out.push(id.len() as u8);
            out.extend_from_slice(id.as_bytes());
        }
        out.extend_from_slice(&self.link.to_le_bytes());
        out.extend_from_slice(&self.nonce);
        out
    }

    async fn read(stream: &mut TcpStream) -> io::Result<Hello> {
        let mut magic = [0u8; 4];
        stream.read_exact(&mut magic).await?;
        if &magic != MAGIC {
            return Err(refused(&if OLDER.contains(&&magic) {
                format!(
                    "a {} hello: an older roomd, whose links carry frames without tags; \
                     frames between it and this node go through Redis until it is upgraded",
                    String::from_utf8_lossy(&magic)
                )
            } else {
                "not a roomd peer link (or a newer version of one)".to_owned()
            }));
        }
        let from = read_id(stream).await?;
        let to = read_id(stream).await?;
        let mut link = [0u8; 8];
        stream.read_exact(&mut link).await?;
        let mut nonce = [0u8; NONCE];
        stream.read_exact(&mut nonce).await?;
        Ok(Hello { from, to, link: u64::from_le_bytes(link), nonce })
    }
}

async fn read_id(stream: &mut TcpStream) -> io::Result<String> {
    // At most 255 bytes: the length is one byte.
    let len = stream.read_u8().await? as usize;
    let mut id = vec![0u8; len];
    stream.read_exact(&mut id).await?;
    String::from_utf8(id).map_err(|_| refused("a node id that is not UTF-8"))
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_owned())
}

fn random<const N: usize>(rng: &SystemRandom) -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    rng.fill(&mut bytes).map_err(|_| io::Error::other("no randomness for a link nonce"))?;
    Ok(bytes)
}

/// The listener's first answer: the hello was for this node, and here is its proof.
const FOR_ME: u8 = 0;
/// The listener's first answer: the hello named another node (an address reused).
const NOT_ME: u8 = 1;
/// The listener's last word: the dialer's proof holds, frames may follow.
const ACCEPTED: u8 = 0;

/// Frames `envelopes` as sent at `at` for a link: the length prefix, the bus frame
/// written in place after it, and spare room for the tag [`Link::send`] adds (one buffer,
/// no copy).
pub fn encode_frame(envelopes: &[Envelope], at: SystemTime) -> Result<Vec<u8>, StoreError> {
    let mut framed =
        frame::frame_within(link_wire::PREFIX, TAG, envelopes, at).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    link_wire::set_prefix(&mut framed)
        .ok_or_else(|| StoreError::Corrupt(format!("a bus frame of {} bytes is over a link's limit", framed.len())))?;
    Ok(framed)
}

/// The sending half of a link this node dialled. Dropping it closes the link.
pub struct Link {
    pub id: u64,
    write: OwnedWriteHalf,
    /// Tags the frames written, numbering them.
    seal: Seal,
    /// Set when the listener closed its side (its node stopped): frames would be lost.
    closed: Arc<AtomicBool>,
    /// Set when an acknowledgement failed its check (changed on the way): the link is not
    /// to be trusted, and is given up as a stalled one is.
    forged: Arc<AtomicBool>,
    /// How many frames the listener says it has read.
    acked: Arc<AtomicU64>,
    unacked: Unacked,
    /// The task that reads the acknowledgements (stopped with the link, so a link given
    /// up on a peer that never answers again leaves no socket behind).
    reader: tokio::task::AbortHandle,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Link {
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Whether an acknowledgement failed its check: something on the path changes what
    /// passes, and the link is to be given up.
    pub fn is_forged(&self) -> bool {
        self.forged.load(Ordering::Relaxed)
    }

    /// Whether frames written [`ACK_TIMEOUT`] or more ago are still not acknowledged: the
    /// link died without closing, and what is written on it is lost.
    pub fn is_stalled(&mut self) -> bool {
        self.unacked.stalled(self.acked.load(Ordering::Relaxed), Instant::now())
    }

    /// Tags one frame made by [`encode_frame`] (length prefix included) as the link's
    /// next and writes it.
    pub async fn send(&mut self, framed: &mut Vec<u8>) -> io::Result<()> {
        self.seal.seal(framed);
        self.write.write_all(framed).await?;
        self.unacked.wrote(Instant::now());
        Ok(())
    }
}

/// A sender's record of the frames it wrote that are not acknowledged yet: runs of frames
/// written within [`STAMP_EVERY`] of each other, each as (frames written up to the run's
/// last, when the run began). Its oldest unacknowledged frame is at least as young as the
/// first run not wholly acknowledged.
#[derive(Default)]
struct Unacked {
    written: u64,
    runs: VecDeque<(u64, Instant)>,
}

impl Unacked {
    fn wrote(&mut self, now: Instant) {
        self.written += 1;
        match self.runs.back_mut() {
            Some((upto, began)) if now.saturating_duration_since(*began) < STAMP_EVERY => *upto = self.written,
            _ => self.runs.push_back((self.written, now)),
        }
    }

    fn stalled(&mut self, acked: u64, now: Instant) -> bool {
        while self.runs.front().is_some_and(|(upto, _)| *upto <= acked) {
            self.runs.pop_front();
        }
        self.runs.front().is_some_and(|(_, began)| now.saturating_duration_since(*began) >= ACK_TIMEOUT)
    }
}

/// Keepalive on a link's socket (see [`KEEPALIVE_IDLE`]); a socket that takes none works
/// on without it.
fn keep_alive(stream: &TcpStream) {
    let keepalive =
        TcpKeepalive::new().with_time(KEEPALIVE_IDLE).with_interval(KEEPALIVE_INTERVAL).with_retries(KEEPALIVE_PROBES);
    if let Err(e) = SockRef::from(stream).set_tcp_keepalive(&keepalive) {
        debug!(error = %e, "no TCP keepalive on a peer link");
    }
}

/// Dials `to` at `addr` as `from` and proves both sides hold `key`.
pub async fn dial(addr: &str, key: &LinkKey, from: &str, to: &str) -> io::Result<Link> {
    if from.len() > 255 || to.len() > 255 {
        return Err(refused("node ids longer than 255 bytes cannot name a link"));
    }
    let rng = SystemRandom::new();
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    keep_alive(&stream);
    let hello = Hello {
        from: from.to_owned(),
        to: to.to_owned(),
        link: u64::from_le_bytes(random(&rng)?),
        nonce: random(&rng)?,
    };
    stream.write_all(&hello.encode()).await?;
    let answer = match stream.read_u8().await {
        Ok(answer) => answer,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(refused(&format!(
                "the listener closed the connection at the hello (an older roomd that does not take {} links, \
                 or one with too many connections in their handshake)",
                String::from_utf8_lossy(MAGIC)
            )))
        }
        Err(e) => return Err(e),
    };
    match answer {
        FOR_ME => {}
        NOT_ME => return Err(refused("the address is another node's now")),
        _ => return Err(refused("an answer that is not a roomd peer link's")),
    }
    let mut listener_nonce = [0u8; NONCE];
    stream.read_exact(&mut listener_nonce).await?;
    let mut proof = [0u8; TAG];
    stream.read_exact(&mut proof).await?;
    if !key.verify(Side::Listener, &hello, &listener_nonce, &proof) {
        return Err(refused("the listener does not hold this cluster's secret"));
    }
    stream.write_all(key.tag(Side::Dialer, &hello, &listener_nonce).as_ref()).await?;
    if stream.read_u8().await? != ACCEPTED {
        return Err(refused("the listener refused this node's proof"));
    }
    let session = key.session(&hello, &listener_nonce);
    let (mut read, write) = stream.into_split();
    let closed = Arc::new(AtomicBool::new(false));
    let forged = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let (closing, forging, count) = (closed.clone(), forged.clone(), acked.clone());
    let mut check = Check::new(&session, Direction::Acks);
    let reader = tokio::spawn(async move {
        // After the handshake the listener writes only acknowledgements; the end of them
        // is its close. One that fails its check stops the reading (the sender gives the
        // link up at its next frame).
        let mut ack = [0u8; ACK];
        while read.read_exact(&mut ack).await.is_ok() {
            match check.ack(&ack) {
                Ok(read_so_far) => {
                    count.fetch_max(read_so_far, Ordering::Relaxed);
                }
                Err(_) => {
                    forging.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
        closing.store(true, Ordering::Relaxed);
    })
    .abort_handle();
    Ok(Link {
        id: hello.link,
        write,
        seal: Seal::new(&session, Direction::Frames),
        closed,
        forged,
        acked,
        unacked: Unacked::default(),
        reader,
    })
}

/// What the links a node listens on bring in.
#[derive(Debug)]
pub enum Inbound {
    /// A frame from the node that dialled `link`.
    Frame { link: u64, delivered: Delivered },
    /// `link` closed (after its last frame).
    Closed { link: u64 },
}

/// Takes links for node `me` on `listener`, forever: each one that proves it holds `key`
/// brings its frames (checked, decoded, lag recorded) to `tx`, in order. At most
/// [`MAX_HANDSHAKES`] connections are in their handshake at once.
pub async fn listen(
    listener: TcpListener,
    key: Arc<LinkKey>,
    me: String,
    tx: mpsc::UnboundedSender<Inbound>,
    metrics: RoomMetrics,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                NOT_ACCEPTED.warn(|| e.to_string());
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if tx.is_closed() {
            return;
        }
        let Ok(slot) = handshakes.clone().try_acquire_owned() else {
            // Closed at once (dropped): it holds no socket and no task.
            drop(stream);
            metrics.bus_links_refused.inc();
            REFUSED.warn(|| format!("{peer}: {MAX_HANDSHAKES} connections already in their handshake"));
            continue;
        };
        let (key, me, tx, metrics) = (key.clone(), me.clone(), tx.clone(), metrics.clone());
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            keep_alive(&stream);
            let accepted = tokio::time::timeout(HANDSHAKE_TIMEOUT, accept(stream, &key, &me)).await;
            // The slot is for the handshake only: a link that proved itself holds none.
            drop(slot);
            match accepted {
                Ok(Ok((stream, hello, session))) => {
                    debug!(from = %hello.from, %peer, link = hello.link, "peer link up");
                    let (read, write) = stream.into_split();
                    let acks = Arc::new(Acks::default());
                    let acker = tokio::spawn(acknowledge(write, Seal::new(&session, Direction::Acks), acks.clone()));
                    let check = Check::new(&session, Direction::Frames);
                    let why = read_frames(read, hello.link, check, &acks, &tx, &metrics).await;
                    acker.abort();
                    debug!(from = %hello.from, link = hello.link, ended = ?why, "peer link closed");
                    let _ = tx.send(Inbound::Closed { link: hello.link });
                }
                Ok(Err(e)) => {
                    metrics.bus_links_refused.inc();
                    REFUSED.warn(|| format!("{peer}: {e}"));
                }
                Err(_) => {
                    metrics.bus_links_refused.inc();
                    REFUSED.warn(|| format!("{peer}: no handshake within {HANDSHAKE_TIMEOUT:?}"));
                }
            }
        });
    }
}

/// The listener's side of the handshake on a connection already taken, for a receiver
/// that reads the frames itself ([`listen`] does this for every connection): the stream,
/// on which each frame is a 4-byte little-endian length, the bus frame and its tag
/// (`link_wire.rs`), the link's id, and the check of its frames. Such a receiver
/// acknowledges nothing, so its dialer gives the link up [`ACK_TIMEOUT`] after its first
/// frame: a stalled receiver, to the dialer.
pub async fn handshake(stream: TcpStream, key: &LinkKey, me: &str) -> io::Result<(TcpStream, u64, Check)> {
    accept(stream, key, me)
        .await
        .map(|(stream, hello, session)| (stream, hello.link, Check::new(&session, Direction::Frames)))
}

async fn accept(mut stream: TcpStream, key: &LinkKey, me: &str) -> io::Result<(TcpStream, Hello, SessionKey)> {
    let hello = Hello::read(&mut stream).await?;
    if hello.to != me {
        stream.write_u8(NOT_ME).await?;
        return Err(refused(&format!("a link for node {:?}, not this one", hello.to)));
    }
    let nonce = random::<NONCE>(&SystemRandom::new())?;
    let mut answer = Vec::with_capacity(1 + NONCE + TAG);
    answer.push(FOR_ME);
    answer.extend_from_slice(&nonce);
    answer.extend_from_slice(key.tag(Side::Listener, &hello, &nonce).as_ref());
    stream.write_all(&answer).await?;
    let mut proof = [0u8; TAG];
    stream.read_exact(&mut proof).await?;
    if !key.verify(Side::Dialer, &hello, &nonce, &proof) {
        return Err(refused(&format!("{:?} does not hold this cluster's secret", hello.from)));
    }
    stream.write_u8(ACCEPTED).await?;
    let session = key.session(&hello, &nonce);
    Ok((stream, hello, session))
}

/// What a link's reader buffers: most frames arrive whole within it.
const READ_BUFFER: usize = 64 * 1024;

/// What a listener's reader tells its acknowledger.
#[derive(Default)]
struct Acks {
    /// Frames read off the link so far.
    read: AtomicU64,
    /// A frame was read since the acknowledger last looked.
    more: Notify,
}

impl Acks {
    fn frame_read(&self) {
        self.read.fetch_add(1, Ordering::Relaxed);
        self.more.notify_one();
    }
}

/// Writes back how many frames the link's reader has read, [`ACK_EVERY`] after a frame
/// came that is not acknowledged yet: at most one small write per [`ACK_EVERY`] on a busy
/// link, none on an idle one. Each is tagged as the next acknowledgement (`seal`).
async fn acknowledge(mut write: OwnedWriteHalf, mut seal: Seal, acks: Arc<Acks>) {
    let mut told = 0;
    loop {
        acks.more.notified().await;
        tokio::time::sleep(ACK_EVERY).await;
        let read = acks.read.load(Ordering::Relaxed);
        if read != told {
            if write.write_all(&seal.ack(read)).await.is_err() {
                return;
            }
            told = read;
        }
    }
}

/// Reads a link's frames until it ends: each one's tag checked ([`FrameReader`]) and its
/// envelopes decoded where it lies in the buffer. A frame that fails its check (or
/// announces more than [`MAX_FRAME`]) ends the link: counted, logged (summarised), and
/// nothing after it is read.
async fn read_frames(
    mut stream: impl tokio::io::AsyncRead + Unpin,
    link: u64,
    mut check: Check,
    acks: &Acks,
    tx: &mpsc::UnboundedSender<Inbound>,
    metrics: &RoomMetrics,
) -> io::Result<()> {
    let mut reader = FrameReader::new(READ_BUFFER);
    loop {
        let accepted = match reader.next(&mut check) {
            Ok(Some(frame)) => bus::accept_frame(frame, FrameSource::Link, metrics),
            Ok(None) => {
                if stream.read_buf(reader.room()).await? == 0 {
                    if reader.is_empty() {
                        return Ok(());
                    }
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the link closed within a frame"));
                }
                continue;
            }
            Err(e) => {
                metrics.bus_dropped.inc();
                metrics.bad_frames.with_label_values(&[FrameSource::Link.label()]).inc();
                FAILED_CHECK.warn(|| format!("{link}: {e}"));
                return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
            }
        };
        acks.frame_read();
        if let Some(delivered) = accepted {
            if tx.send(Inbound::Frame { link, delivered }).is_err() {
                return Ok(());
            }
        }
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

/// The receiver's side of the order rule: a link's frames wait until its mark has come
/// through Redis (everything the dialer published before it has been handed on), or
/// [`MARK_WAIT`] has passed; and once its sender's `Unlink` has come through Redis, what
/// the link still brings is dropped ([`Gate::is_cut`]).
#[derive(Default)]
pub struct Gate {
    open: HashSet<u64>,
    held: HashMap<u64, (Instant, Vec<Delivered>)>,
    /// Links their sender gave up, until they close.
    cut: HashSet<u64>,
}

impl Gate {
    /// The mark for `link` came through Redis: its held frames, in order, to deliver now.
    pub fn mark(&mut self, link: u64) -> Vec<Delivered> {
        self.open.insert(link);
        self.held.remove(&link).map(|(_, frames)| frames).unwrap_or_default()
    }

    /// A frame from `link`: to deliver now, or held for its mark (`None` too when the link
    /// was cut: check [`Gate::is_cut`] first to count it).
    pub fn frame(&mut self, link: u64, delivered: Delivered, now: Instant) -> Option<Delivered> {
        if self.cut.contains(&link) {
            return None;
        }
        if self.open.contains(&link) {
            return Some(delivered);
        }
        self.held.entry(link).or_insert_with(|| (now, Vec::new())).1.push(delivered);
        None
    }

    /// `link` closed: whatever it still held, to deliver now (late beats lost).
    pub fn closed(&mut self, link: u64) -> Vec<Delivered> {
        self.open.remove(&link);
        self.cut.remove(&link);
        self.held.remove(&link).map(|(_, frames)| frames).unwrap_or_default()
    }

    /// `link`'s sender gave it up and said so through Redis (`Envelope::Unlink`): what it
    /// held (sent before the mark, so before everything after it) to deliver now, and from
    /// now on its frames are dropped until it closes. A link that already closed (its
    /// receiver saw the end before the mark came) is not remembered.
    pub fn cut(&mut self, link: u64) -> Vec<Delivered> {
        let held = self.held.remove(&link).map(|(_, frames)| frames);
        if self.open.remove(&link) || held.is_some() {
            self.cut.insert(link);
        }
        held.unwrap_or_default()
    }

    /// Whether `link` was cut: a frame from it is to be dropped, not delivered.
    pub fn is_cut(&self, link: u64) -> bool {
        self.cut.contains(&link)
    }

    /// Links that waited [`MARK_WAIT`] for their mark: opened, their frames to deliver now.
    pub fn expired(&mut self, now: Instant) -> Vec<Delivered> {
        let late: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, (since, _))| now.duration_since(*since) >= MARK_WAIT)
            .map(|(l, _)| *l)
            .collect();
        let mut out = Vec::new();
        for link in late {
            warn!(link, "a peer link's mark did not come through Redis; its frames go on without it");
            out.extend(self.mark(link));
        }
        out
    }

    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::bus::{Envelope, Reply};
    use std::time::SystemTime;

    fn metrics() -> RoomMetrics {
        RoomMetrics::unregistered().unwrap()
    }

    fn reply(req: u64) -> Envelope {
        Envelope::Reply { req, reply: Reply::NotHere }
    }

    async fn listening(secret: &str, me: &str) -> (String, mpsc::UnboundedReceiver<Inbound>, RoomMetrics) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, rx) = mpsc::unbounded_channel();
        let m = metrics();
        tokio::spawn(listen(listener, Arc::new(LinkKey::from_secret(secret)), me.into(), tx, m.clone()));
        (addr, rx, m)
    }

    /// Waits until `done` holds, for at most `within`.
    async fn until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + within;
        while !done() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        done()
    }

    #[tokio::test]
    async fn frames_cross_a_link_in_order_and_its_close_follows_them() {
        let (addr, mut rx, _) = listening("cluster-secret-0123456789", "n2").await;
        let key = LinkKey::from_secret("cluster-secret-0123456789");
        let mut link = dial(&addr, &key, "n1", "n2").await.unwrap();
        for req in 0..100u64 {
            let mut framed = encode_frame(&[reply(req), reply(req + 1000)], SystemTime::now()).unwrap();
            link.send(&mut framed).await.unwrap();
        }
        let id = link.id;
        drop(link);
        for req in 0..100u64 {
            match rx.recv().await.unwrap() {
                Inbound::Frame { link, delivered } => {
                    assert_eq!(link, id);
                    assert_eq!(delivered.envelopes, vec![reply(req), reply(req + 1000)]);
                }
                other => panic!("frame {req}: {other:?}"),
            }
        }
        assert!(matches!(rx.recv().await.unwrap(), Inbound::Closed { link } if link == id));
    }

    /// Frames small and larger than the reader's buffer, some written in two pieces with
    /// a pause between (so the reader has only part of one buffered), all arrive whole and
    /// in order: decoded in place or copied out, the same envelopes.
    #[tokio::test]
    async fn frames_of_any_size_and_split_anywhere_arrive_whole_and_in_order() {
        let (addr, mut rx, m) = listening("cluster-secret-0123456789", "n2").await;
        let key = LinkKey::from_secret("cluster-secret-0123456789");
        let mut link = dial(&addr, &key, "n1", "n2").await.unwrap();
        let sizes = [10, READ_BUFFER - 100, 3 * READ_BUFFER, 0, READ_BUFFER + 1, 1000, 2 * READ_BUFFER, 5];
        let big = |i: usize| Envelope::Unlink { from: "x".repeat(sizes[i]), link: i as u64 };
        for i in 0..sizes.len() {
            let mut framed = encode_frame(&[big(i), reply(i as u64)], SystemTime::now()).unwrap();
            if i % 2 == 1 {
                link.seal.seal(&mut framed);
                let (head, tail) = framed.split_at(framed.len() / 3);
                link.write.write_all(head).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                link.write.write_all(tail).await.unwrap();
            } else {
                link.send(&mut framed).await.unwrap();
            }
        }
        for i in 0..sizes.len() {
            match rx.recv().await.unwrap() {
                Inbound::Frame { delivered, .. } => {
                    assert_eq!(delivered.envelopes, vec![big(i), reply(i as u64)], "frame {i}")
                }
                other => panic!("frame {i}: {other:?}"),
            }
        }
        assert_eq!(m.bus_dropped.get(), 0);
        assert_eq!(m.bad_frames.with_label_values(&["link"]).get(), 0);
    }

    #[tokio::test]
    async fn a_process_without_the_secret_can_neither_send_nor_receive() {
        let (addr, mut rx, m) = listening("cluster-secret-0123456789", "n2").await;
        // A dialer with another secret is refused before any frame is taken.
        let wrong = LinkKey::from_secret("not-the-secret-0123456789");
        let err = dial(&addr, &wrong, "n1", "n2").await.err().expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        // A listener with another secret gets no frame: the dialer refuses it first.
        let (rogue, mut rogue_rx, _) = listening("not-the-secret-0123456789", "n2").await;
        let key = LinkKey::from_secret("cluster-secret-0123456789");
        let err = dial(&rogue, &key, "n1", "n2").await.err().expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        // A hello for another node, and bytes that are no hello at all.
        let err = dial(&addr, &key, "n1", "n3").await.err().expect("refused");
        assert!(err.to_string().contains("another node"), "{err}");
        let mut junk = TcpStream::connect(&addr).await.unwrap();
        junk.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut rest = Vec::new();
        let _ = junk.read_to_end(&mut rest).await;
        // The listener counts a refusal after it has closed the socket.
        until(Duration::from_secs(5), || m.bus_links_refused.get() >= 3).await;
        assert_eq!(m.bus_links_refused.get(), 3, "wrong secret, wrong node, junk");
        assert!(rx.try_recv().is_err(), "nothing reached the node");
        assert!(rogue_rx.try_recv().is_err(), "nothing reached the rogue");
        // The right key still gets through.
        assert!(dial(&addr, &key, "n1", "n2").await.is_ok());
    }

    /// A link `n1` dialed to a listener this test accepts by hand (no reader behind it):
    /// the dialer's `Link`, and the accepted stream, hello and session.
    async fn dialed_by_hand() -> (Link, (TcpStream, Hello, SessionKey)) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let key = LinkKey::from_secret("cluster-secret-0123456789");
        let listening = async {
            let (stream, _) = listener.accept().await.unwrap();
            accept(stream, &key, "n2").await.unwrap()
        };
        let (link, accepted) = tokio::join!(dial(&addr, &key, "n1", "n2"), listening);
        (link.unwrap(), accepted)
    }

    #[tokio::test]
    async fn a_link_whose_listener_closed_reports_itself_closed() {
        let (link, (stream, hello, _)) = dialed_by_hand().await;
        assert_eq!((hello.from.as_str(), hello.link), ("n1", link.id));
        assert!(!link.is_closed());
        // The listening node stopped (its sockets close with it).
        drop(stream);
        assert!(until(Duration::from_secs(5), || link.is_closed()).await);
    }

    #[tokio::test]
    async fn a_listener_acknowledges_the_frames_it_read() {
        let (addr, mut rx, _) = listening("cluster-secret-0123456789", "n2").await;
        let key = LinkKey::from_secret("cluster-secret-0123456789");
        let mut link = dial(&addr, &key, "n1", "n2").await.unwrap();
        for req in 0..10u64 {
            link.send(&mut encode_frame(&[reply(req)], SystemTime::now()).unwrap()).await.unwrap();
        }
        for _ in 0..10 {
            assert!(matches!(rx.recv().await.unwrap(), Inbound::Frame { .. }));
        }
        assert!(until(Duration::from_secs(5), || link.acked.load(Ordering::Relaxed) == 10).await, "10 acknowledged");
        assert!(!link.is_stalled() && !link.is_closed() && !link.is_forged());
    }

    /// A rolling upgrade: an older roomd dials with `RDL2` (or `RDL1`), whose frames carry
    /// no tags. Taking it would take frames anyone on the path could change, so the link
    /// is refused (counted, logged) and that node's frames go through Redis.
    #[tokio::test]
    async fn a_dialer_of_an_older_version_is_refused() {
        let (addr, mut rx, m) = listening("cluster-secret-0123456789", "n2").await;
        for (i, magic) in [b"RDL2", b"RDL1"].into_iter().enumerate() {
            let mut old = TcpStream::connect(&addr).await.unwrap();
            let mut hello = magic.to_vec();
            hello.extend_from_slice(&[2, b'n', b'3', 2, b'n', b'2']);
            hello.extend_from_slice(&[7; 8 + NONCE]);
            old.write_all(&hello).await.unwrap();
            let mut answer = Vec::new();
            let _ = old.read_to_end(&mut answer).await;
            assert!(answer.is_empty(), "closed without an answer: {answer:?}");
            assert!(until(Duration::from_secs(5), || m.bus_links_refused.get() == i as u64 + 1).await);
        }
        assert!(rx.try_recv().is_err(), "nothing reached the node");
        // What the refusal says (the line an operator reads).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut old = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        old.write_all(b"RDL2").await.unwrap();
        let (mut taken, _) = listener.accept().await.unwrap();
        let err = Hello::read(&mut taken).await.err().expect("refused");
        assert!(err.to_string().contains("an older roomd"), "{err}");
    }

    /// The receiver reads the frames and never acknowledges them, as a link whose
    /// acknowledgements vanish (a partition, a forgotten connection) looks to its sender.
    #[tokio::test]
    async fn a_link_whose_frames_go_unacknowledged_is_stalled_after_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let key = LinkKey::from_secret("cluster-secret-0123456789");
        let receiver = async {
            let (stream, _) = listener.accept().await.unwrap();
            let (mut stream, _, _) = handshake(stream, &key, "n2").await.unwrap();
            let mut sink = Vec::new();
            let _ = stream.read_to_end(&mut sink).await;
        };
        let sender = async {
            let mut link = dial(&addr, &key, "n1", "n2").await.unwrap();
            let sent = Instant::now();
            link.send(&mut encode_frame(&[reply(1)], SystemTime::now()).unwrap()).await.unwrap();
            assert!(!link.is_stalled(), "just written");
            assert!(until(ACK_TIMEOUT * 2, || link.is_stalled()).await, "stalled");
            assert!(sent.elapsed() >= ACK_TIMEOUT, "not before the timeout: {:?}", sent.elapsed());
            assert!(!link.is_closed(), "stalled, not closed");
        };
        tokio::select! {
            () = sender => {}
            () = receiver => panic!("the receiver stopped"),
        }
    }

    /// How a relay on the link path tampers with the dialer's frames after the handshake:
    /// given the three frames as the dialer sealed them, what it passes on.
    type Tamper = fn(&[Vec<u8>]) -> Vec<u8>;

    /// A relay between a dialer and a listening node: each way of tampering with a frame
    /// ends the link at that frame. The frame before it is delivered, nothing after it
    /// is, the link closes on both sides, and the listener counts one bad frame.
    #[tokio::test]
    async fn a_flipped_replayed_dropped_or_reordered_frame_ends_the_link() {
        let cases: [(&str, Tamper); 4] = [
            ("a byte flipped in the second frame's user id", |f| {
                let mut second = f[1].clone();
                let at = second.windows(5).position(|w| w == b"alice").unwrap();
                second[at] = b'b';
                [&f[0][..], &second, &f[2]].concat()
            }),
            ("the first frame replayed", |f| [&f[0][..], &f[0], &f[1], &f[2]].concat()),
            ("the second frame dropped", |f| [&f[0][..], &f[2]].concat()),
            ("the second and third frames reordered", |f| [&f[0][..], &f[2], &f[1]].concat()),
        ];
        for (case, tamper) in cases {
            let (addr, mut rx, m) = listening("cluster-secret-0123456789", "n2").await;
            let key = LinkKey::from_secret("cluster-secret-0123456789");
            let mut link = dial(&addr, &key, "n1", "n2").await.unwrap();
            let act = |user: &str, cs: u64| Envelope::Room {
                room: "r".into(),
                from: "n1".into(),
                cmd: crate::cluster::bus::RoomCmd::Act { session: 1, user: user.into(), cs, action_json: "{}".into() },
            };
            let frames: Vec<Vec<u8>> = [act("alice", 1), act("alice", 2), act("alice", 3)]
                .iter()
                .map(|env| {
                    let mut framed = encode_frame(std::slice::from_ref(env), SystemTime::now()).unwrap();
                    link.seal.seal(&mut framed);
                    framed
                })
                .collect();
            link.write.write_all(&tamper(&frames)).await.unwrap();
            match rx.recv().await.unwrap() {
                Inbound::Frame { delivered, .. } => assert_eq!(delivered.envelopes, vec![act("alice", 1)], "{case}"),
                other => panic!("{case}: {other:?}"),
            }
            assert!(matches!(rx.recv().await.unwrap(), Inbound::Closed { .. }), "{case}: the link ends");
            assert_eq!(m.bad_frames.with_label_values(&["link"]).get(), 1, "{case}");
            assert!(until(Duration::from_secs(5), || link.is_closed()).await, "{case}: the dialer sees it closed");
        }
    }

    /// The other way: an acknowledgement changed on the path marks the dialer's link as
    /// forged (its sender gives it up at its next frame), and stops it reading more.
    #[tokio::test]
    async fn an_acknowledgement_that_fails_its_check_marks_the_link_forged() {
        let (link, (mut stream, _, session)) = dialed_by_hand().await;
        let mut seal = Seal::new(&session, Direction::Acks);
        stream.write_all(&seal.ack(1)).await.unwrap();
        assert!(until(Duration::from_secs(5), || link.acked.load(Ordering::Relaxed) == 1).await);
        let mut changed = seal.ack(2);
        changed[0] = 200;
        stream.write_all(&changed).await.unwrap();
        assert!(until(Duration::from_secs(5), || link.is_forged()).await, "forged");
        assert_eq!(link.acked.load(Ordering::Relaxed), 1, "the changed count is not taken");
        assert!(!link.is_closed(), "given up as forged (with its Unlink mark), not as closed by its listener");
    }

    /// Idle connections to the peer port (the probe of issue 55 made 6,000): at most
    /// [`MAX_HANDSHAKES`] are held, each at most [`HANDSHAKE_TIMEOUT`]; the rest are closed
    /// at once. Once they are gone a real dialer gets its link.
    #[tokio::test]
    async fn connections_in_their_handshake_are_capped_and_timed_out() {
        let (addr, _rx, m) = listening("cluster-secret-0123456789", "n2").await;
        let extra = 40;
        let mut idle = Vec::new();
        for _ in 0..MAX_HANDSHAKES + extra {
            idle.push(TcpStream::connect(&addr).await.unwrap());
        }
        // The ones over the cap are closed at once: they read the end of the stream (the
        // others have nothing to read until their handshake times out).
        let started = Instant::now();
        assert!(until(Duration::from_secs(1), || m.bus_links_refused.get() == extra as u64).await);
        let closed = idle.iter().filter(|stream| matches!(stream.try_read(&mut [0u8; 1]), Ok(0))).count();
        assert_eq!(closed, extra, "the connections over {MAX_HANDSHAKES} are closed at once");
        assert!(started.elapsed() < HANDSHAKE_TIMEOUT, "read before the others' handshakes timed out");
        assert_eq!(m.bus_links_refused.get(), extra as u64);
        // The others are closed once their handshake times out.
        for stream in &mut idle {
            let mut byte = [0u8; 1];
            let read = tokio::time::timeout(HANDSHAKE_TIMEOUT * 3, stream.read(&mut byte)).await;
            assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed after the handshake timeout: {read:?}");
        }
        assert!(until(Duration::from_secs(5), || m.bus_links_refused.get() == (MAX_HANDSHAKES + extra) as u64).await);
        let key = LinkKey::from_secret("cluster-secret-0123456789");
        assert!(dial(&addr, &key, "n1", "n2").await.is_ok(), "a peer gets its link once the slots are free");
    }

    #[test]
    fn unacknowledged_frames_stall_a_link_only_once_the_oldest_is_the_timeout_old() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut u = Unacked::default();
        assert!(!u.stalled(0, at(10_000)), "nothing written, nothing owed");
        // Three frames in one run, one in another 1 s later.
        u.wrote(at(0));
        u.wrote(at(10));
        u.wrote(at(20));
        u.wrote(at(1_000));
        assert_eq!(u.runs.len(), 2);
        assert!(!u.stalled(0, at(2_999)));
        assert!(u.stalled(0, at(3_000)), "the first run is the timeout old");
        // Two of the first run's three read: its third is still owed.
        assert!(u.stalled(2, at(3_000)));
        // The first run read: the second is not yet the timeout old.
        assert!(!u.stalled(3, at(3_000)));
        assert!(!u.stalled(3, at(3_999)));
        assert!(u.stalled(3, at(4_000)));
        // All read: nothing is owed, however long after.
        assert!(!u.stalled(4, at(60_000)));
        assert!(u.runs.is_empty(), "what is acknowledged is forgotten");
        // A busy link keeps one stamp per run, not one per frame.
        for ms in 0..1_000 {
            u.wrote(at(60_000 + ms));
        }
        assert!(u.runs.len() <= (1_000 / STAMP_EVERY.as_millis() + 1) as usize, "{} runs", u.runs.len());
        assert!(!u.stalled(1_004, at(70_000)));
    }

    fn delivered(req: u64) -> Delivered {
        Delivered { envelopes: vec![reply(req)], lag: Duration::ZERO }
    }

    #[test]
    fn a_links_frames_wait_for_its_mark_and_no_longer_than_the_mark_wait() {
        let mut gate = Gate::default();
        let t0 = Instant::now();
        // Frames that arrive before the mark wait for it, in order.
        assert!(gate.frame(7, delivered(1), t0).is_none());
        assert!(gate.frame(7, delivered(2), t0).is_none());
        assert!(gate.holding());
        assert_eq!(gate.mark(7), vec![delivered(1), delivered(2)]);
        assert_eq!(gate.frame(7, delivered(3), t0), Some(delivered(3)), "an open link's frames go at once");
        // A mark that comes first opens the link for its frames.
        assert!(gate.mark(8).is_empty());
        assert_eq!(gate.frame(8, delivered(4), t0), Some(delivered(4)));
        // A mark that never comes holds frames no longer than the wait.
        assert!(gate.frame(9, delivered(5), t0).is_none());
        assert!(gate.expired(t0 + MARK_WAIT / 2).is_empty());
        assert_eq!(gate.expired(t0 + MARK_WAIT), vec![delivered(5)]);
        assert_eq!(gate.frame(9, delivered(6), t0), Some(delivered(6)));
        // A link that closes before its mark hands on what it held.
        assert!(gate.frame(10, delivered(7), t0).is_none());
        assert_eq!(gate.closed(10), vec![delivered(7)]);
        assert!(!gate.holding());
    }

    #[test]
    fn a_cut_links_later_frames_are_dropped_until_it_closes() {
        let mut gate = Gate::default();
        let t0 = Instant::now();
        assert!(gate.mark(7).is_empty());
        assert_eq!(gate.frame(7, delivered(1), t0), Some(delivered(1)));
        // Its sender gave it up: what the link still brings was written before the mark
        // and is read after it, so it is dropped, never delivered late.
        assert!(gate.cut(7).is_empty());
        assert!(gate.is_cut(7));
        assert_eq!(gate.frame(7, delivered(2), t0), None);
        assert!(!gate.holding(), "a cut link's frames are not held for a mark either");
        // Its close forgets it.
        assert!(gate.closed(7).is_empty());
        assert!(!gate.is_cut(7));
        // Frames still held for a mark that was lost were sent before the cut: they go.
        assert!(gate.frame(8, delivered(3), t0).is_none());
        assert_eq!(gate.cut(8), vec![delivered(3)]);
        assert!(gate.is_cut(8));
        // A link that closed before its sender's mark came is not remembered.
        assert!(gate.mark(9).is_empty());
        assert!(gate.closed(9).is_empty());
        assert!(gate.cut(9).is_empty());
        assert!(!gate.is_cut(9));
        // Other links are untouched.
        assert!(gate.mark(10).is_empty());
        assert_eq!(gate.frame(10, delivered(4), t0), Some(delivered(4)));
    }
}
