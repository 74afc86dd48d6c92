//! Server → client messages (`PROTOCOL.md`), built as JSON text once in the room and
//! forwarded as-is. Views arrive already serialized, so they are spliced in rather than
//! parsed again.

use serde::Serialize;
use serde_json::json;

fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// `{"t":"sync","room":R,"seq":N,"view":{…}}`
pub fn sync(room: &str, seq: u64, view_json: &str) -> String {
    format!(r#"{{"t":"sync","room":{},"seq":{seq},"view":{view_json}}}"#, quoted(room))
}

/// `{"t":"update","room":R,"seq":N,"view":{…},"events":[…]}`
pub fn update(room: &str, seq: u64, view_json: &str, events_json: &str) -> String {
    format!(r#"{{"t":"update","room":{},"seq":{seq},"view":{view_json},"events":{events_json}}}"#, quoted(room))
}

/// `{"t":"ack","room":R,"cs":7,"seq":42}`
pub fn ack(room: &str, cs: u64, seq: u64) -> String {
    json!({"t": "ack", "room": room, "cs": cs, "seq": seq}).to_string()
}

/// `{"t":"reject","room":R,"cs":7,"code":"late","reason":"늦었어요"}`
pub fn reject(room: &str, cs: u64, code: &str, reason: &str) -> String {
    json!({"t": "reject", "room": room, "cs": cs, "code": code, "reason": reason}).to_string()
}

/// `{"t":"result","room":R,"gamePk":"…","result":{…}}`
pub fn result(room: &str, game_pk: &str, result_json: &str) -> String {
    format!(r#"{{"t":"result","room":{},"gamePk":{},"result":{result_json}}}"#, quoted(room), quoted(game_pk))
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
}
