//! A WebSocket's incoming frames, read from the request body one at a time, with each
//! frame's size decided from its header before its payload is read.
//!
//! Why not actix-web-actors' own reader: it pulls every byte the body has into its buffer
//! before it decodes anything, and actix-http's parser compares a frame's announced length
//! with the limit only once the whole frame has arrived. A client that announced a frame
//! of 2^40 bytes and kept sending made the node hold everything it sent (finding 1 of the
//! second security review). Here a header that announces more than the limit ends the
//! stream with [`ProtocolError::Overflow`] (the session closes with 1009) as soon as the
//! header is read, and the body is read only while no whole frame is buffered: what a
//! socket holds unread is one frame up to the limit, its header, and the chunk that
//! completed it (plus what actix-http buffers below, 32 KiB, before it stops reading the
//! socket). Decoding itself stays actix-http's (`Codec`: masking, control-frame rules,
//! continuation order); only the header's length is read here, which is all the limit
//! needs.

use actix_codec::Decoder;
use actix_http::error::PayloadError;
use actix_http::ws::{Codec, Frame, Message, ProtocolError};
use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use futures_util::Stream;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A text frame (or reassembled text message) whose bytes are not UTF-8: the session
/// closes with 1007, not the 1002 of other protocol errors.
#[derive(Debug, thiserror::Error)]
#[error("text frame is not valid UTF-8")]
pub struct NotUtf8;

/// Whether `error` is [`NotUtf8`].
pub fn is_not_utf8(error: &ProtocolError) -> bool {
    matches!(error, ProtocolError::Io(e) if e.get_ref().is_some_and(|inner| inner.is::<NotUtf8>()))
}

/// The frames of one socket's body `S`.
pub struct Frames<S> {
    body: S,
    buf: BytesMut,
    codec: Codec,
    max_frame: usize,
    /// The body ended, an error was returned, or a close frame was read: nothing more is
    /// read or returned.
    done: bool,
    /// The body ended: frames still buffered are returned, then the stream ends.
    eof: bool,
}

impl<S> Frames<S> {
    /// Reads frames of at most `max_frame` payload bytes from `body`.
    pub fn new(body: S, max_frame: usize) -> Frames<S> {
        Frames {
            body,
            buf: BytesMut::new(),
            codec: Codec::new().max_size(max_frame),
            max_frame,
            done: false,
            eof: false,
        }
    }

    /// The next whole frame in the buffer, if there is one. An announced length over the
    /// limit is refused here, from the header alone.
    fn decode(&mut self) -> Result<Option<Message>, ProtocolError> {
        if announced_len(&self.buf).is_some_and(|len| len > self.max_frame as u64) {
            // Nothing of it is kept: the socket closes.
            self.buf = BytesMut::new();
            return Err(ProtocolError::Overflow);
        }
        let Some(frame) = self.codec.decode(&mut self.buf)? else { return Ok(None) };
        Ok(Some(match frame {
            Frame::Text(data) => Message::Text(
                ByteString::try_from(data)
                    .map_err(|_| ProtocolError::Io(io::Error::new(io::ErrorKind::InvalidData, NotUtf8)))?,
            ),
            Frame::Binary(data) => Message::Binary(data),
            Frame::Ping(data) => Message::Ping(data),
            Frame::Pong(data) => Message::Pong(data),
            Frame::Close(reason) => Message::Close(reason),
            Frame::Continuation(item) => Message::Continuation(item),
        }))
    }
}

/// The payload length a frame's header announces, once enough of the header is here to
/// tell (RFC 6455 §5.2: 7 bits, or 126 + 16 bits, or 127 + 64 bits).
fn announced_len(buf: &[u8]) -> Option<u64> {
    let len7 = buf.get(1)? & 0x7F;
    match len7 {
        126 => Some(u64::from(u16::from_be_bytes(buf.get(2..4)?.try_into().ok()?))),
        127 => Some(u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?)),
        short => Some(u64::from(short)),
    }
}

