//! Halli Galli's bot. It reads only its view: it rings when the tops it sees show exactly
//! five of a fruit, after a reaction time set by the room's `botLevel`; now and then it
//! rings by mistake; on its turn it flips.

use super::cards::{FRUITS, TARGET};
use super::rules::{HalliGalliAction, HalliGalliInput, Phase};
use super::view::HalliGalliView;
use crate::game::{BotMove, Input, PlayerId};
use crate::rng::Rng;

/// Whether the tops in `view` show exactly five of some fruit.
pub fn sees_five(view: &HalliGalliView) -> bool {
    let mut sums = [0u32; 4];
    for top in view.table.players.values().filter_map(|p| p.top) {
        if let Some(s) = sums.get_mut(top.fruit.index()) {
            *s += u32::from(top.count);
        }
    }
    FRUITS.iter().any(|f| sums.get(f.index()) == Some(&TARGET))
}

pub fn choose(
    view: &HalliGalliView,
    _me: &PlayerId,
    legal: &[HalliGalliInput],
    rng: &mut Rng,
) -> Option<BotMove<HalliGalliInput>> {
    if view.table.phase != Phase::Playing {
        return None;
    }
    let ring = legal.iter().find(|i| matches!(i, Input::Client(HalliGalliAction::Ring { .. }))).cloned();
    let flip = legal.iter().find(|i| matches!(i, Input::Client(HalliGalliAction::Flip {}))).cloned();
    if let Some(ring) = ring {
        let (react_min_ms, react_spread_ms, mistake_rate) = view.table.options.bot_level.reaction();
        if sees_five(view) {
            let delay_ms = react_min_ms + i64::from(rng.int(react_spread_ms));
            return Some(BotMove { input: ring, delay_ms });
        }
        if rng.chance(mistake_rate) {
            let delay_ms = 200 + i64::from(rng.int(400));
            return Some(BotMove { input: ring, delay_ms });
        }
    }
    flip.map(|input| BotMove { input, delay_ms: 400 + i64::from(rng.int(800)) })
}
