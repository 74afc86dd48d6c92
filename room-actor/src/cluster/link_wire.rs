//! A peer link's bytes after its handshake (`link/handshake.rs`), and their check.
//!
//! The handshake proves both nodes hold the cluster's link key and gives the link a
//! session key of its own (derived from that key, both node ids, the link id and a nonce
//! from each side). From then on every frame the dialer writes is
//! `[len: u32 LE][bus frame: len bytes][tag: 32 bytes]`, and every acknowledgement the
//! listener writes back is `[frames read: u64 LE][tag: 32 bytes]`. A tag is
//! HMAC-SHA256 under the session key over the direction, the sequence number of what it
//! seals in that direction (0, 1, 2, … counted by both ends, never sent) and the bytes as
//! written before it (the frame's length prefix included). So a frame or an
//! acknowledgement changed on the way, replayed (in this link or from another one),
//! dropped (the next one's number is off), reordered, or sent back the other way fails
//! its check, and the reader ends the link (`link/listener.rs`). One HMAC per frame, over the
//! frame where it lies in the reader's buffer: a frame is a whole batch of envelopes, so
//! nothing is computed per envelope.
//!
//! This file uses nothing but ring (and std), so the fuzz crate compiles it by path
//! (`fuzz/src/lib.rs`, target `link_frame`).

use ring::hmac;

/// The length prefix of a frame.
pub const PREFIX: usize = 4;
/// A tag: a whole HMAC-SHA256.
pub const TAG: usize = 32;
/// The largest frame a link takes (a frame of the outbox's biggest batch is ~1 MiB): a
/// longer length prefix ends the link before anything is read or allocated for it.
pub const MAX_FRAME: usize = 16 << 20;
/// An acknowledgement as written: the count of frames read, and its tag.
pub const ACK: usize = 8 + TAG;

/// Which way bytes go on a link: part of every tag, so nothing written one way passes as
/// written the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Frames, from the dialer to the listener.
    Frames = 1,
    /// Acknowledgements, from the listener to the dialer.
    Acks = 2,
}

/// A link's session key, derived in its handshake.
#[derive(Clone)]
pub struct SessionKey(hmac::Key);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

impl SessionKey {
    /// A session key of `secret`'s bytes (the handshake's derived HMAC).
    pub fn new(secret: &[u8]) -> SessionKey {
        SessionKey(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }
}

/// Why a link's bytes are refused (the link ends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// A length prefix over [`MAX_FRAME`].
    TooLarge(usize),
    /// The tag of what should be number `seq` in its direction does not hold.
    Forged { direction: Direction, seq: u64 },
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::TooLarge(len) => write!(f, "a frame of {len} bytes (at most {MAX_FRAME})"),
            LinkError::Forged { direction: Direction::Frames, seq } => {
                write!(f, "frame {seq} failed its check (changed, replayed, dropped or reordered on the way)")
            }
            LinkError::Forged { direction: Direction::Acks, seq } => {
                write!(f, "acknowledgement {seq} failed its check (changed, replayed, dropped or reordered on the way)")
            }
        }
    }
}

/// The tag of number `seq` going `direction`, over `written`.
fn tag(key: &hmac::Key, direction: Direction, seq: u64, written: &[u8]) -> hmac::Tag {
    let mut mac = hmac::Context::with_key(key);
    mac.update(&[direction as u8]);
    mac.update(&seq.to_le_bytes());
    mac.update(written);
    mac.sign()
}

/// Compares two tags in time that does not depend on where they differ (ring's
/// `hmac::verify` wants the message in one slice; ours is the direction and sequence
/// number, then the frame where it lies).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && std::hint::black_box(a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y))) == 0
}

/// The writing end of one direction: tags what it writes, numbering it.
pub struct Seal {
    key: hmac::Key,
    direction: Direction,
    seq: u64,
}

impl Seal {
    pub fn new(key: &SessionKey, direction: Direction) -> Seal {
        Seal { key: key.0.clone(), direction, seq: 0 }
    }

