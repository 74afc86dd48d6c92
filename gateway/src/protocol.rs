//! What a client may send over the WebSocket (`PROTOCOL.md`), parsed from one text frame.
//!
//! Kept apart from the session actor (`ws`) so it can be fuzzed on its own: the fuzz
//! crate compiles this very file by path (`fuzz/src/lib.rs`), so it must use nothing
//! but serde and serde_json (its tests too).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;

/// What a client may send.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientMsg {
    Sub {
        room: String,
    },
    Unsub {
        room: String,
    },
    /// `action`: the JSON text of `a` as sent (the room decodes it into its game's action;
    /// it crosses to another node as this same text).
    Act {
        room: String,
        cs: u64,
        action: Option<String>,
    },
    /// Quick chat: `phrase` is a key of the game's `chatPhrases` (the room checks which).
    Chat {
        room: String,
        phrase: String,
    },
}

/// A phrase key longer than this is no key of any game: refused before it reaches a room.
pub const MAX_PHRASE_KEY: usize = 32;

/// A well-formed frame, read without building a JSON tree (every action passes here).
#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(borrow)]
    t: Cow<'a, str>,
    #[serde(borrow, default)]
    room: Option<Cow<'a, str>>,
    #[serde(default)]
    cs: Option<u64>,
    #[serde(borrow, default)]
    a: Option<&'a RawValue>,
}

/// Actions nested deeper than this are read the general way (serde_json refuses JSON
/// nested deeper than 128 levels there).
const SHALLOW: usize = 64;

/// How deeply `json` (valid JSON) nests arrays and objects.
fn depth(json: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for byte in json.bytes() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Why a frame is not a client message: a short Korean reason that never quotes the
/// frame (nor the parser's message, which does).
pub fn parse(text: &str) -> Result<ClientMsg, String> {
    // The common frame, read directly; anything else (a missing or mistyped field, an
    // `a` that is null or absent, a repeated key) goes the general way, which says what is
    // wrong.
    if let Ok(frame) = serde_json::from_str::<Frame>(text) {
        match (&*frame.t, frame.room, frame.cs, frame.a) {
            ("sub", Some(room), _, _) => return Ok(ClientMsg::Sub { room: room.into_owned() }),
            ("unsub", Some(room), _, _) => return Ok(ClientMsg::Unsub { room: room.into_owned() }),
            // Only a shallow action: the raw reader does not apply the JSON parser's depth
            // limit, which the general way does (a deep one is refused there).
            ("act", Some(room), Some(cs), Some(a)) if depth(a.get()) <= SHALLOW => {
                return Ok(ClientMsg::Act { room: room.into_owned(), cs, action: Some(a.get().to_owned()) })
            }
            _ => {}
        }
    }
    let v: Value = serde_json::from_str(text).map_err(|_| "JSON이 아니에요".to_owned())?;
    let t = v.get("t").and_then(Value::as_str).ok_or("`t`가 없어요")?;
    let room = || v.get("room").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| "`room`이 없어요".to_owned());
    match t {
        "sub" => Ok(ClientMsg::Sub { room: room()? }),
        "unsub" => Ok(ClientMsg::Unsub { room: room()? }),
        "act" => {
            let cs = v.get("cs").and_then(Value::as_u64).ok_or("`cs`는 0 이상의 정수여야 해요")?;
            Ok(ClientMsg::Act { room: room()?, cs, action: v.get("a").map(Value::to_string) })
        }
        "chat" => {
            let phrase = v.get("phrase").and_then(Value::as_str).ok_or("`phrase`가 없어요")?;
            if phrase.len() > MAX_PHRASE_KEY {
                return Err("없는 빠른 대화 문구예요".to_owned());
            }
            Ok(ClientMsg::Chat { room: room()?, phrase: phrase.to_owned() })
        }
        _ => Err("알 수 없는 메시지 종류예요".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_four_client_messages() {
        assert!(matches!(parse(r#"{"t":"sub","room":"R"}"#), Ok(ClientMsg::Sub { room }) if room == "R"));
        assert!(matches!(parse(r#"{"t":"unsub","room":"R"}"#), Ok(ClientMsg::Unsub { .. })));
        assert!(matches!(
            parse(r#"{"t":"act","room":"R","cs":7,"a":{"type":"bump"}}"#),
            Ok(ClientMsg::Act { cs: 7, action: Some(_), .. })
        ));
        assert!(matches!(parse(r#"{"t":"act","room":"R","cs":7}"#), Ok(ClientMsg::Act { action: None, .. })));
        assert_eq!(
            parse(r#"{"t":"chat","room":"R","phrase":"really"}"#),
            Ok(ClientMsg::Chat { room: "R".into(), phrase: "really".into() })
        );
    }

    #[test]
    fn an_action_is_its_json_text_as_sent_whichever_way_the_frame_is_read() {
        let fast = parse(r#"{"t":"act","room":"R","cs":7,"a":{"type": "ring","version":3}}"#);
        assert_eq!(
            fast,
            Ok(ClientMsg::Act { room: "R".into(), cs: 7, action: Some(r#"{"type": "ring","version":3}"#.into()) })
        );
        // A null action and a repeated key are read the general way.
        let null = parse(r#"{"t":"act","room":"R","cs":7,"a":null}"#);
        assert_eq!(null, Ok(ClientMsg::Act { room: "R".into(), cs: 7, action: Some("null".into()) }));
        let twice = parse(r#"{"t":"act","room":"R","room":"S","cs":7,"a":1}"#);
        assert_eq!(twice, Ok(ClientMsg::Act { room: "S".into(), cs: 7, action: Some("1".into()) }));
        // A deep action goes the general way, which refuses JSON deeper than its limit.
        let deep = format!(r#"{{"t":"act","room":"R","cs":1,"a":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
        assert_eq!(parse(&deep), Err("JSON이 아니에요".to_owned()));
        assert_eq!(depth(r#"{"a":[1,{"b":"]}[{"}],"c":"\\\"{"}"#), 3);
        // Escapes in the room id.
        assert_eq!(parse(r#"{"t":"sub","room":"r\u005f1"}"#), Ok(ClientMsg::Sub { room: "r_1".into() }));
    }

    #[test]
    fn refuses_everything_else_with_a_reason() {
        for bad in [
            "nope",
            "[]",
            r#"{"t":1}"#,
            r#"{"t":"dance"}"#,
            r#"{"t":"sub"}"#,
            r#"{"t":"act","room":"R","cs":-1}"#,
            r#"{"t":"act","room":"R"}"#,
            r#"{"t":"chat","room":"R"}"#,
            r#"{"t":"chat","phrase":"really"}"#,
            r#"{"t":"chat","room":"R","phrase":7}"#,
            &format!(r#"{{"t":"chat","room":"R","phrase":"{}"}}"#, "x".repeat(MAX_PHRASE_KEY + 1)),
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
