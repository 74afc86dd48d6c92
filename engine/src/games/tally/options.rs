//! Tally's one option: the count at which the game ends.

use crate::options::OptionMeta;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TallyOptions {
    /// The game ends when `count` reaches this; `None` ("없음") never ends.
    pub target: Option<u64>,
}

impl Default for TallyOptions {
    fn default() -> TallyOptions {
        TallyOptions { target: Some(100) }
    }
}

pub fn meta() -> Vec<OptionMeta> {
    vec![OptionMeta::new("target", "목표 숫자", json!(100))
        .choice(json!(10), "10")
        .choice(json!(100), "100")
        .choice(json!(1000), "1000")
        .choice(Value::Null, "없음")]
}
