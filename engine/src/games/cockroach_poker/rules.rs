//! Cockroach Poker's rules (spec §4–§8): setup, validation, apply and the invariant, over
//! the vocabulary in `model.rs` (re-exported here).
//!
//! A round: the starter offers a face-down card to another player with a claim; each
//! holder either calls the latest claim true or false (the card is revealed and goes face
//! up in front of whoever was wrong) or peeks and passes it on to someone who has not
//! seen it. Whoever takes the card starts the next round. The first player with
//! `loseCount` of one kind in front (or with an empty hand when they must start) loses.

pub use super::model::*;
use super::options::CockroachOptions;
use crate::error::EngineError;
use crate::game::{Actor, Applied, Input, PlayerId};
use crate::rng::Rng;
use crate::turns;
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------
// Setup
// ---------------------------------------------------------------------------------------

/// Shuffle, remove 10 unseen cards with 2 players, pick the first player, seat everyone
/// from them, deal one card at a time from the first seat (spec §4).
pub fn setup(players: &[PlayerId], options: &CockroachOptions, now: i64, rng: &mut Rng) -> CockroachState {
    let mut deck: Vec<u32> = (0..DECK_SIZE).collect();
    rng.shuffle(&mut deck);
    let first = rng.pick(players).cloned().unwrap_or_else(|| PlayerId::new(""));
    let order = turns::rotate_to(players, &first);
    let removed: Vec<u32> = if order.len() == 2 { deck.drain(..TWO_PLAYER_REMOVED).collect() } else { Vec::new() };
    let mut hands: BTreeMap<PlayerId, Vec<u32>> = order.iter().map(|p| (p.clone(), Vec::new())).collect();
    for (i, card) in deck.into_iter().enumerate() {
        if let Some(hand) = order.get(i % order.len().max(1)).and_then(|p| hands.get_mut(p)) {
            hand.push(card);
        }
    }
    let fronts = order.iter().map(|p| (p.clone(), Vec::new())).collect();
    CockroachState {
        options: options.clone(),
        round: fresh_round(first, now, options),
        order,
        hands,
        fronts,
        removed,
        loser: None,
        loss_reason: None,
        losing_kind: None,
        last_reveal: None,
    }
}

fn fresh_round(starter: PlayerId, now: i64, options: &CockroachOptions) -> Round {
    Round {
        starter,
        card: None,
        holder: None,
        last_passer: None,
        claim: None,
        seen: Vec::new(),
        peeked: false,
        claims: Vec::new(),
        deadline: now.saturating_add(i64::from(options.turn_seconds) * 1000),
    }
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

fn seated<'a>(state: &CockroachState, actor: &'a Actor) -> Result<&'a PlayerId, CockroachReject> {
    match actor {
        Actor::Player(p) if state.order.contains(p) => Ok(p),
        _ => Err(CockroachReject::NotSeated),
    }
}

pub fn validate(state: &CockroachState, actor: &Actor, input: &CockroachInput) -> Result<(), CockroachReject> {
    if state.is_over() {
        return Err(CockroachReject::GameOver);
    }
    let p = seated(state, actor)?;
    match input {
        Input::Client(action) => validate_action(state, p, action),
        Input::System(CockroachSystem::Timeout {}) => {
            if state.active() == Some(p) {
                Ok(())
            } else {
                Err(CockroachReject::NotYourTurn)
            }
        }
    }
}

/// Checks a client action of seated player `p` (the game is not over).
pub fn validate_action(state: &CockroachState, p: &PlayerId, action: &CockroachAction) -> Result<(), CockroachReject> {
    let round = &state.round;
    let is_holder = round.card.is_some() && round.holder.as_ref() == Some(p);
    match action {
        CockroachAction::Offer { card_id, to, claim: _ } => {
            if round.card.is_some() || &round.starter != p {
                return Err(CockroachReject::NotStarter);
            }
            if !state.hand(p).contains(card_id) {
                return Err(CockroachReject::NotInHand);
            }
            check_target(state, p, to)
        }
        CockroachAction::Call { call: _ } => {
            if !is_holder {
                return Err(CockroachReject::NotHolder);
            }
            if round.peeked {
                return Err(CockroachReject::MustPass);
            }
            Ok(())
        }
        CockroachAction::Peek {} => {
            if !is_holder {
                return Err(CockroachReject::NotHolder);
            }
            if round.peeked {
                return Err(CockroachReject::AlreadyPeeked);
            }
            if state.order.len() == 2 && !state.options.two_player_pass {
                return Err(CockroachReject::TwoPlayerNoPass);
            }
            if state.pass_targets().is_empty() {
                return Err(CockroachReject::NoOneToPass);
            }
            Ok(())
        }
        CockroachAction::Pass { to, claim: _ } => {
            if !is_holder {
                return Err(CockroachReject::NotHolder);
            }
            if !round.peeked {
                return Err(CockroachReject::PeekFirst);
            }
            check_target(state, p, to)?;
            if !state.pass_targets().contains(to) {
                return Err(CockroachReject::AlreadySeen);
            }
            Ok(())
        }
    }
}

