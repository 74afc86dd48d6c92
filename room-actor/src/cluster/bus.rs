//! Node-to-node messages over Redis pub/sub: one channel per node
//! (`<prefix>:bus:<node>`), bincode envelopes (externally tagged enums only, which
//! bincode can decode; game actions travel as JSON text inside).
//!
//! Client → room commands go to the room's owner node; room → client messages go to
//! each subscriber's gateway node, batched into one publish per node per state change.

use crate::error::StoreError;
use crate::log::{decode, encode};
use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::warn;

/// A command for a room, from a gateway on another node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RoomCmd {
    Subscribe { session: u64, user: String },
    Unsubscribe { session: u64 },
    Act { session: u64, user: String, cs: u64, action_json: String },
    Rtt { user: String, rtt_ms: u32 },
    Info { req: u64 },
    TakeSeat { req: u64, user: String, name: String, bot: bool },
    LeaveSeat { req: u64, user: String },
    Start { req: u64, user: String },
}

/// A room-level refusal carried back to the asking node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpError {
    pub status: u16,
    pub code: String,
    pub reason: String,
}

/// The answer to a request (`req`) a node made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Room info as JSON.
    Info(String),
    /// Room info as JSON after a seat change, or why not.
    Seat(Result<String, OpError>),
    /// The new game's pk, or why not.
    Start(Result<String, OpError>),
    /// The room is not on the asked node (moved, or unknown): look it up again.
    NotHere,
}

/// One message for one session on the receiving node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionText {
    pub session: u64,
    pub text: String,
    /// Close the socket after this message.
    pub close: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Envelope {
    Room { room: String, from: String, cmd: RoomCmd },
    Sessions { items: Vec<SessionText> },
    Reply { req: u64, reply: Reply },
}

pub fn channel(prefix: &str, node: &str) -> String {
    format!("{prefix}:bus:{node}")
}

/// Publishing side.
#[derive(Clone)]
pub struct Publisher {
    conn: ConnectionManager,
    prefix: String,
}

impl Publisher {
    pub fn new(conn: ConnectionManager, prefix: &str) -> Publisher {
        Publisher { conn, prefix: prefix.to_owned() }
    }

    /// Publishes to `node`'s channel; `Unavailable` when Redis fails or when nobody
    /// listens there (the node is gone).
    pub async fn send(&self, node: &str, envelope: &Envelope) -> Result<(), StoreError> {
        let bytes = encode(envelope)?;
        let mut conn = self.conn.clone();
        let receivers = redis::cmd("PUBLISH")
            .arg(channel(&self.prefix, node))
            .arg(bytes)
            .query_async::<i64>(&mut conn)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        if receivers == 0 {
            return Err(StoreError::Unavailable(format!("no node listens on {node}'s channel")));
        }
        Ok(())
    }
}

/// Decodes one message from the channel; a malformed one is logged and dropped, never
/// allowed to take the node down.
pub fn decode_envelope(bytes: &[u8]) -> Option<Envelope> {
    match decode::<Envelope>(bytes) {
        Ok(envelope) => Some(envelope),
        Err(e) => {
            warn!(error = %e, len = bytes.len(), "malformed bus envelope dropped");
            None
        }
    }
}

/// Subscribes to this node's channel and forwards decoded envelopes, resubscribing with
/// backoff whenever Redis goes away, until the receiver is dropped.
pub fn subscribe(url: String, prefix: String, node: String) -> mpsc::UnboundedReceiver<Envelope> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(50);
        loop {
            let attempt = async {
                let client = redis::Client::open(url.as_str())?;
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(channel(&prefix, &node)).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            match attempt.await {
                Ok(mut pubsub) => {
                    backoff = Duration::from_millis(50);
                    let mut messages = pubsub.on_message();
                    while let Some(msg) = messages.next().await {
                        let payload: Vec<u8> = msg.get_payload_bytes().to_vec();
                        if let Some(envelope) = decode_envelope(&payload) {
                            if tx.send(envelope).is_err() {
                                return;
                            }
                        }
                    }
                    warn!(node = %node, "bus subscription lost; resubscribing");
                }
                Err(e) => warn!(node = %node, error = %e, "bus subscribe failed; retrying"),
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_garbage_is_dropped() {
        let env = Envelope::Room {
            room: "r".into(),
            from: "n1".into(),
            cmd: RoomCmd::Act { session: 7, user: "u".into(), cs: 3, action_json: r#"{"type":"flip"}"#.into() },
        };
        assert_eq!(decode_envelope(&encode(&env).unwrap()), Some(env));
        let reply = Envelope::Reply {
            req: 1,
            reply: Reply::Seat(Err(OpError {
                status: 409, code: "room_full".into(), reason: "자리가 없어요".into()
            })),
        };
        assert_eq!(decode_envelope(&encode(&reply).unwrap()), Some(reply));
        assert_eq!(decode_envelope(b"\xff\xff\xff\x00garbage"), None);
        assert_eq!(decode_envelope(&[]), None);
    }
}
