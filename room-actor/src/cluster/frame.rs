//! A bus frame as bytes: the envelopes nodes send each other and their encoding, and a
//! decoder that bounds every length it reads by the bytes it was given.
//!
//! A frame is `[FRAME_VERSION][sent_at: u64 LE, µs since the Unix epoch]` followed by the
//! bincode envelopes (a `Vec<Envelope>`, in order). It comes through Redis pub/sub
//! (`bus.rs`) or on a peer link (`link.rs`, sealed there by `link_wire.rs`), so it is
//! decoded from bytes anyone who can publish on a node's channel may have written: a bad
//! frame is an error to drop and count, never an allocation its length prefixes ask for
//! nor a panic (`decode_bounded`).
//!
//! This file uses nothing but serde, bincode and bytestring, so the fuzz crate compiles
//! it by path (`fuzz/src/lib.rs`, target `bus_frame`) without the rest of room-actor.

use bytestring::ByteString;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A command for a room, from another node. The verb inside is bincode of its own
/// (`protocol.rs`: `SessionVerb`, `Request`), so a node that does not know it still
/// reads the frame around it and answers (a request) or drops it alone (a session
/// verb): adding a room verb changes no byte here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RoomCmd {
    /// A WebSocket session's verb, answered on the session (on the sending node).
    Tell { session: u64, user: String, verb: Vec<u8> },
    /// A request, answered with a [`Reply`] to `req`.
    Ask { req: u64, verb: Vec<u8> },
}

/// A command for a node itself (operators), not for one of its rooms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum NodeCmd {
    /// Drain exactly as on SIGTERM; `by` is the operator's fingerprint for the audit log.
    Drain { req: u64, by: String },
}

/// A room operation failed: the one error of every request verb, whether the room
/// answered here or on another node (it travels in bus replies as it is). `status` is
/// the HTTP status, `code` stable English, `reason` Korean for people. Defined here,
/// with the frames that carry it, so the fuzz crate decodes the real type; its
/// constructors are in `messages.rs`, which re-exports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomOpError {
    pub status: u16,
    pub code: Cow<'static, str>,
    pub reason: Cow<'static, str>,
}

/// The answer to a request (`req`) a node made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// The room's answer as JSON (`protocol.rs`: `Answer`), or why not.
    Answer(Result<String, RoomOpError>),
    /// The room is not on the asked node (moved, or unknown): look it up again.
    NotHere,
    /// A node command was accepted.
    Accepted,
}

/// One message for one session on the receiving node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionFrame {
    pub session: u64,
    /// Its text: an index into the envelope's `texts` (sessions shown the same update
    /// share one text).
    pub text: u32,
    /// Close the socket after this message.
    pub close: bool,
    /// The frame's room when it is a `room_moved`/`room_unavailable` (the session's route
    /// to it is stale; see `ToClient::stale_route`).
    pub stale_route: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Envelope {
    Room {
        room: String,
        from: String,
        cmd: RoomCmd,
    },
    /// `texts` are the frames' texts as the rooms built them (bincode writes them as
    /// strings): a text crosses without a copy into a `String` on either side.
    Sessions {
        texts: Vec<ByteString>,
        items: Vec<SessionFrame>,
    },
    Reply {
        req: u64,
        reply: Reply,
    },
    Node {
        from: String,
        cmd: NodeCmd,
    },
    /// The last frame `from` publishes through Redis before it sends on its new peer link
    /// `link` (`link.rs`): that link's frames wait for this. Appended last, so the other
    /// variants keep their encoding; only sent to nodes that advertise links (this build
    /// or newer), so the frame version stays.
    Link {
        from: String,
        link: u64,
    },
    /// The first frame `from` publishes through Redis after it gave up its peer link
    /// `link` (a write failed or timed out): the receiver drops whatever of that link it
    /// has not taken yet, so nothing written on the link comes after what follows through
    /// Redis (it is lost instead, as a pub/sub message is when a subscription drops).
    /// Appended last and sent in a frame of its own, for the same reasons as `Link`.
    Unlink {
        from: String,
        link: u64,
    },
}

/// The bus frame format this build speaks; bump it whenever `Envelope` changes shape.
/// 3: `SessionText.stale_route` (a typed flag instead of scanning frames for codes).
/// 4: a frame carries a batch of envelopes; session frames share their texts.
/// 5: one room protocol: `RoomCmd::Tell`/`Ask` carry any verb as bytes of its own, so a
/// new verb needs no new version.
pub const FRAME_VERSION: u8 = 5;
/// The version byte and the timestamp.
pub const HEADER: usize = 9;

