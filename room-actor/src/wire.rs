//! Server → client messages (`PROTOCOL.md`), built as JSON text once in the room and
//! forwarded as-is. Views arrive already serialized, so they are spliced in rather than
//! parsed again.

use actix::Message;
use bytestring::ByteString;
use serde::Serialize;
use serde_json::json;
use std::sync::Arc;

/// JSON text for one client. A [`ByteString`] (shared bytes) so a frame fanned out to many
/// sessions is written to each socket without a copy of its own.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct ToClient {
    /// A complete server → client message (one of this module's).
    pub text: ByteString,
    /// Send `text`, then close the socket: the room dropped this slow subscriber.
    pub close: bool,
    /// Set on `room_moved` and `room_unavailable` frames: the session's route to this
    /// room is stale, and it looks the room up again before its next message there.
    pub stale_route: Option<Arc<str>>,
}

impl ToClient {
    /// A frame to send as it is.
    pub fn frame(text: impl Into<ByteString>) -> ToClient {
        ToClient { text: text.into(), close: false, stale_route: None }
    }

    /// The last frame: the socket closes after it (a slow subscriber dropped).
    pub fn closing(text: impl Into<ByteString>) -> ToClient {
        ToClient { text: text.into(), close: true, stale_route: None }
    }

    /// A frame after which the session's route to `room` is stale (`wire::room_moved`,
    /// `wire::resend`, `wire::room_unavailable`).
    pub fn stale(room: &str, text: impl Into<ByteString>) -> ToClient {
        ToClient { text: text.into(), close: false, stale_route: Some(room.into()) }
    }
}

fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_quoted(&mut out, s);
    out
}

/// Appends `s` as a JSON string. Room ids, codes and the like need no escaping, so they
/// are copied as they are; anything else goes through serde_json's escaping.
fn push_quoted(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()));
    }
}

