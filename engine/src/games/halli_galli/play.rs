//! Applying inputs (spec §5–§6): flips and reserved flips, rings and the latency window,
//! collections, penalties, eliminations and the end of the game.

use super::cards::{face, Fruit};
use super::options::{EndMode, LatencyComp};
use super::rules::{
    validate, EndReason, HalliGalliAction, HalliGalliEvent, HalliGalliInput, HalliGalliState, HalliGalliSystem,
    LastBell, OutReason, Phase, RingWindow, WindowRing, MAX_LATENCY_CREDIT_MS, STRIKES,
};
use crate::error::EngineError;
use crate::game::{Actor, Input, PlayerId, Reject};
use crate::turns;

/// Applies a validated input: the new state and its events.
pub fn apply(
    state: &HalliGalliState,
    actor: &Actor,
    input: &HalliGalliInput,
    now: i64,
    rtt_ms: Option<u32>,
) -> Result<(HalliGalliState, Vec<HalliGalliEvent>), EngineError> {
    if let Err(r) = validate(state, actor, input, now) {
        return Err(EngineError::InvalidInput(format!("{input:?} by {actor:?}: {}", r.code())));
    }
    let mut t = Table { s: state.clone(), events: Vec::new(), now };
    match (input, actor) {
        (Input::Client(HalliGalliAction::Flip {}), Actor::Player(p))
        | (Input::System(HalliGalliSystem::TimeoutFlip {}), Actor::Player(p)) => t.request_flip(p, false)?,
        (Input::Client(HalliGalliAction::Ring { .. }), Actor::Player(p)) => t.ring(p, rtt_ms)?,
        (Input::System(HalliGalliSystem::Resolve {}), _) => t.resolve()?,
        (Input::System(HalliGalliSystem::Tick {}), _) => t.tick()?,
        _ => return Err(EngineError::InvalidInput(format!("{input:?} by {actor:?}"))),
    }
    t.settle()?;
    Ok((t.s, t.events))
}

/// A state being changed, with the events it produced and the time of the input.
struct Table {
    s: HalliGalliState,
    events: Vec<HalliGalliEvent>,
    now: i64,
}

impl Table {
    fn set_turn(&mut self, p: PlayerId) {
        self.s.turn = p.clone();
        self.s.turn_started_at = self.now;
        self.s.turn_deadline = self.now + self.s.options.flip_ms();
        self.s.pending_flip = None;
        self.events.push(HalliGalliEvent::Turn { player: p, deadline: self.s.turn_deadline });
    }

    fn table_changed(&mut self) {
        self.s.table_version += 1;
        self.s.flip_allowed_at = self.now + i64::from(self.s.options.flip_guard_ms);
    }

    /// A flip now, or reserved while the guard runs or a ring window is open (§5.1).
    fn request_flip(&mut self, p: &PlayerId, auto: bool) -> Result<(), EngineError> {
        if self.s.ring_window.is_some() || self.now < self.s.flip_allowed_at {
            if self.s.pending_flip.is_none() {
                self.s.pending_flip = Some(p.clone());
                self.events.push(HalliGalliEvent::FlipReserved { player: p.clone(), at: self.s.flip_allowed_at });
            }
            return Ok(());
        }
        self.flip_now(p, auto)
    }

    fn flip_now(&mut self, p: &PlayerId, auto: bool) -> Result<(), EngineError> {
        let card = self
            .s
            .decks
            .get_mut(p)
            .and_then(Vec::pop)
            .ok_or_else(|| EngineError::invariant(format!("{p} flips with an empty deck")))?;
        let f = face(card).ok_or_else(|| EngineError::invariant(format!("card {card} does not exist")))?;
        self.s.face_up.entry(p.clone()).or_default().push(card);
        self.table_changed();
        self.events.push(HalliGalliEvent::Flipped {
            player: p.clone(),
            fruit: f.fruit,
            count: f.count,
            table_version: self.s.table_version,
            auto,
        });
        let next = turns::next_clockwise(&self.s.order, p, |q| self.s.active.contains(q))
            .ok_or_else(|| EngineError::invariant("nobody left to flip"))?;
        self.set_turn(next);
        Ok(())
    }