fn unix_micros(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map(|d| d.as_micros().min(u128::from(u64::MAX)) as u64).unwrap_or(0)
}

/// The frame of `envelopes` (delivered in this order) as sent at `at`, after `before`
/// zero bytes the caller fills in (a peer link's length prefix) and with room for `after`
/// more (its tag), in one buffer: the header, then the envelopes written in place (no
/// second buffer and copy).
pub fn frame_within(
    before: usize,
    after: usize,
    envelopes: &[Envelope],
    at: SystemTime,
) -> Result<Vec<u8>, bincode::error::EncodeError> {
    let mut frame = Vec::with_capacity(before + HEADER + 256 + after);
    frame.resize(before, 0);
    frame.push(FRAME_VERSION);
    frame.extend_from_slice(&unix_micros(at).to_le_bytes());
    bincode::serde::encode_into_std_write(envelopes, &mut frame, bincode::config::standard())?;
    Ok(frame)
}

/// Why a frame was dropped.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than the header.
    Truncated,
    /// Another roomd version's frame.
    Version(u8),
    /// The envelopes do not decode.
    Malformed(String),
}

/// Decodes a frame into its envelopes and the time it was published.
pub fn decode_frame(bytes: &[u8]) -> Result<(Vec<Envelope>, SystemTime), FrameError> {
    let Some((header, body)) = bytes.split_first_chunk::<HEADER>() else {
        return Err(FrameError::Truncated);
    };
    let [version, stamp @ ..] = *header;
    if version != FRAME_VERSION {
        return Err(FrameError::Version(version));
    }
    let sent = UNIX_EPOCH + Duration::from_micros(u64::from_le_bytes(stamp));
    let envelopes = decode_bounded::<Vec<Envelope>>(body).map_err(FrameError::Malformed)?;
    Ok((envelopes, sent))
}

/// Decodes bare bincode (serde, the standard configuration), every byte used, reading no
/// length that asks for more than the input could hold.
///
/// Without a limit, bincode 2 allocates what a string's or a byte vector's length prefix
/// says before it reads the bytes (`vec![0; len]`): a prefix of `fd ff ff ff ff ff ff ff ff`
/// (2^64 − 1) is a "capacity overflow" panic, a smaller huge one an allocation that large.
/// With a limit it checks each length first (`claim_container_read`) against a budget
/// that every primitive read also draws from, by its size in memory: at most 16 bytes
/// (a `u128`) for each byte of input it consumes, since every one of them reads a byte
/// or more. So a budget of 16 × the input's length never refuses a value roomd encoded,
/// and refuses any length the input cannot hold long before it is allocated. The limit
/// is a type parameter: a few classes of input length stand in for 16 × it, so a short
/// frame can ask for 1 MiB at most. (Sequences of other types go through serde, which
/// preallocates at most 1 MiB whatever their prefix says.)
pub fn decode_bounded<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.len() {
        n if n <= 64 << 10 => decode_within::<T, { 1 << 20 }>(bytes),
        n if n <= 1 << 20 => decode_within::<T, { 16 << 20 }>(bytes),
        n if n <= MAX_DECODED => decode_within::<T, { 16 * MAX_DECODED }>(bytes),
        n => Err(format!("{n} bytes: more than roomd ever encodes in one value ({MAX_DECODED} bytes)")),
    }
}

/// The longest input [`decode_bounded`] takes (64 MiB): well above the largest frame
/// (a peer link's limit is 16 MiB) or stored value roomd writes.
pub const MAX_DECODED: usize = 64 << 20;