/// `{"t":"sync","room":R,"seq":N,"view":{…}}`
pub fn sync(room: &str, seq: u64, view_json: &str) -> String {
    format!(r#"{{"t":"sync","room":{},"seq":{seq},"view":{view_json}}}"#, quoted(room))
}

/// `{"t":"update","room":R,"seq":N,"view":{…},"events":[…]}`
pub fn update(room: &str, seq: u64, view_json: &str, events_json: &str) -> String {
    // Sized up front: a bare `format!` would regrow its buffer over a view of a few KB.
    let mut out = String::with_capacity(64 + room.len() + view_json.len() + events_json.len());
    out.push_str(r#"{"t":"update","room":"#);
    push_quoted(&mut out, room);
    out.push_str(r#","seq":"#);
    out.push_str(itoa::Buffer::new().format(seq));
    out.push_str(r#","view":"#);
    out.push_str(view_json);
    out.push_str(r#","events":"#);
    out.push_str(events_json);
    out.push('}');
    out
}

/// `{"t":"ack","room":R,"cs":7,"seq":42}`
pub fn ack(room: &str, cs: u64, seq: u64) -> String {
    // Keys in the order serde_json's map writes them (sorted), as before.
    let mut out = String::with_capacity(48 + room.len());
    out.push_str(r#"{"cs":"#);
    out.push_str(itoa::Buffer::new().format(cs));
    out.push_str(r#","room":"#);
    push_quoted(&mut out, room);
    out.push_str(r#","seq":"#);
    out.push_str(itoa::Buffer::new().format(seq));
    out.push_str(r#","t":"ack"}"#);
    out
}

/// `{"t":"reject","room":R,"cs":7,"code":"late","reason":"늦었어요"}`
pub fn reject(room: &str, cs: u64, code: &str, reason: &str) -> String {
    format!(r#"{{"code":{},"cs":{cs},"reason":{},"room":{},"t":"reject"}}"#, quoted(code), quoted(reason), quoted(room))
}

/// `{"t":"result","room":R,"gamePk":"…","result":{…}}`
pub fn result(room: &str, game_pk: &str, result_json: &str) -> String {
    format!(r#"{{"t":"result","room":{},"gamePk":{},"result":{result_json}}}"#, quoted(room), quoted(game_pk))
}

/// `{"t":"chat","room":R,"from":USER,"phrase":KEY}`: a quick-chat phrase, for every
/// subscriber (not part of the game log).
pub fn chat(room: &str, from: &str, phrase: &str) -> String {
    format!(r#"{{"t":"chat","room":{},"from":{},"phrase":{}}}"#, quoted(room), quoted(from), quoted(phrase))
}

/// `{"t":"error","code":…,"reason":…}`, with the room and cs when the error is about an action.
pub fn error(code: &str, reason: &str, room: Option<&str>, cs: Option<u64>) -> String {
    let mut v = json!({"t": "error", "code": code, "reason": reason});
    if let Some(room) = room {
        v["room"] = json!(room);
    }
    if let Some(cs) = cs {
        v["cs"] = json!(cs);
    }
    v.to_string()
}

/// The protocol's room-level error codes and their one Korean text each. Frames and HTTP
/// errors with these codes are built from here ([`room_unavailable`], [`resend`],
/// [`room_moved`], [`unknown_room`]; `RoomOpError::unavailable`/`unknown_room`).
pub mod codes {
    /// The room exists but cannot answer this moment (moving, stalled, slow store).
    pub const ROOM_UNAVAILABLE: &str = "room_unavailable";
    /// The room stopped here: look it up again (it moved to another node).
    pub const ROOM_MOVED: &str = "room_moved";
    /// No such room (never created, or gone).
    pub const UNKNOWN_ROOM: &str = "unknown_room";
    /// `room_unavailable` for a request the client may simply try again.
    pub const TRY_AGAIN_TEXT: &str = "잠시 후 다시 시도해 주세요";
    /// `room_unavailable` for an action (or a command) the client should resend as it was.
    pub const RESEND_TEXT: &str = "잠시 후 같은 요청을 다시 보내 주세요";
    pub const ROOM_MOVED_TEXT: &str = "방이 다른 서버로 옮겨졌어요. 다시 접속해 주세요";
    /// `room_moved` while the room is being handed over (a drain): it is moving now.
    pub const ROOM_MOVING_TEXT: &str = "방이 다른 서버로 옮겨져요. 다시 접속해 주세요";
    pub const UNKNOWN_ROOM_TEXT: &str = "없는 방이에요";
}

/// `room_unavailable` for a request about `room` (try again later).
pub fn room_unavailable(room: &str) -> String {
    error(codes::ROOM_UNAVAILABLE, codes::TRY_AGAIN_TEXT, Some(room), None)
}

/// `room_unavailable` for an action `cs` (or a command, without one) the client should
/// send again unchanged: the room exists, nothing was applied.
pub fn resend(room: &str, cs: Option<u64>) -> String {
    error(codes::ROOM_UNAVAILABLE, codes::RESEND_TEXT, Some(room), cs)
}

/// `room_moved`: the room is no longer here; the client subscribes again.
pub fn room_moved(room: &str) -> String {
    error(codes::ROOM_MOVED, codes::ROOM_MOVED_TEXT, Some(room), None)
}

/// `room_moved` from a room being handed over to another node (a drain).
pub fn room_moving(room: &str) -> String {
    error(codes::ROOM_MOVED, codes::ROOM_MOVING_TEXT, Some(room), None)
}

/// `unknown_room` as an error frame (a `sub`).
pub fn unknown_room(room: &str) -> String {
    error(codes::UNKNOWN_ROOM, codes::UNKNOWN_ROOM_TEXT, Some(room), None)
}

/// `unknown_room` as the reject of an action `cs`.
pub fn reject_unknown_room(room: &str, cs: u64) -> String {
    reject(room, cs, codes::UNKNOWN_ROOM, codes::UNKNOWN_ROOM_TEXT)
}

/// `{"t":"room","room":R,"info":{…}}`: the room's seats or status changed (not a game input).
pub fn room_info<T: Serialize>(room: &str, info: &T) -> String {
    json!({"t": "room", "room": room, "info": info}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn spliced_messages_are_valid_json_with_protocol_names() {
        let v: Value = serde_json::from_str(&update("r\"1", 42, r#"{"count":1}"#, "[]")).unwrap();
        assert_eq!(v["t"], "update");
        assert_eq!(v["room"], "r\"1");
        assert_eq!(v["seq"], 42);
        assert_eq!(v["view"]["count"], 1);
        let v: Value = serde_json::from_str(&result("r", "g", r#"{"summary":"끝"}"#)).unwrap();
        assert_eq!(v["gamePk"], "g");
        let v: Value = serde_json::from_str(&reject("r", 7, "late", "늦었어요")).unwrap();
        assert_eq!(
            (v["cs"].as_u64(), v["code"].as_str(), v["reason"].as_str()),
            (Some(7), Some("late"), Some("늦었어요"))
        );
        let v: Value =
            serde_json::from_str(&error("room_unavailable", "잠시 후 다시 보내 주세요", Some("r"), Some(7))).unwrap();
        assert_eq!(v["cs"], 7);
    }

    #[test]
    fn hand_built_frames_read_as_the_json_they_replace() {
        for room in ["r", "r\"1\\", "방 1"] {
            let ack_v: Value = serde_json::from_str(&ack(room, 7, 42)).unwrap();
            assert_eq!(ack_v, json!({"t": "ack", "room": room, "cs": 7, "seq": 42}));
            assert_eq!(ack(room, 7, 42), json!({"t": "ack", "room": room, "cs": 7, "seq": 42}).to_string());
            let reject_v = json!({"t": "reject", "room": room, "cs": 7, "code": "late", "reason": "늦\"었어요"});
            assert_eq!(reject(room, 7, "late", "늦\"었어요"), reject_v.to_string());
            let update_v: Value = serde_json::from_str(&update(room, 3, r#"{"a":[1]}"#, r#"[{"e":1}]"#)).unwrap();
            assert_eq!(
                update_v,
                json!({"t": "update", "room": room, "seq": 3, "view": {"a": [1]}, "events": [{"e": 1}]})
            );
        }
    }

    #[test]
    fn quoted_strings_read_back_as_themselves() {
        for s in ["", "r1", "방 1", "a\"b", "back\\slash", "tab\tnew\nline", "\u{1}", "\u{7f}\u{2028}"] {
            let back: String = serde_json::from_str(&quoted(s)).unwrap();
            assert_eq!(back, s);
            assert_eq!(quoted(s), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn room_errors_have_one_text_each() {
        let v: Value = serde_json::from_str(&resend("r", Some(7))).unwrap();
        assert_eq!(
            (v["code"].as_str(), v["reason"].as_str(), v["cs"].as_u64()),
            (Some("room_unavailable"), Some(codes::RESEND_TEXT), Some(7))
        );
        let v: Value = serde_json::from_str(&room_unavailable("r")).unwrap();
        assert_eq!((v["reason"].as_str(), v.get("cs")), (Some(codes::TRY_AGAIN_TEXT), None));
        for (frame, reason) in [(room_moved("r"), codes::ROOM_MOVED_TEXT), (room_moving("r"), codes::ROOM_MOVING_TEXT)]
        {
            let v: Value = serde_json::from_str(&frame).unwrap();
            assert_eq!(
                (v["code"].as_str(), v["reason"].as_str(), v["room"].as_str()),
                (Some("room_moved"), Some(reason), Some("r"))
            );
        }
        let v: Value = serde_json::from_str(&reject_unknown_room("r", 1)).unwrap();
        assert_eq!((v["code"].as_str(), v["reason"].as_str()), (Some("unknown_room"), Some(codes::UNKNOWN_ROOM_TEXT)));
    }
}