    /// Appends the tag of `framed` (a frame as written: its length prefix, then the bus
    /// frame) as the next frame this way. A frame is built with room for the tag where its
    /// first allocation holds it, and a grown one has room to spare but rarely less than a
    /// tag, so this seldom moves the frame.
    pub fn seal(&mut self, framed: &mut Vec<u8>) {
        let tag = tag(&self.key, self.direction, self.seq, framed);
        self.seq = self.seq.wrapping_add(1);
        framed.extend_from_slice(tag.as_ref());
    }

    /// The next acknowledgement this way: `read` frames read so far.
    pub fn ack(&mut self, read: u64) -> [u8; ACK] {
        let mut out = [0u8; ACK];
        out[..8].copy_from_slice(&read.to_le_bytes());
        let tag = tag(&self.key, self.direction, self.seq, &out[..8]);
        self.seq = self.seq.wrapping_add(1);
        out[8..].copy_from_slice(tag.as_ref());
        out
    }
}

/// The reading end of one direction: checks each tag against the number it expects next.
pub struct Check {
    key: hmac::Key,
    direction: Direction,
    seq: u64,
}

impl Check {
    pub fn new(key: &SessionKey, direction: Direction) -> Check {
        Check { key: key.0.clone(), direction, seq: 0 }
    }

    /// Checks `tag` over `written` as the next one this way.
    pub fn check(&mut self, written: &[u8], tag_read: &[u8]) -> Result<(), LinkError> {
        if !same(tag(&self.key, self.direction, self.seq, written).as_ref(), tag_read) {
            return Err(LinkError::Forged { direction: self.direction, seq: self.seq });
        }
        self.seq = self.seq.wrapping_add(1);
        Ok(())
    }

    /// Checks the next acknowledgement this way: the count of frames it says were read.
    pub fn ack(&mut self, bytes: &[u8; ACK]) -> Result<u64, LinkError> {
        let (count, tag_read) = bytes.split_at(8);
        self.check(count, tag_read)?;
        let mut read = [0u8; 8];
        read.copy_from_slice(count);
        Ok(u64::from_le_bytes(read))
    }
}

/// Writes the length prefix of `framed` (the [`PREFIX`] bytes left for it at its start,
/// then the bus frame): `None` when the frame is longer than a link takes.
pub fn set_prefix(framed: &mut [u8]) -> Option<()> {
    let len = framed.len().checked_sub(PREFIX)?;
    if len > MAX_FRAME {
        return None;
    }
    framed.get_mut(..PREFIX)?.copy_from_slice(&u32::try_from(len).ok()?.to_le_bytes());
    Some(())
}

/// A link's reading buffer: bytes go in through [`FrameReader::room`], whole checked frames
/// come out of [`FrameReader::next`], each where it lies in the buffer (no copy; a frame
/// that arrived in pieces is gathered in place, after what was read before it moved to
/// the front). It holds at most one frame in progress: [`MAX_FRAME`] and its prefix and
/// tag, or `capacity` while frames are small.
pub struct FrameReader {
    buf: Vec<u8>,
    /// Where the bytes not parsed yet start.
    at: usize,
    /// How many bytes from `at` the frame in progress needs in all.
    need: usize,
    /// The buffer's usual size (a larger one, grown for a large frame, is let go once
    /// that frame has been read).
    capacity: usize,
}

impl FrameReader {
    pub fn new(capacity: usize) -> FrameReader {
        FrameReader { buf: Vec::with_capacity(capacity), at: 0, need: PREFIX, capacity }
    }

    /// The next whole frame, its tag checked (the bus frame, without prefix or tag);
    /// `None`: more bytes are needed (read them into [`FrameReader::room`]).
    pub fn next(&mut self, check: &mut Check) -> Result<Option<&[u8]>, LinkError> {
        let rest = self.buf.get(self.at..).unwrap_or_default();
        let Some(prefix) = rest.first_chunk::<PREFIX>() else {
            self.need = PREFIX;
            return Ok(None);
        };
        let len = u32::from_le_bytes(*prefix) as usize;
        if len > MAX_FRAME {
            return Err(LinkError::TooLarge(len));
        }
        let whole = PREFIX + len + TAG;
        let Some((written, tag_read)) = rest.get(..whole).map(|frame| frame.split_at(PREFIX + len)) else {
            self.need = whole;
            return Ok(None);
        };
        check.check(written, tag_read)?;
        let start = self.at + PREFIX;
        self.at += whole;
        self.need = PREFIX;
        Ok(self.buf.get(start..start + len))
    }