    fn ring(&mut self, p: &PlayerId, rtt_ms: Option<u32>) -> Result<(), EngineError> {
        let Some(fruit) = self.s.five_fruit() else {
            return self.wrong_ring(p);
        };
        if self.s.options.latency_comp == LatencyComp::Off {
            return self.win(p, fruit);
        }
        let credit = (i64::from(rtt_ms.unwrap_or(0)) / 2).min(MAX_LATENCY_CREDIT_MS);
        let ring = WindowRing { player: p.clone(), adj_ts: self.now - credit };
        let (version, now) = (self.s.table_version, self.now);
        let window =
            self.s.ring_window.get_or_insert_with(|| RingWindow { version, opened_at: now, rings: Vec::new() });
        window.rings.push(ring);
        let closes_at = window.closes_at();
        self.events.push(HalliGalliEvent::RingQueued { player: p.clone(), closes_at });
        Ok(())
    }

    /// Closes the window: the earliest compensated ring wins, arrival order breaks ties.
    fn resolve(&mut self) -> Result<(), EngineError> {
        let window = self.s.ring_window.take().ok_or_else(|| EngineError::invariant("no ring window"))?;
        if window.version != self.s.table_version {
            return Err(EngineError::invariant("the table changed under an open ring window"));
        }
        let winner = window
            .rings
            .iter()
            .enumerate()
            .min_by_key(|(i, r)| (r.adj_ts, *i))
            .map(|(_, r)| r.player.clone())
            .ok_or_else(|| EngineError::invariant("empty ring window"))?;
        let fruit = self.s.five_fruit().ok_or_else(|| EngineError::invariant("ring window on a wrong table"))?;
        self.win(&winner, fruit)
    }

    fn win(&mut self, p: &PlayerId, fruit: Fruit) -> Result<(), EngineError> {
        *self.s.correct_count.entry(p.clone()).or_insert(0) += 1;
        self.s.last_bell = Some(LastBell { player: p.clone(), correct: true, fruit: Some(fruit), at: self.now });
        self.events.push(HalliGalliEvent::Bell { player: p.clone(), correct: true, fruit: Some(fruit) });
        let final_ring = self.s.official_final();
        self.collect(p);
        if final_ring {
            self.end(EndReason::Official);
        }
        Ok(())
    }

    /// `p` takes every face-up pile in seat order (each from its bottom) and then the pot,
    /// card by card under their deck (§5.2); the table changes and `p` flips next.
    fn collect(&mut self, p: &PlayerId) {
        let mut taken: Vec<u32> = Vec::new();
        for q in &self.s.order {
            if let Some(pile) = self.s.face_up.get_mut(q) {
                taken.append(pile);
            }
        }
        taken.append(&mut self.s.pot);
        let count = taken.len();
        let deck = self.s.decks.entry(p.clone()).or_default();
        // Each card goes under the deck in turn, so the last one taken ends at the bottom.
        taken.reverse();
        taken.append(deck);
        *deck = taken;
        self.table_changed();
        self.events.push(HalliGalliEvent::Collected {
            player: p.clone(),
            taken: count,
            table_version: self.s.table_version,
        });
        self.set_turn(p.clone());
    }

