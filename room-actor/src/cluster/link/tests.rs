//! The peer links' tests: links dialled and listened to on this host, the handshake's
//! refusals, acknowledgements and stalls, tampered frames, and the gate. A file of their
//! own because they are longer than the code they test.

use super::dialer::{Unacked, STAMP_EVERY};
use super::handshake::{accept, Hello, NONCE};
use super::listener::READ_BUFFER;
use super::*;
use crate::cluster::bus::{Delivered, Envelope, Reply};
use crate::cluster::link_wire::{Direction, Seal, SessionKey};
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

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

/// A hello that is not `RDL3` (a roomd whose links speak another version, or anything
/// else that dials the peer port) is refused (counted, logged), so that node's frames go
/// through Redis; nothing it sends reaches the node.
#[tokio::test]
async fn a_dialer_of_another_version_is_refused() {
    let (addr, mut rx, m) = listening("cluster-secret-0123456789", "n2").await;
    for (i, magic) in [b"RDL2", b"RDL4", b"GET "].into_iter().enumerate() {
        let mut other = TcpStream::connect(&addr).await.unwrap();
        let mut hello = magic.to_vec();
        hello.extend_from_slice(&[2, b'n', b'3', 2, b'n', b'2']);
        hello.extend_from_slice(&[7; 8 + NONCE]);
        other.write_all(&hello).await.unwrap();
        let mut answer = Vec::new();
        let _ = other.read_to_end(&mut answer).await;
        assert!(answer.is_empty(), "closed without an answer: {answer:?}");
        assert!(until(Duration::from_secs(5), || m.bus_links_refused.get() == i as u64 + 1).await);
    }
    assert!(rx.try_recv().is_err(), "nothing reached the node");
    // What the refusal says (the line an operator reads).
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut other = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    other.write_all(b"RDL4").await.unwrap();
    let (mut taken, _) = listener.accept().await.unwrap();
    let err = Hello::read(&mut taken).await.err().expect("refused");
    assert!(err.to_string().contains(r#"not a roomd peer link of this version (hello "RDL4""#), "{err}");
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
            cmd: crate::cluster::bus::RoomCmd::tell(1, user, crate::messages::Act { cs, action: "{}".into() }),
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