impl<S> Stream for Frames<S>
where
    S: Stream<Item = Result<Bytes, PayloadError>> + Unpin,
{
    type Item = Result<Message, ProtocolError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match this.decode() {
                Ok(Some(message)) => {
                    // After a close frame the peer sends nothing more that counts.
                    this.done = matches!(message, Message::Close(_));
                    return Poll::Ready(Some(Ok(message)));
                }
                Ok(None) if this.eof => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Ok(None) => {}
                Err(e) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
            // No whole frame buffered: read one more chunk of the body, and only then.
            match Pin::new(&mut this.body).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => this.buf.extend_from_slice(&chunk),
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(ProtocolError::Io(io::Error::other(e.to_string())))));
                }
                Poll::Ready(None) => this.eof = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    /// A masked client frame: `opcode` with FIN, the length as announced, then `payload`.
    fn frame(opcode: u8, announced: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0x80 | opcode];
        match announced {
            0..=125 => out.push(0x80 | announced as u8),
            126..=0xFFFF => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(announced as u16).to_be_bytes());
            }
            _ => {
                out.push(0x80 | 127);
                out.extend_from_slice(&announced.to_be_bytes());
            }
        }
        // A zero mask leaves the payload as it is.
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(payload);
        out
    }

    /// A body that yields `chunks` and then, instead of ending, counts how often it is
    /// polled for more (a socket that keeps sending would be read that often).
    struct Body {
        chunks: std::collections::VecDeque<Bytes>,
        polled_after: std::rc::Rc<std::cell::Cell<usize>>,
        endless: bool,
    }

    impl Stream for Body {
        type Item = Result<Bytes, PayloadError>;
        fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            match self.chunks.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(chunk))),
                None if self.endless => {
                    self.polled_after.set(self.polled_after.get() + 1);
                    Poll::Ready(Some(Ok(Bytes::from(vec![0u8; 64 * 1024]))))
                }
                None => Poll::Ready(None),
            }
        }
    }

    fn sender(chunks: Vec<Vec<u8>>, endless: bool) -> (Body, std::rc::Rc<std::cell::Cell<usize>>) {
        let polled = std::rc::Rc::new(std::cell::Cell::new(0));
        (Body { chunks: chunks.into_iter().map(Bytes::from).collect(), polled_after: polled.clone(), endless }, polled)
    }

    #[tokio::test]
    async fn a_header_announcing_more_than_the_limit_ends_the_stream_before_any_payload_is_read() {
        // The finding: 2^40 announced, and the sender keeps sending.
        let (body, polled) = sender(vec![frame(0x2, 1 << 40, &[])], true);
        let mut frames = Frames::new(body, 64 * 1024);
        assert!(matches!(frames.next().await, Some(Err(ProtocolError::Overflow))));
        assert_eq!(polled.get(), 0, "not one byte of the payload was asked for");
        assert!(frames.buf.capacity() < 1024, "nothing of it is held");
        assert!(frames.next().await.is_none(), "and nothing more is read");
        // Just over the limit, with the 16-bit length, and the header split across chunks.
        let whole = frame(0x1, 1025, &[]);
        let (body, _) = sender(vec![whole[..1].to_vec(), whole[1..3].to_vec(), whole[3..].to_vec()], true);
        assert!(matches!(Frames::new(body, 1024).next().await, Some(Err(ProtocolError::Overflow))));
    }

    #[tokio::test]
    async fn frames_at_the_limit_split_anywhere_arrive_whole_and_in_order() {
        let big = vec![b'x'; 1024];
        let bytes: Vec<u8> =
            [frame(0x1, 1024, &big), frame(0x9, 2, b"hi"), frame(0x1, 2, b"{}"), frame(0x8, 2, &1000u16.to_be_bytes())]
                .concat();
        for split in [1, 3, 7, 100, bytes.len()] {
            let (body, _) = sender(bytes.chunks(split).map(<[u8]>::to_vec).collect(), false);
            let got: Vec<_> = Frames::new(body, 1024).collect().await;
            assert_eq!(got.len(), 4, "split {split}: {got:?}");
            assert!(matches!(&got[0], Ok(Message::Text(t)) if t.len() == 1024));
            assert!(matches!(&got[1], Ok(Message::Ping(p)) if &p[..] == b"hi"));
            assert!(matches!(&got[2], Ok(Message::Text(t)) if t == "{}"));
            assert!(matches!(&got[3], Ok(Message::Close(Some(_)))));
        }
    }

    #[tokio::test]
    async fn the_body_is_read_only_while_no_whole_frame_is_buffered() {
        // Many small frames in one chunk, then an endless sender: returning the buffered
        // frames asks the body for nothing more.
        let many: Vec<u8> = (0..100).flat_map(|_| frame(0x9, 0, &[])).collect();
        let (body, polled) = sender(vec![many], true);
        let mut frames = Frames::new(body, 1024);
        for _ in 0..100 {
            assert!(matches!(frames.next().await, Some(Ok(Message::Ping(_)))));
        }
        assert_eq!(polled.get(), 0);
    }

    #[tokio::test]
    async fn text_that_is_not_utf8_is_told_apart_from_other_protocol_errors() {
        let (body, _) = sender(vec![frame(0x1, 2, &[0xC3, 0x28])], false);
        let got = Frames::new(body, 1024).next().await;
        assert!(matches!(&got, Some(Err(e)) if is_not_utf8(e)), "{got:?}");
        let unmasked = vec![0x81, 0x02, b'h', b'i'];
        let (body, _) = sender(vec![unmasked], false);
        let got = Frames::new(body, 1024).next().await;
        assert!(matches!(&got, Some(Err(e)) if !is_not_utf8(e)), "{got:?}");
    }
}