    fn wrong_ring(&mut self, p: &PlayerId) -> Result<(), EngineError> {
        let o = &self.s.options;
        let (lockout, strike_out, escalation, to_pot, duel_rule) =
            (o.wrong_ring_lockout_ms, o.strike_out, o.penalty_escalation, o.wrong_to_pot, o.duel_wrong_loses);
        let wrongs = {
            let w = self.s.wrong_count.entry(p.clone()).or_insert(0);
            *w += 1;
            *w
        };
        self.s.last_bell = Some(LastBell { player: p.clone(), correct: false, fruit: None, at: self.now });
        self.events.push(HalliGalliEvent::Bell { player: p.clone(), correct: false, fruit: None });
        if lockout > 0 {
            let until = self.now + i64::from(lockout);
            self.s.locked_until.insert(p.clone(), until);
            self.events.push(HalliGalliEvent::Locked { player: p.clone(), until });
        }

        let duel = self.s.active.len() == 2;
        if self.s.official_final() {
            // §6: the other player takes the table and the game ends.
            let other = self.s.active.iter().find(|q| *q != p).cloned();
            if let Some(other) = other {
                self.collect(&other);
            }
            if duel_rule {
                self.eliminate(p, OutReason::DuelWrongRing);
            }
            self.end(EndReason::Official);
            return Ok(());
        }
        if duel && duel_rule {
            self.eliminate(p, OutReason::DuelWrongRing);
            return Ok(());
        }

        let per_player = if escalation { wrongs as usize } else { 1 };
        let others = turns::others_clockwise(&self.s.order, p, |q| self.s.active.contains(q));
        let owed = per_player * others.len();
        let mut deck = self.s.decks.remove(p).unwrap_or_default();
        let mut given_to = Vec::new();
        let mut pot_count = 0;
        if to_pot {
            let n = owed.min(deck.len());
            let from = deck.len() - n;
            self.s.pot.extend(deck.drain(from..).rev());
            pot_count = n;
        } else {
            'rounds: for _ in 0..per_player {
                for q in &others {
                    let Some(card) = deck.pop() else { break 'rounds };
                    self.s.decks.entry(q.clone()).or_default().insert(0, card);
                    given_to.push(q.clone());
                }
            }
        }
        let paid = given_to.len() + pot_count;
        self.s.decks.insert(p.clone(), deck);
        self.events.push(HalliGalliEvent::Penalty { player: p.clone(), to: given_to, to_pot: pot_count });
        if paid < owed {
            self.eliminate(p, OutReason::CouldNotPay);
        } else if strike_out && wrongs >= STRIKES {
            let deck = self.s.decks.get_mut(p).map(std::mem::take).unwrap_or_default();
            let n = deck.len();
            self.s.pot.extend(deck);
            self.events.push(HalliGalliEvent::Forfeited { player: p.clone(), to_pot: n });
            self.eliminate(p, OutReason::StrikeOut);
        }
        Ok(())
    }

    fn eliminate(&mut self, p: &PlayerId, reason: OutReason) {
        if !self.s.active.contains(p) {
            return;
        }
        self.s.active.retain(|q| q != p);
        self.s.eliminated.push(p.clone());
        if self.s.pending_flip.as_ref() == Some(p) {
            self.s.pending_flip = None;
        }
        self.events.push(HalliGalliEvent::Eliminated { player: p.clone(), reason });
    }

    fn end(&mut self, reason: EndReason) {
        if self.s.phase == Phase::Ended {
            return;
        }
        self.s.phase = Phase::Ended;
        self.s.end_reason = Some(reason);
        self.s.ended_at = Some(self.now);
        self.s.ring_window = None;
        self.s.pending_flip = None;
        self.events.push(HalliGalliEvent::Ended { reason });
    }

    /// Whatever the clock has made due, in order: the start, the time limit, a reserved
    /// flip, the turn deadline's automatic flip.
    fn tick(&mut self) -> Result<(), EngineError> {
        if self.s.phase == Phase::Countdown {
            self.s.phase = Phase::Playing;
            self.s.flip_allowed_at = self.now;
            let first = self.s.turn.clone();
            self.events.push(HalliGalliEvent::Started { turn: first.clone() });
            self.set_turn(first);
            return Ok(());
        }
        if self.s.ends_at.is_some_and(|e| e <= self.now) {
            self.end(EndReason::TimeLimit);
            return Ok(());
        }
        if let Some(p) = self.s.pending_flip.clone() {
            if self.s.flip_allowed_at <= self.now {
                return self.flip_now(&p, false);
            }
        }
        if self.s.turn_deadline <= self.now {
            let p = self.s.turn.clone();
            self.s.pending_flip = None;
            return self.flip_now(&p, true);
        }
        Err(EngineError::InvalidInput("tick with nothing due".into()))
    }

    /// After every input: players whose turn came with an empty deck go out (§5.3), the
    /// turn skips players who are out, and one player left ends the game.
    fn settle(&mut self) -> Result<(), EngineError> {
        while self.s.phase == Phase::Playing {
            if self.s.active.len() <= 1 {
                let reason = match self.s.options.end_mode {
                    EndMode::Official if self.s.order.len() > 2 => EndReason::Official,
                    _ => EndReason::LastStanding,
                };
                self.end(reason);
                break;
            }
            let turn = self.s.turn.clone();
            if !self.s.is_active(&turn) {
                let next = turns::next_clockwise(&self.s.order, &turn, |q| self.s.active.contains(q))
                    .ok_or_else(|| EngineError::invariant("no active player for the turn"))?;
                self.set_turn(next);
                continue;
            }
            if self.s.deck_len(&turn) == 0 {
                self.eliminate(&turn, OutReason::EmptyDeck);
                continue;
            }
            break;
        }
        Ok(())
    }
}