    /// Where the next bytes read go: the buffer, with what is not parsed yet moved to its
    /// start and room for at least the rest of the frame in progress.
    pub fn room(&mut self) -> &mut Vec<u8> {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        if self.buf.is_empty() && self.buf.capacity() > 4 * self.capacity {
            self.buf = Vec::with_capacity(self.capacity);
        }
        let want = self.need.max(self.capacity);
        if self.buf.capacity() < want {
            self.buf.reserve(want - self.buf.len());
        }
        &mut self.buf
    }

    /// No part of a frame is buffered (a link that ends here ends between frames).
    pub fn is_empty(&self) -> bool {
        self.at >= self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut framed = vec![0u8; PREFIX];
        framed.extend_from_slice(body);
        set_prefix(&mut framed).unwrap();
        framed
    }

    fn key() -> SessionKey {
        SessionKey::new(b"a session key of a link")
    }

    /// `bodies` sealed in order, as a dialer writes them.
    fn wire(bodies: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut seal = Seal::new(&key(), Direction::Frames);
        bodies
            .iter()
            .map(|body| {
                let mut f = framed(body);
                seal.seal(&mut f);
                f
            })
            .collect()
    }

    /// What a reader makes of `bytes`: the frames it took, and how it stopped.
    fn read(bytes: &[u8], chunk: usize) -> (Vec<Vec<u8>>, Result<(), LinkError>) {
        let mut reader = FrameReader::new(64);
        let mut check = Check::new(&key(), Direction::Frames);
        let mut frames = Vec::new();
        let mut fed = 0;
        loop {
            match reader.next(&mut check) {
                Ok(Some(frame)) => frames.push(frame.to_vec()),
                Ok(None) if fed < bytes.len() => {
                    let end = (fed + chunk).min(bytes.len());
                    reader.room().extend_from_slice(&bytes[fed..end]);
                    fed = end;
                }
                Ok(None) => return (frames, Ok(())),
                Err(e) => return (frames, Err(e)),
            }
        }
    }

    #[test]
    fn sealed_frames_come_out_whole_and_in_order_however_they_arrive() {
        let bodies: Vec<Vec<u8>> = [0usize, 1, 63, 64, 65, 300, 5].iter().map(|n| vec![*n as u8; *n]).collect();
        let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
        let bytes = wire(&refs).concat();
        for chunk in [1, 7, 64, 1000] {
            assert_eq!(read(&bytes, chunk), (bodies.clone(), Ok(())), "chunks of {chunk}");
        }
    }

    /// A relay on the link path: every change to what passes it ends the link at the
    /// first frame it touched, and the frames before it pass.
    #[test]
    fn a_changed_replayed_dropped_or_reordered_frame_fails_its_check() {
        let frames = wire(&[b"alice acts", b"bob acts", b"carol acts"]);
        let forged = |seq| Err(LinkError::Forged { direction: Direction::Frames, seq });
        // A byte flipped anywhere in the second frame: its prefix, its body or its tag.
        // (A longer length may leave the reader waiting for bytes that never pass its
        // check; its sender then finds the link unacknowledged.)
        for at in 0..frames[1].len() {
            let mut changed = frames.clone();
            changed[1][at] ^= 0x20;
            let (taken, end) = read(&changed.concat(), 1000);
            assert_eq!(taken, vec![b"alice acts".to_vec()], "byte {at}");
            assert!(end.is_err() || at < PREFIX, "byte {at}");
        }
        // The first frame again after it.
        let replayed = [&frames[0][..], &frames[0], &frames[1]].concat();
        assert_eq!(read(&replayed, 1000), (vec![b"alice acts".to_vec()], forged(1)));
        // The second frame left out.
        let dropped = [&frames[0][..], &frames[2]].concat();
        assert_eq!(read(&dropped, 1000), (vec![b"alice acts".to_vec()], forged(1)));
        // The second and third swapped.
        let reordered = [&frames[0][..], &frames[2], &frames[1]].concat();
        assert_eq!(read(&reordered, 1000), (vec![b"alice acts".to_vec()], forged(1)));
        // A frame of another link (another session key), or one sent the other way.
        let mut other = Seal::new(&SessionKey::new(b"another link's key"), Direction::Frames);
        let mut foreign = framed(b"alice acts");
        other.seal(&mut foreign);
        assert_eq!(read(&foreign, 1000), (vec![], forged(0)));
        let mut back = Seal::new(&key(), Direction::Acks);
        let mut reflected = framed(b"alice acts");
        back.seal(&mut reflected);
        assert_eq!(read(&reflected, 1000), (vec![], forged(0)));
    }

