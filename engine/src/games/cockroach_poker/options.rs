//! Cockroach Poker's options (spec §2 and the house rules of §7).

use crate::options::OptionMeta;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The `"auto"` marker of [`LoseCount::Auto`]: a unit variant serializes as the string
/// `"auto"`, which is what clients send for a player-count-dependent default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoMarker {
    Auto,
}

/// How many cards of one kind in front of a player lose the game.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LoseCount {
    /// 4 for 3–6 players, 5 for 2 players (the original game's 2-player rule).
    Auto(AutoMarker),
    Count(u8),
}

impl LoseCount {
    /// The count in force for `players` seats.
    pub fn resolve(self, players: usize) -> usize {
        match self {
            LoseCount::Auto(_) if players == 2 => 5,
            LoseCount::Auto(_) => 4,
            LoseCount::Count(n) => usize::from(n),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CockroachOptions {
    pub lose_count: LoseCount,
    /// Seconds a starter or holder has before the server acts for them.
    pub turn_seconds: u32,
    /// Who has seen the card in flight is always shown; the option exists (on only) so
    /// the catalog lists it.
    pub show_seen_by: bool,
    /// Whether views carry this round's claim history (the latest claim always shows).
    pub claim_history: bool,
    /// Fixed quick-chat phrases; the engine only passes the flag to the view.
    pub quick_chat: bool,
    /// House rule: one card of each of the 8 kinds in front also loses.
    pub eight_kinds_rule: bool,
    /// House rule: with 2 players the receiver may peek and hand the card back.
    pub two_player_pass: bool,
}

impl Default for CockroachOptions {
    fn default() -> CockroachOptions {
        CockroachOptions {
            lose_count: LoseCount::Auto(AutoMarker::Auto),
            turn_seconds: 30,
            show_seen_by: true,
            claim_history: true,
            quick_chat: true,
            eight_kinds_rule: false,
            two_player_pass: false,
        }
    }
}

pub fn meta() -> Vec<OptionMeta> {
    vec![
        OptionMeta::new("loseCount", "같은 벌레 몇 장이면 패배", json!("auto"))
            .choice(json!("auto"), "자동 (3~6인 4장, 2인 5장)")
            .choice(json!(3), "3장 (짧은 게임)")
            .choice(json!(4), "4장")
            .choice(json!(5), "5장"),
        OptionMeta::new("turnSeconds", "제한 시간", json!(30))
            .choice(json!(15), "15초")
            .choice(json!(30), "30초")
            .choice(json!(60), "60초"),
        OptionMeta::new("showSeenBy", "카드를 본 사람 표시", Value::Bool(true)).choice(Value::Bool(true), "켜기"),
        OptionMeta::on_off("claimHistory", "주장 이력 표시", true),
        OptionMeta::on_off("quickChat", "빠른 대화 버튼", true),
        OptionMeta::on_off("eightKindsRule", "8종을 모두 모으면 패배 (하우스 룰)", false),
        OptionMeta::on_off("twoPlayerPass", "2인에서도 보고 되돌려 주기 (하우스 룰)", false),
    ]
}