fn decode_within<T: DeserializeOwned, const LIMIT: usize>(bytes: &[u8]) -> Result<T, String> {
    let config = bincode::config::standard().with_limit::<LIMIT>();
    let (value, read) = bincode::serde::decode_from_slice(bytes, config).map_err(|e| e.to_string())?;
    if read != bytes.len() {
        return Err(format!("{} trailing bytes", bytes.len() - read));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(envelopes: &[Envelope]) -> Vec<u8> {
        frame_within(0, 0, envelopes, SystemTime::now()).unwrap()
    }

    /// The header of a frame published now.
    fn header() -> Vec<u8> {
        let mut bytes = vec![FRAME_VERSION];
        bytes.extend_from_slice(&unix_micros(SystemTime::now()).to_le_bytes());
        bytes
    }

    /// The frame of the finding (issue 55): a bincode length prefix of 2^64 − 1 where
    /// the decoder reads a length. Today's 19 bytes put it where the batch's length is;
    /// one byte more (a batch of one `Room` envelope) puts it where its room id's length
    /// is, which is what bincode allocated for and panicked on ("capacity overflow").
    #[test]
    fn a_length_prefix_of_two_to_the_64_is_an_error_not_an_allocation() {
        let huge = [0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        let nineteen = [&header()[..], &huge, &[0x00]].concat();
        assert_eq!(nineteen.len(), 19);
        assert!(matches!(decode_frame(&nineteen), Err(FrameError::Malformed(_))));
        let in_a_string = [&header()[..], &[0x01, 0x00], &huge].concat();
        assert!(matches!(decode_frame(&in_a_string), Err(FrameError::Malformed(e)) if e.contains("Limit")));
        // Lengths the input cannot hold, but that fit in memory, are refused the same way
        // before they are allocated: 4 GiB, 64 MiB and one byte more than the input.
        for len in [u64::from(u32::MAX), 64 << 20, 3] {
            let mut bytes = [&header()[..], &[0x01, 0x00, 0xfd]].concat();
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(b"ab");
            assert!(matches!(decode_frame(&bytes), Err(FrameError::Malformed(_))), "{len}");
        }
    }

    #[test]
    fn the_largest_frames_roomd_sends_decode_within_the_bound() {
        // An outbox's biggest batch: 512 messages and 1 MiB of texts.
        let texts: Vec<ByteString> = (0..16).map(|i| ByteString::from(format!("{i}").repeat(64 << 10))).collect();
        let items = (0..511)
            .map(|i| SessionFrame { session: u64::MAX - i, text: (i % 16) as u32, close: false, stale_route: None })
            .collect();
        let batch = vec![Envelope::Sessions { texts, items }, Envelope::Reply { req: 1, reply: Reply::NotHere }];
        assert_eq!(decode_frame(&frame(&batch)).unwrap().0, batch);
        // Many envelopes of a byte or two each: the most a frame reads per byte.
        let small = vec![Envelope::Reply { req: 0, reply: Reply::NotHere }; 100_000];
        assert_eq!(decode_frame(&frame(&small)).unwrap().0, small);
    }

    /// The bound is 16 × the input: a `u128` of 0 is one byte and claims 16, the most any
    /// value claims per byte. The longest such input of each class decodes.
    #[test]
    fn values_that_claim_the_most_per_byte_decode_at_each_class_boundary() {
        for class in [64 << 10, 1 << 20] {
            let encoded = bincode::serde::encode_to_vec(vec![0u128; class - 5], bincode::config::standard()).unwrap();
            assert!(encoded.len() <= class, "{} bytes", encoded.len());
            assert_eq!(decode_bounded::<Vec<u128>>(&encoded).unwrap().len(), class - 5);
        }
    }

    #[test]
    fn trailing_bytes_and_inputs_over_the_limit_are_refused() {
        let mut bytes = frame(&[Envelope::Reply { req: 1, reply: Reply::Accepted }]);
        bytes.push(0);
        assert!(matches!(decode_frame(&bytes), Err(FrameError::Malformed(e)) if e.contains("trailing")));
        let too_long = vec![0u8; MAX_DECODED + 1];
        assert!(decode_bounded::<Vec<u8>>(&too_long).unwrap_err().contains("more than roomd ever encodes"));
    }

    proptest! {
        /// Any bytes at all: an error or envelopes, never a panic (the fuzz target
        /// `bus_frame` runs the same for longer).
        #[test]
        fn arbitrary_bytes_never_panic_the_frame_decoder(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_frame(&body);
            let _ = decode_frame(&[&header()[..], &body].concat());
        }

        /// Bytes that start like a frame of one envelope, then anything: the decoder goes
        /// deeper into the envelopes than from arbitrary bytes.
        #[test]
        fn frames_with_arbitrary_envelope_bytes_never_panic(
            variant in 0u8..8,
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let _ = decode_frame(&[&header()[..], &[0x01, variant], &body].concat());
        }
    }
}
