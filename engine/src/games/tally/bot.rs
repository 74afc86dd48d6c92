//! Tally's bot: bumps whenever it may, at a person's pace.

use crate::game::BotMove;
use crate::rng::Rng;

pub fn choose<I: Clone>(legal: &[I], rng: &mut Rng) -> Option<BotMove<I>> {
    let input = rng.pick(legal)?.clone();
    Some(BotMove { input, delay_ms: 300 + i64::from(rng.int(900)) })
}
