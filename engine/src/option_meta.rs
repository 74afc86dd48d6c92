//! Option metadata: what a game declares about its options (`Game::options_meta`).
//!
//! Every option of every game carries a Korean title and a Korean label per choice; the
//! `/api/games` catalog exports them so clients build option forms without knowing the
//! game. The floor under the game contract (`game.rs`) and option validation
//! (`options.rs`), which both use it.

use serde::Serialize;
use serde_json::Value;

/// One selectable value of an option.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OptionChoice {
    /// The JSON value clients send (`true`/`false` for on/off, `null` for "없음").
    pub value: Value,
    /// Korean label.
    pub label: String,
}

/// One option of a game.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OptionMeta {
    pub key: String,
    /// Korean title.
    pub title: String,
    pub choices: Vec<OptionChoice>,
    pub default: Value,
}

impl OptionMeta {
    pub fn new(key: &str, title: &str, default: Value) -> OptionMeta {
        OptionMeta { key: key.to_owned(), title: title.to_owned(), choices: Vec::new(), default }
    }

    /// Adds a choice.
    pub fn choice(mut self, value: Value, label: &str) -> OptionMeta {
        self.choices.push(OptionChoice { value, label: label.to_owned() });
        self
    }

    /// The usual on/off pair ("켜기"/"끄기").
    pub fn on_off(key: &str, title: &str, default: bool) -> OptionMeta {
        OptionMeta::new(key, title, Value::Bool(default))
            .choice(Value::Bool(true), "켜기")
            .choice(Value::Bool(false), "끄기")
    }
}