    #[test]
    fn acknowledgements_are_checked_in_order_too() {
        let mut seal = Seal::new(&key(), Direction::Acks);
        let acks: Vec<[u8; ACK]> = [3, 10, 12].iter().map(|n| seal.ack(*n)).collect();
        let mut check = Check::new(&key(), Direction::Acks);
        assert_eq!(check.ack(&acks[0]), Ok(3));
        // Replayed, skipped ahead, changed: refused, and the next one expected stays.
        assert!(check.ack(&acks[0]).is_err());
        assert!(check.ack(&acks[2]).is_err());
        let mut changed = acks[1];
        changed[0] ^= 1;
        assert!(check.ack(&changed).is_err());
        assert_eq!(check.ack(&acks[1]), Ok(10));
        // The frames' direction does not take them.
        assert!(Check::new(&key(), Direction::Frames).ack(&acks[0]).is_err());
    }

    #[test]
    fn a_length_over_the_limit_ends_the_link_before_anything_is_read_for_it() {
        let mut bytes = ((MAX_FRAME + 1) as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 16]);
        let mut reader = FrameReader::new(64);
        reader.room().extend_from_slice(&bytes);
        let mut check = Check::new(&key(), Direction::Frames);
        assert_eq!(reader.next(&mut check), Err(LinkError::TooLarge(MAX_FRAME + 1)));
        assert!(reader.room().capacity() < 1024, "nothing was reserved for it");
        let mut too_long = vec![0u8; PREFIX + MAX_FRAME + 1];
        assert_eq!(set_prefix(&mut too_long), None, "a sender never writes one");
    }

    #[test]
    fn a_large_frames_buffer_is_let_go_once_it_is_read() {
        let big = vec![7u8; 10_000];
        let bytes = wire(&[&big, b"small"]).concat();
        let mut reader = FrameReader::new(64);
        let mut check = Check::new(&key(), Direction::Frames);
        reader.room().extend_from_slice(&bytes[..100]);
        assert_eq!(reader.next(&mut check), Ok(None));
        assert!(reader.room().capacity() >= PREFIX + 10_000 + TAG, "room for the whole frame");
        reader.room().extend_from_slice(&bytes[100..]);
        assert_eq!(reader.next(&mut check).unwrap().map(<[u8]>::len), Some(10_000));
        assert_eq!(reader.next(&mut check).unwrap(), Some(&b"small"[..]));
        assert!(reader.is_empty());
        assert!(reader.room().capacity() < 1024);
    }

    proptest! {
        /// Any bytes on a link, in any pieces: an error or frames, never a panic, and no
        /// frame without its tag (the fuzz target `link_frame` runs the same for longer).
        #[test]
        fn arbitrary_bytes_never_panic_the_link_reader(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            chunk in 1usize..100,
        ) {
            let (frames, _) = read(&bytes, chunk);
            prop_assert!(frames.is_empty());
        }

        /// Sealed frames, then anything: the sealed ones pass, in order, whatever follows.
        #[test]
        fn sealed_frames_followed_by_arbitrary_bytes_pass_in_order(
            bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..5),
            tail in proptest::collection::vec(any::<u8>(), 0..80),
            chunk in 1usize..100,
        ) {
            let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
            let bytes = [wire(&refs).concat(), tail].concat();
            let (frames, _) = read(&bytes, chunk);
            prop_assert_eq!(frames, bodies);
        }
    }
}
