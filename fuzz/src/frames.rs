//! The decoders of bytes from other nodes: a bus frame (off a node's Redis channel, or out
//! of a peer link) and a peer link's frames after the handshake. Both files are
//! room-actor's own, compiled here by path rather than through a dependency on
//! room-actor (its actix, tokio, redis and SQLite stack would make the instrumented build
//! many times longer): they use nothing but serde, bincode, bytestring and ring.

#[path = "../../room-actor/src/cluster/frame.rs"]
pub mod frame;
#[path = "../../room-actor/src/cluster/link_wire.rs"]
pub mod link_wire;

use link_wire::{Check, Direction, FrameReader, Seal, SessionKey};

/// `bus_frame`: any bytes as a frame published on a node's bus channel, through
/// `frame::decode_frame` as the subscription (`bus::accept_frame`) takes it:
///
/// - it never panics, and never allocates what a length prefix asks for beyond what the
///   input can hold (`decode_bounded`; libFuzzer's 2 GB limit catches the rest);
/// - a frame that decodes, encoded again, decodes to the same envelopes and time.
pub fn bus_frame(data: &[u8]) {
    let Ok((envelopes, at)) = frame::decode_frame(data) else { return };
    let again = frame::frame_within(0, 0, &envelopes, at).expect("a decoded frame encodes");
    let (envelopes_again, at_again) = frame::decode_frame(&again).expect("an encoded frame decodes");
    assert_eq!(envelopes_again, envelopes, "a frame encoded again decodes to other envelopes");
    assert_eq!(at_again, at, "a frame encoded again has another time");
}

/// The link's session key in every case (the handshake that derives one is not fuzzed
/// here: what follows it is).
const SESSION: &[u8] = b"the session key of a fuzzed link";

/// `link_frame`: what a peer link's reader (`link/listener.rs`, `read_frames`) takes off the wire
/// after the handshake. The input is records `[kind][len][len bytes]`: an even `kind`
/// makes the bytes a frame the harness seals as the dialer's next one (length prefix and
/// tag, as `Link::send` writes it), an odd one puts them on the wire as they are (what a
/// relay on the path adds); the first record's `kind / 2 + 1` is how many bytes the
/// reader is given at a time. Then:
///
/// - the reader never panics, and every frame it passes on (to `decode_frame`, which must
///   not panic either) is one the harness sealed, in order: the first ones, byte for
///   byte (bytes a relay made cannot carry a tag; a frame's number is implicit);
/// - with no raw bytes, every sealed frame passes and the reader ends between frames;
/// - any 40 bytes of the input as an acknowledgement: an error or a count, no panic.
pub fn link_frame(data: &[u8]) {
    let key = SessionKey::new(SESSION);
    let mut seal = Seal::new(&key, Direction::Frames);
    let mut wire = Vec::new();
    let mut sealed = Vec::new();
    let mut raw = false;
    let step = data.first().map_or(1, |kind| usize::from(kind / 2) + 1);
    let mut rest = data;
    while let [kind, len, tail @ ..] = rest {
        let (bytes, after) = tail.split_at(usize::from(*len).min(tail.len()));
        if kind % 2 == 0 {
            let mut framed = vec![0u8; link_wire::PREFIX];
            framed.extend_from_slice(bytes);
            link_wire::set_prefix(&mut framed).expect("a short frame has a prefix");
            seal.seal(&mut framed);
            wire.extend_from_slice(&framed);
            sealed.push(bytes.to_vec());
        } else {
            wire.extend_from_slice(bytes);
            raw = raw || !bytes.is_empty();
        }
        rest = after;
    }
    // A small buffer, so frames straddle it and grow it as on a link.
    let mut reader = FrameReader::new(16);
    let mut check = Check::new(&key, Direction::Frames);
    let mut passed: Vec<Vec<u8>> = Vec::new();
    let mut fed = 0;
    let ended = loop {
        match reader.next(&mut check) {
            Ok(Some(frame)) => {
                let _ = frame::decode_frame(frame);
                passed.push(frame.to_vec());
            }
            Ok(None) if fed < wire.len() => {
                let end = (fed + step).min(wire.len());
                reader.room().extend_from_slice(&wire[fed..end]);
                fed = end;
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    assert!(passed.len() <= sealed.len(), "{} frames passed, {} sealed", passed.len(), sealed.len());
    assert_eq!(passed[..], sealed[..passed.len()], "a frame passed that was not the sealed one of its number");
    if !raw {
        assert_eq!(ended, Ok(()), "sealed frames alone failed the check");
        assert_eq!(passed.len(), sealed.len(), "a sealed frame did not pass");
        assert!(reader.is_empty(), "the reader ended within a frame");
    }
    if let Some(ack) = data.first_chunk::<{ link_wire::ACK }>() {
        let _ = Check::new(&key, Direction::Acks).ack(ack);
    }
}
