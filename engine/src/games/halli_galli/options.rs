//! Halli Galli's options (spec §2) and house rules (§7), with their Korean metadata.

use crate::options::OptionMeta;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// How the game ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EndMode {
    /// Until one player holds every card (the usual Korean rule).
    LastStanding,
    /// When two players remain, the next correct ring ends the game (the original rule).
    Official,
}

/// What happens to the cards left over after the deal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LeftoverCards {
    /// Face down under the bell; the next correct ringer takes them.
    Pot,
    /// Out of the game.
    Remove,
}

/// Latency compensation for near-simultaneous correct rings (§5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LatencyComp {
    Off,
    /// A 50 ms window after the first correct ring; rings in it compete on
    /// `serverTs - min(RTT/2, 80)`.
    Light,
}

/// How quickly and how reliably the bots ring (their flips are the same at every level).
/// A person needs most of a second to see that a table shows exactly five and reach the
/// bell, so the default bots are about that quick: at `hard` they win nearly every race.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BotLevel {
    /// Slow (1.1–2.0 s) and rarely wrong: a table for children and first games.
    Easy,
    /// About a person's speed (0.7–1.4 s).
    #[default]
    Normal,
    /// Quick (0.35–0.95 s) and a little more often wrong.
    Hard,
}

impl BotLevel {
    /// `(fastest reaction ms, extra spread ms, chance per decision of a wrong ring)`.
    pub fn reaction(self) -> (i64, u32, f64) {
        match self {
            BotLevel::Easy => (1100, 900, 0.01),
            BotLevel::Normal => (700, 700, 0.02),
            BotLevel::Hard => (350, 600, 0.03),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HalliGalliOptions {
    pub end_mode: EndMode,
    /// Minutes until the game ends on its own; `None` ("없음") never.
    pub time_limit_min: Option<u32>,
    /// Seconds the turn player has to flip before the server flips for them.
    pub flip_seconds: u32,
    /// The server flips for everyone every `flip_seconds`; client flips are refused.
    pub auto_flip: bool,
    /// After the table changes, flips are held (reserved) for this long.
    pub flip_guard_ms: u32,
    /// After a wrong ring the ringer's bell is locked this long.
    pub wrong_ring_lockout_ms: u32,
    pub leftover_cards: LeftoverCards,
    pub latency_comp: LatencyComp,
    pub show_rtt: bool,
    /// Children's mode: 8-second flips (the fruit-sum bars are drawn by the client).
    pub kid_mode: bool,
    /// House rule: in a one-on-one, a wrong ring loses at once.
    pub duel_wrong_loses: bool,
    /// House rule: the third wrong ring forfeits.
    pub strike_out: bool,
    /// House rule: the n-th wrong ring gives n cards to each other player.
    pub penalty_escalation: bool,
    /// House rule: penalty cards go under the bell instead of to the other players.
    pub wrong_to_pot: bool,
    /// The bots' reaction speed. Games stored before the option existed read `normal`.
    #[serde(default)]
    pub bot_level: BotLevel,
}

impl Default for HalliGalliOptions {
    fn default() -> HalliGalliOptions {
        HalliGalliOptions {
            end_mode: EndMode::LastStanding,
            time_limit_min: Some(10),
            flip_seconds: 3,
            auto_flip: false,
            flip_guard_ms: 600,
            wrong_ring_lockout_ms: 1000,
            leftover_cards: LeftoverCards::Pot,
            latency_comp: LatencyComp::Off,
            show_rtt: true,
            kid_mode: false,
            duel_wrong_loses: false,
            strike_out: false,
            penalty_escalation: false,
            wrong_to_pot: false,
            bot_level: BotLevel::Normal,
        }
    }
}

impl HalliGalliOptions {
    /// The flip time in ms actually used: children's mode slows it to 8 s.
    pub fn flip_ms(&self) -> i64 {
        if self.kid_mode {
            8000
        } else {
            i64::from(self.flip_seconds) * 1000
        }
    }
}

pub fn meta() -> Vec<OptionMeta> {
    vec![
        // First: with bots in the room it matters most for how the game feels.
        OptionMeta::new("botLevel", "봇 난이도", json!("normal"))
            .choice(json!("easy"), "쉬움 (느긋한 봇)")
            .choice(json!("normal"), "보통")
            .choice(json!("hard"), "어려움 (빠른 봇)"),
        OptionMeta::new("endMode", "종료 방식", json!("lastStanding"))
            .choice(json!("lastStanding"), "마지막 한 명이 남을 때까지")
            .choice(json!("official"), "2명 남으면 다음 종에서 종료(원작 규칙)"),
        OptionMeta::new("timeLimitMin", "전체 제한 시간", json!(10))
            .choice(json!(5), "5분")
            .choice(json!(10), "10분")
            .choice(json!(15), "15분")
            .choice(Value::Null, "없음"),
        OptionMeta::new("flipSeconds", "뒤집기 제한 시간", json!(3))
            .choice(json!(2), "2초")
            .choice(json!(3), "3초")
            .choice(json!(5), "5초")
            .choice(json!(8), "8초"),
        OptionMeta::on_off("autoFlip", "자동 뒤집기", false),
        OptionMeta::new("flipGuardMs", "뒤집기 보호 시간", json!(600))
            .choice(json!(400), "0.4초")
            .choice(json!(600), "0.6초")
            .choice(json!(1000), "1초"),
        OptionMeta::new("wrongRingLockoutMs", "틀린 종 잠금 시간", json!(1000))
            .choice(json!(0), "잠그지 않음")
            .choice(json!(1000), "1초")
            .choice(json!(2000), "2초"),
        OptionMeta::new("leftoverCards", "남은 카드 처리", json!("pot"))
            .choice(json!("pot"), "종 밑에 두기")
            .choice(json!("remove"), "게임에서 빼기"),
        OptionMeta::new("latencyComp", "지연 보정", json!("off"))
            .choice(json!("off"), "끄기")
            .choice(json!("light"), "약하게"),
        OptionMeta::on_off("showRtt", "핑 표시", true),
        OptionMeta::on_off("kidMode", "어린이 모드", false),
        OptionMeta::on_off("duelWrongLoses", "1대1에서 틀린 종은 즉시 패배", false),
        OptionMeta::on_off("strikeOut", "틀린 종 3번이면 몰수패", false),
        OptionMeta::on_off("penaltyEscalation", "틀릴 때마다 벌칙 장수 증가", false),
        OptionMeta::on_off("wrongToPot", "벌칙 카드는 종 밑으로", false),
    ]
}