fn check_target(state: &CockroachState, p: &PlayerId, to: &PlayerId) -> Result<(), CockroachReject> {
    if to == p {
        return Err(CockroachReject::SelfTarget);
    }
    if !state.order.contains(to) {
        return Err(CockroachReject::UnknownPlayer);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Apply
// ---------------------------------------------------------------------------------------

type Outcome = Applied<CockroachState, CockroachEvent>;

fn invalid(message: &str) -> EngineError {
    EngineError::InvalidInput(message.to_owned())
}

pub fn apply(
    state: &CockroachState,
    actor: &Actor,
    input: &CockroachInput,
    now: i64,
    rng: &mut Rng,
) -> Result<Outcome, EngineError> {
    if state.is_over() {
        return Err(invalid("the game is over"));
    }
    let Some(p) = actor.player() else {
        return Err(invalid("cockroach-poker has no server-wide inputs"));
    };
    let mut next = state.clone();
    let mut events = Vec::new();
    match input {
        Input::Client(action) => apply_action(&mut next, p, action, now, &mut events)?,
        Input::System(CockroachSystem::Timeout {}) => {
            let action = timeout_action(state, p, rng)?;
            events.push(CockroachEvent::TimedOut { player: p.clone() });
            apply_action(&mut next, p, &action, now, &mut events)?;
        }
    }
    Ok(Applied { state: next, events })
}

/// The random choice of §8.5 for the active player `p`.
pub fn timeout_action(state: &CockroachState, p: &PlayerId, rng: &mut Rng) -> Result<CockroachAction, EngineError> {
    if state.active() != Some(p) {
        return Err(invalid("timeout for a player the game is not waiting for"));
    }
    let round = &state.round;
    match round.card {
        None => {
            let card_id = *rng.pick(state.hand(p)).ok_or_else(|| EngineError::invariant("starter has no cards"))?;
            let to = turns::next_clockwise(&state.order, p, |q| q != p)
                .ok_or_else(|| EngineError::invariant("nobody to offer to"))?;
            let claim = *rng.pick(&Kind::ALL).ok_or_else(|| EngineError::invariant("no kinds"))?;
            Ok(CockroachAction::Offer { card_id, to, claim })
        }
        Some(card) if round.peeked => {
            let to = state
                .pass_targets()
                .into_iter()
                .next()
                .ok_or_else(|| EngineError::invariant("peeked holder has nobody to pass to"))?;
            let claim = Kind::of(card).ok_or_else(|| EngineError::invariant("card id out of range"))?;
            Ok(CockroachAction::Pass { to, claim })
        }
        Some(_) => Ok(CockroachAction::Call { call: if rng.chance(0.5) { CallWord::True } else { CallWord::False } }),
    }
}

fn apply_action(
    s: &mut CockroachState,
    p: &PlayerId,
    action: &CockroachAction,
    now: i64,
    events: &mut Vec<CockroachEvent>,
) -> Result<(), EngineError> {
    let deadline = now.saturating_add(s.turn_ms());
    match action {
        CockroachAction::Offer { card_id, to, claim } => {
            let hand = s.hands.get_mut(p).ok_or_else(|| invalid("unknown starter"))?;
            let at = hand.iter().position(|c| c == card_id).ok_or_else(|| invalid("card not in hand"))?;
            hand.remove(at);
            let r = &mut s.round;
            r.card = Some(*card_id);
            r.holder = Some(to.clone());
            r.last_passer = Some(p.clone());
            r.claim = Some(*claim);
            r.seen = vec![p.clone()];
            r.peeked = false;
            r.claims = vec![ClaimEntry { from: p.clone(), to: to.clone(), claim: *claim }];
            r.deadline = deadline;
            events.push(CockroachEvent::Offered { from: p.clone(), to: to.clone(), claim: *claim });
        }
        CockroachAction::Peek {} => {
            let r = &mut s.round;
            if !r.seen.contains(p) {
                r.seen.push(p.clone());
            }
            r.peeked = true;
            r.deadline = deadline;
            events.push(CockroachEvent::Peeked { by: p.clone() });
        }
        CockroachAction::Pass { to, claim } => {
            let r = &mut s.round;
            r.holder = Some(to.clone());
            r.last_passer = Some(p.clone());
            r.claim = Some(*claim);
            r.peeked = false;
            r.claims.push(ClaimEntry { from: p.clone(), to: to.clone(), claim: *claim });
            r.deadline = deadline;
            events.push(CockroachEvent::Passed { from: p.clone(), to: to.clone(), claim: *claim });
        }
        CockroachAction::Call { call } => resolve_call(s, p, *call, now, events)?,
    }
    Ok(())
}

/// Reveals the card: a right call sends it to the last passer, a wrong one to the
/// holder; the taker starts the next round, or loses (spec §5.2, §5.3, §6).
fn resolve_call(
    s: &mut CockroachState,
    caller: &PlayerId,
    call: CallWord,
    now: i64,
    events: &mut Vec<CockroachEvent>,
) -> Result<(), EngineError> {
    let card = s.round.card.ok_or_else(|| invalid("no card in flight"))?;
    let kind = Kind::of(card).ok_or_else(|| EngineError::invariant("card id out of range"))?;
    let claim = s.round.claim.ok_or_else(|| EngineError::invariant("card in flight without a claim"))?;
    let passer =
        s.round.last_passer.clone().ok_or_else(|| EngineError::invariant("card in flight without a passer"))?;
    let truth = kind == claim;
    let correct = truth == (call == CallWord::True);
    let taker = if correct { passer } else { caller.clone() };
    s.fronts.get_mut(&taker).ok_or_else(|| EngineError::invariant("taker has no front"))?.push(card);
    s.last_reveal = Some(Reveal { card, kind, claim, call, caller: caller.clone(), correct, taken_by: taker.clone() });
    events.push(CockroachEvent::Revealed {
        caller: caller.clone(),
        call,
        claim,
        card: CardFace { id: card, kind },
        correct,
        taken_by: taker.clone(),
    });

    let loss = if s.front_count(&taker, kind) >= s.lose_count() {
        Some((LossReason::Four, Some(kind)))
    } else if s.options.eight_kinds_rule && Kind::ALL.iter().all(|k| s.front_count(&taker, *k) > 0) {
        Some((LossReason::EightKinds, None))
    } else if s.hand(&taker).is_empty() {
        Some((LossReason::EmptyHand, None))
    } else {
        None
    };
    s.round = fresh_round(taker.clone(), now, &s.options);
    match loss {
        Some((reason, losing_kind)) => {
            s.loser = Some(taker.clone());
            s.loss_reason = Some(reason);
            s.losing_kind = losing_kind;
            events.push(CockroachEvent::GameOver { loser: taker, reason, losing_kind });
        }
        None => events.push(CockroachEvent::RoundStarted { starter: taker }),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Invariants
// ---------------------------------------------------------------------------------------

/// All 64 cards exactly once across hands, fronts, the card in flight and the removed
/// pile; the round points at seated players.
pub fn check_invariants(s: &CockroachState) -> Result<(), String> {
    let mut seen = [false; DECK_SIZE as usize];
    let all = s
        .hands
        .values()
        .flatten()
        .chain(s.fronts.values().flatten())
        .chain(s.removed.iter())
        .chain(s.round.card.iter());
    let mut total = 0usize;
    for &c in all {
        let slot = seen.get_mut(c as usize).ok_or_else(|| format!("card id {c} outside the deck"))?;
        if *slot {
            return Err(format!("card {c} appears twice"));
        }
        *slot = true;
        total += 1;
    }
    if total != DECK_SIZE as usize {
        return Err(format!("{total} cards instead of {DECK_SIZE}"));
    }
    if !s.order.contains(&s.round.starter) {
        return Err("starter is not seated".into());
    }
    if s.round.card.is_some() != s.round.holder.is_some() {
        return Err("card and holder must be set together".into());
    }
    if let Some(h) = &s.round.holder {
        if !s.order.contains(h) {
            return Err("holder is not seated".into());
        }
    }
    if s.order.len() > 2 && s.round.holder.as_ref().is_some_and(|h| s.round.seen.contains(h) != s.round.peeked) {
        return Err("holder is in seen exactly when they peeked".into());
    }
    Ok(())
}
