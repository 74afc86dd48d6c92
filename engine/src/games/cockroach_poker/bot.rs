//! Cockroach Poker's bot. It sees only its view (own hand, hand counts, fronts, claims,
//! the card in flight once it has seen it) and its legal inputs.
//!
//! - Offering: it gives the kind the target already has most of in front, avoids kinds
//!   that are dangerous for itself (a right call puts the card in its own front), and
//!   bluffs about half the time, preferably with a kind the target fears.
//! - Holding: it counts what it can see (its hand and every front) to estimate how many
//!   cards of the claimed kind are still hidden; none left means the claim is a lie.
//!   When the call is close or a wrong guess would be costly it peeks and passes on.
//! - Passing: the true kind to whoever has most of it, with a truthful claim only
//!   sometimes, so its claims do not give the card away.

use super::rules::{CallWord, CockroachAction, CockroachInput, Kind, DECK_SIZE, PER_KIND};
use super::view::CockroachView;
use crate::game::{BotMove, Input, PlayerId};
use crate::rng::Rng;

fn front(view: &CockroachView, p: &PlayerId, kind: Kind) -> usize {
    view.fronts.get(p).and_then(|m| m.get(&kind)).copied().unwrap_or(0)
}

fn my_hand_of(view: &CockroachView, kind: Kind) -> usize {
    view.hand.as_ref().map_or(0, |h| h.iter().filter(|c| c.kind == kind).count())
}

/// Cards of `kind` the bot cannot see (others' hands, the card in flight, removed).
fn hidden_of(view: &CockroachView, kind: Kind) -> usize {
    let seen: usize = my_hand_of(view, kind) + view.order.iter().map(|p| front(view, p, kind)).sum::<usize>();
    (PER_KIND as usize).saturating_sub(seen)
}

/// All cards the bot cannot see.
fn hidden_total(view: &CockroachView) -> usize {
    let hand = view.hand.as_ref().map_or(0, Vec::len);
    let fronts: usize = view.fronts.values().flat_map(|m| m.values()).sum();
    (DECK_SIZE as usize).saturating_sub(hand + fronts).max(1)
}

/// A claim other than `truth`, leaning towards what `target` already has in front.
fn bluff(view: &CockroachView, target: &PlayerId, truth: Kind, rng: &mut Rng) -> Kind {
    let mut best = (f64::MIN, truth);
    for k in Kind::ALL {
        if k == truth {
            continue;
        }
        let score = front(view, target, k) as f64 + rng.next() * 2.0;
        if score > best.0 {
            best = (score, k);
        }
    }
    best.1
}

fn offer(view: &CockroachView, me: &PlayerId, rng: &mut Rng) -> Option<CockroachAction> {
    let hand = view.hand.as_ref()?;
    let mut best: Option<(f64, u32, Kind, &PlayerId)> = None;
    for card in hand {
        for target in view.order.iter().filter(|p| *p != me) {
            let score = 2.0 * front(view, target, card.kind) as f64 - 1.5 * front(view, me, card.kind) as f64
                + rng.next() * 1.5;
            if best.as_ref().is_none_or(|b| score > b.0) {
                best = Some((score, card.id, card.kind, target));
            }
        }
    }
    let (_, card_id, kind, target) = best?;
    let claim = if rng.chance(0.45) { kind } else { bluff(view, target, kind, rng) };
    Some(CockroachAction::Offer { card_id, to: target.clone(), claim })
}

fn hold(view: &CockroachView, me: &PlayerId, may_peek: bool, rng: &mut Rng) -> Option<CockroachAction> {
    let claim = view.claim?;
    let hidden = hidden_of(view, claim);
    if hidden == 0 {
        return Some(CockroachAction::Call { call: CallWord::False });
    }
    // 1.0 = as many hidden cards of this kind as an average kind.
    let ratio = hidden as f64 * Kind::ALL.len() as f64 / hidden_total(view) as f64;
    let p_true = (0.45 * ratio).clamp(0.05, 0.85);
    let close = (p_true - 0.5).abs() < 0.15;
    let dangerous = front(view, me, claim) + 1 >= view.lose_count;
    if may_peek && (close || dangerous) && rng.chance(0.6) {
        return Some(CockroachAction::Peek {});
    }
    let says_true = if rng.chance(0.1) { p_true <= 0.5 } else { p_true > 0.5 };
    Some(CockroachAction::Call { call: if says_true { CallWord::True } else { CallWord::False } })
}

fn pass(view: &CockroachView, rng: &mut Rng) -> Option<CockroachAction> {
    let kind = view.card?.kind;
    let mut best: Option<(f64, &PlayerId)> = None;
    for target in &view.pass_targets {
        let score = front(view, target, kind) as f64 + rng.next() * 1.5;
        if best.as_ref().is_none_or(|b| score > b.0) {
            best = Some((score, target));
        }
    }
    let (_, target) = best?;
    let claim = if rng.chance(0.35) { kind } else { bluff(view, target, kind, rng) };
    Some(CockroachAction::Pass { to: target.clone(), claim })
}

pub fn choose(
    view: &CockroachView,
    me: &PlayerId,
    legal: &[CockroachInput],
    rng: &mut Rng,
) -> Option<BotMove<CockroachInput>> {
    if legal.is_empty() {
        return None;
    }
    let has = |f: fn(&CockroachAction) -> bool| legal.iter().any(|i| matches!(i, Input::Client(a) if f(a)));
    let wanted = if has(|a| matches!(a, CockroachAction::Offer { .. })) {
        offer(view, me, rng)
    } else if has(|a| matches!(a, CockroachAction::Pass { .. })) {
        pass(view, rng)
    } else if has(|a| matches!(a, CockroachAction::Call { .. })) {
        hold(view, me, has(|a| matches!(a, CockroachAction::Peek {})), rng)
    } else {
        None
    };
    let input = match wanted.map(Input::Client) {
        Some(input) if legal.contains(&input) => input,
        _ => rng.pick(legal)?.clone(),
    };
    Some(BotMove { input, delay_ms: 900 + i64::from(rng.int(1800)) })
}
