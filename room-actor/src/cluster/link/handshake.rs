//! The handshake that opens a link: the dialer's hello, both sides' proofs that they hold
//! the cluster's link key ([`LinkKey`]), and the session key the link's frames are tagged
//! under. Apart from the dialer's and the listener's sides, which both run it, because it
//! is the one place the key and the bytes of a hello live.

use crate::cluster::link_wire::{Check, Direction, SessionKey};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A dialer's hello: links whose frames and acknowledgements are tagged one by one. Any
/// other first four bytes are refused with a line that quotes them.
pub(super) const MAGIC: &[u8; 4] = b"RDL3";
pub(super) const NONCE: usize = 16;
pub(super) const TAG: usize = 32;
/// How long a dial, or the handshake on either side, may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// The key links are authenticated with, derived from the token secret.
pub struct LinkKey(hmac::Key);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

/// What a handshake HMAC is for: the proof of one side, or the link's session key.
#[derive(Clone, Copy)]
pub(super) enum Side {
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

    pub(super) fn tag(&self, side: Side, hello: &Hello, listener_nonce: &[u8; NONCE]) -> hmac::Tag {
        hmac::sign(&self.0, &Self::transcript(side, hello, listener_nonce))
    }

    pub(super) fn verify(&self, side: Side, hello: &Hello, listener_nonce: &[u8; NONCE], tag: &[u8]) -> bool {
        hmac::verify(&self.0, &Self::transcript(side, hello, listener_nonce), tag).is_ok()
    }

    /// The link's session key: an HMAC under the link key over the transcript, so it is
    /// new for every link (both nonces) and known only to the two nodes (the link key);
    /// derived as the proofs are, with a label of its own, never sent.
    pub(super) fn session(&self, hello: &Hello, listener_nonce: &[u8; NONCE]) -> SessionKey {
        SessionKey::new(self.tag(Side::Session, hello, listener_nonce).as_ref())
    }
}

/// What a dialer says first.
pub(super) struct Hello {
    pub(super) from: String,
    pub(super) to: String,
    pub(super) link: u64,
    pub(super) nonce: [u8; NONCE],
}

impl Hello {
    pub(super) fn encode(&self) -> Vec<u8> {
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

    pub(super) async fn read(stream: &mut TcpStream) -> io::Result<Hello> {
        let mut magic = [0u8; 4];
        stream.read_exact(&mut magic).await?;
        if &magic != MAGIC {
            return Err(refused(&format!(
                "not a roomd peer link of this version (hello {:?}, this node takes {:?}); \
                 frames between that node and this one go through Redis",
                String::from_utf8_lossy(&magic),
                String::from_utf8_lossy(MAGIC)
            )));
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

pub(super) fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_owned())
}

pub(super) fn random<const N: usize>(rng: &SystemRandom) -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    rng.fill(&mut bytes).map_err(|_| io::Error::other("no randomness for a link nonce"))?;
    Ok(bytes)
}

/// The listener's first answer: the hello was for this node, and here is its proof.
pub(super) const FOR_ME: u8 = 0;
/// The listener's first answer: the hello named another node (an address reused).
pub(super) const NOT_ME: u8 = 1;
/// The listener's last word: the dialer's proof holds, frames may follow.
pub(super) const ACCEPTED: u8 = 0;

/// The listener's side of the handshake on a connection already taken, for a receiver
/// that reads the frames itself ([`listen`](super::listen) does this for every
/// connection): the stream, on which each frame is a 4-byte little-endian length, the bus
/// frame and its tag (`link_wire.rs`), the link's id, and the check of its frames. Such a
/// receiver acknowledges nothing, so its dialer gives the link up
/// [`ACK_TIMEOUT`](super::ACK_TIMEOUT) after its first frame: a stalled receiver, to the
/// dialer.
pub async fn handshake(stream: TcpStream, key: &LinkKey, me: &str) -> io::Result<(TcpStream, u64, Check)> {
    accept(stream, key, me)
        .await
        .map(|(stream, hello, session)| (stream, hello.link, Check::new(&session, Direction::Frames)))
}

pub(super) async fn accept(
    mut stream: TcpStream,
    key: &LinkKey,
    me: &str,
) -> io::Result<(TcpStream, Hello, SessionKey)> {
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
