//! Validation of submitted options against a game's option metadata
//! ([`OptionMeta`], declared in `option_meta.rs`, which the game contract uses).
//!
//! Submitted options are checked against the metadata: unknown keys and values outside
//! the choices are refused with a clear error, missing keys take their default.

use crate::game::Game;
pub use crate::option_meta::{OptionChoice, OptionMeta};
use serde_json::{Map, Value};
use thiserror::Error;

/// Submitted options that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OptionsError {
    #[error("options must be a JSON object")]
    NotAnObject,
    #[error("unknown option `{0}`")]
    UnknownKey(String),
    #[error("option `{key}` cannot be {value}")]
    BadValue { key: String, value: String },
    #[error("options do not decode: {0}")]
    Decode(String),
}

impl OptionsError {
    pub fn code(&self) -> &'static str {
        "bad_options"
    }

    /// Korean reason for people.
    pub fn reason(&self) -> String {
        match self {
            OptionsError::NotAnObject => "옵션 형식이 올바르지 않아요".to_owned(),
            OptionsError::UnknownKey(k) => format!("알 수 없는 옵션이에요: {k}"),
            OptionsError::BadValue { key, .. } => format!("선택할 수 없는 옵션 값이에요: {key}"),
            OptionsError::Decode(_) => "옵션을 읽을 수 없어요".to_owned(),
        }
    }
}

/// The defaults of `meta` as one JSON object.
pub fn defaults_json(meta: &[OptionMeta]) -> Value {
    Value::Object(meta.iter().map(|m| (m.key.clone(), m.default.clone())).collect::<Map<_, _>>())
}

/// Checks `submitted` (or nothing) against `G`'s metadata and decodes the options.
pub fn parse<G: Game>(submitted: Option<&Value>) -> Result<G::Options, OptionsError> {
    let meta = G::options_meta();
    let merged = merge(&meta, submitted)?;
    serde_json::from_value(merged).map_err(|e| OptionsError::Decode(e.to_string()))
}

/// Defaults overlaid with the submitted keys, each checked against its choices.
pub fn merge(meta: &[OptionMeta], submitted: Option<&Value>) -> Result<Value, OptionsError> {
    let mut out = match defaults_json(meta) {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    match submitted {
        None | Some(Value::Null) => {}
        Some(Value::Object(given)) => {
            for (key, value) in given {
                let m = meta.iter().find(|m| &m.key == key).ok_or_else(|| OptionsError::UnknownKey(key.clone()))?;
                if !m.choices.iter().any(|c| &c.value == value) {
                    return Err(OptionsError::BadValue { key: key.clone(), value: value.to_string() });
                }
                out.insert(key.clone(), value.clone());
            }
        }
        Some(_) => return Err(OptionsError::NotAnObject),
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta() -> Vec<OptionMeta> {
        vec![
            OptionMeta::new("target", "목표", json!(100))
                .choice(json!(10), "10")
                .choice(json!(100), "100")
                .choice(Value::Null, "없음"),
            OptionMeta::on_off("fast", "빠르게", false),
        ]
    }

    #[test]
    fn missing_keys_take_defaults() {
        assert_eq!(merge(&meta(), None).unwrap(), json!({"target": 100, "fast": false}));
        assert_eq!(merge(&meta(), Some(&json!({"fast": true}))).unwrap(), json!({"target": 100, "fast": true}));
    }

    #[test]
    fn null_is_a_choice_when_listed() {
        assert_eq!(merge(&meta(), Some(&json!({"target": null}))).unwrap(), json!({"target": null, "fast": false}));
    }

    #[test]
    fn unknown_key_and_bad_value_are_refused() {
        assert_eq!(merge(&meta(), Some(&json!({"speed": 1}))), Err(OptionsError::UnknownKey("speed".into())));
        let err = merge(&meta(), Some(&json!({"target": 7}))).unwrap_err();
        assert!(matches!(err, OptionsError::BadValue { ref key, .. } if key == "target"));
        assert_eq!(err.code(), "bad_options");
        assert!(err.reason().contains("target"));
        assert_eq!(merge(&meta(), Some(&json!([1]))), Err(OptionsError::NotAnObject));
    }

    #[test]
    fn every_meta_default_is_one_of_its_choices() {
        for m in meta() {
            assert!(m.choices.iter().any(|c| c.value == m.default), "{}", m.key);
        }
    }
}
