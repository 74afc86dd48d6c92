//! The listener's side of links: [`listen`] takes connections to the peer port (at most
//! [`MAX_HANDSHAKES`] in their handshake at once), reads each link's frames, checked and
//! decoded, and acknowledges them. Apart from the dialer's side, which writes frames and
//! reads acknowledgements: the two share only the handshake.

use super::handshake::{accept, LinkKey, HANDSHAKE_TIMEOUT};
use super::keep_alive;
use crate::cluster::bus::{self, Delivered, FrameSource};
use crate::cluster::link_wire::{Check, Direction, FrameReader, Seal};
use crate::metrics::RoomMetrics;
use crate::summary::{Summarised, SUMMARY_EVERY};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify, Semaphore};
use tracing::{debug, warn};

/// At most this many connections to the peer port are in their handshake at once; more
/// are closed as they come. Peers need few: each other node dials one link to this one
/// and redials at most once a second, so even a cluster of dozens of nodes restarting at
/// once stays well below it. Anyone who reaches the port can open connections, and each
/// holds a socket and a task until its handshake ends (at most [`HANDSHAKE_TIMEOUT`]), so
/// this bounds what unauthenticated connections hold (the probe of issue 55 took a node
/// from 25 to 3,429 fds with idle connects). A flood that keeps every slot busy delays
/// links, never frames: those go through Redis meanwhile.
pub const MAX_HANDSHAKES: usize = 64;

/// A listener acknowledges the frames it has read at most this often, and this long after
/// the first frame it has not yet acknowledged (never while no frames come).
pub const ACK_EVERY: Duration = Duration::from_millis(250);

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

/// What a link's reader buffers: most frames arrive whole within it.
pub(super) const READ_BUFFER: usize = 64 * 1024;

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
/// announces more than [`MAX_FRAME`](super::MAX_FRAME)) ends the link: counted, logged
/// (summarised), and nothing after it is read.
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
