//! The dialer's side of a link: [`dial`], then the [`Link`] that writes tagged frames and
//! reads the listener's acknowledgements, with its record of what is still unacknowledged
//! ([`Unacked`]) that says when the link stalled. Apart from the listener's side: a node
//! dials its peers from its outboxes and takes their links on its peer port, and the two
//! share only the handshake.

use super::handshake::{random, refused, Hello, LinkKey, Side, ACCEPTED, FOR_ME, MAGIC, NONCE, NOT_ME, TAG};
use super::keep_alive;
use crate::cluster::bus::Envelope;
use crate::cluster::frame;
use crate::cluster::link_wire::{self, Check, Direction, Seal, ACK};
use crate::error::StoreError;
use ring::rand::SystemRandom;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

/// A write that takes longer drops the link (its frame goes through Redis).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a destination waits before dialling again after a link broke or a first dial
/// failed (doubling with each failed dial in a row, to [`MAX_RETRY_AFTER`]).
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest between two dials of a destination whose dials keep failing.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A sender gives its link up when frames it wrote this long ago are not acknowledged
/// (the link died without closing): well above [`ACK_EVERY`](super::ACK_EVERY) and a busy
/// node's pauses, below the 4 s after which a client resends an action it got no answer
/// to.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(3);
/// Frames written within this long of one another share one stamp in a sender's record
/// of what is unacknowledged (so the record stays small: at most about
/// [`ACK_TIMEOUT`] / this, before the link is given up).
pub(super) const STAMP_EVERY: Duration = Duration::from_millis(50);

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
    pub(super) write: OwnedWriteHalf,
    /// Tags the frames written, numbering them.
    pub(super) seal: Seal,
    /// Set when the listener closed its side (its node stopped): frames would be lost.
    closed: Arc<AtomicBool>,
    /// Set when an acknowledgement failed its check (changed on the way): the link is not
    /// to be trusted, and is given up as a stalled one is.
    forged: Arc<AtomicBool>,
    /// How many frames the listener says it has read.
    pub(super) acked: Arc<AtomicU64>,
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
pub(super) struct Unacked {
    written: u64,
    pub(super) runs: VecDeque<(u64, Instant)>,
}

impl Unacked {
    pub(super) fn wrote(&mut self, now: Instant) {
        self.written += 1;
        match self.runs.back_mut() {
            Some((upto, began)) if now.saturating_duration_since(*began) < STAMP_EVERY => *upto = self.written,
            _ => self.runs.push_back((self.written, now)),
        }
    }

    pub(super) fn stalled(&mut self, acked: u64, now: Instant) -> bool {
        while self.runs.front().is_some_and(|(upto, _)| *upto <= acked) {
            self.runs.pop_front();
        }
        self.runs.front().is_some_and(|(_, began)| now.saturating_duration_since(*began) >= ACK_TIMEOUT)
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
                "the listener closed the connection at the hello (a roomd that does not take {} links, \
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
