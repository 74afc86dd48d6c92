//! What a client may send over the WebSocket (`PROTOCOL.md`), parsed from one text frame.
//!
//! Kept apart from the session actor (`ws`) so it can be fuzzed on its own: the fuzz
//! crate compiles this very file by path (`fuzz/src/lib.rs`), so it must use nothing
//! but serde_json (its tests too).

use serde_json::Value;

/// What a client may send.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientMsg {
    Sub { room: String },
    Unsub { room: String },
    Act { room: String, cs: u64, action: Option<Value> },
}

/// Why a frame is not a client message: a short Korean reason that never quotes the
/// frame (nor the parser's message, which does).
pub fn parse(text: &str) -> Result<ClientMsg, String> {
    let v: Value = serde_json::from_str(text).map_err(|_| "JSON이 아니에요".to_owned())?;
    let t = v.get("t").and_then(Value::as_str).ok_or("`t`가 없어요")?;
    let room = || v.get("room").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| "`room`이 없어요".to_owned());
    match t {
        "sub" => Ok(ClientMsg::Sub { room: room()? }),
        "unsub" => Ok(ClientMsg::Unsub { room: room()? }),
        "act" => {
            let cs = v.get("cs").and_then(Value::as_u64).ok_or("`cs`는 0 이상의 정수여야 해요")?;
            Ok(ClientMsg::Act { room: room()?, cs, action: v.get("a").cloned() })
        }
        _ => Err("알 수 없는 메시지 종류예요".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_client_messages() {
        assert!(matches!(parse(r#"{"t":"sub","room":"R"}"#), Ok(ClientMsg::Sub { room }) if room == "R"));
        assert!(matches!(parse(r#"{"t":"unsub","room":"R"}"#), Ok(ClientMsg::Unsub { .. })));
        assert!(matches!(
            parse(r#"{"t":"act","room":"R","cs":7,"a":{"type":"bump"}}"#),
            Ok(ClientMsg::Act { cs: 7, action: Some(_), .. })
        ));
        assert!(matches!(parse(r#"{"t":"act","room":"R","cs":7}"#), Ok(ClientMsg::Act { action: None, .. })));
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
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
