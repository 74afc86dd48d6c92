//! Cockroach Poker's vocabulary (spec §8): the state and the round in play, what a
//! client may send and what only the server creates, the public events, and the reasons
//! an input is refused (code + Korean text). The rules that use them are in `rules.rs`.

pub use super::cards::{CardFace, Kind, DECK_SIZE, PER_KIND, TWO_PLAYER_REMOVED};
use super::options::CockroachOptions;
use crate::game::{Input, PlayerId, Reject};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// What a holder says about the latest claim: the wire strings `"true"` / `"false"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallWord {
    True,
    False,
}

/// One hop of this round's card: who said what to whom.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimEntry {
    pub from: PlayerId,
    pub to: PlayerId,
    pub claim: Kind,
}

/// The current round (spec §8.1 `round`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Round {
    pub starter: PlayerId,
    /// The card in flight; `None` while the starter chooses.
    pub card: Option<u32>,
    /// Who must decide now; `None` while the starter chooses.
    pub holder: Option<PlayerId>,
    pub last_passer: Option<PlayerId>,
    /// The latest claim: the one a call is judged against.
    pub claim: Option<Kind>,
    /// Everyone who has seen the card: the starter and every holder who peeked.
    pub seen: Vec<PlayerId>,
    /// Whether the current holder has peeked. Kept apart from `seen` because with the
    /// 2-player pass house rule the card can come back to someone who saw it as starter
    /// without having peeked as holder.
    pub peeked: bool,
    pub claims: Vec<ClaimEntry>,
    /// When the current starter or holder runs out of time: `turnSeconds` after the
    /// round last changed.
    pub deadline: i64,
}

/// Why the loser lost. `four` is the spec's name for "`loseCount` of one kind", whatever
/// `loseCount` is; `eightKinds` is the house rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LossReason {
    Four,
    EmptyHand,
    EightKinds,
}

/// The last call, revealed to everyone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reveal {
    pub card: u32,
    pub kind: Kind,
    pub claim: Kind,
    pub call: CallWord,
    pub caller: PlayerId,
    pub correct: bool,
    pub taken_by: PlayerId,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CockroachState {
    pub options: CockroachOptions,
    /// Seats, starting with the first starter.
    pub order: Vec<PlayerId>,
    pub hands: BTreeMap<PlayerId, Vec<u32>>,
    /// Face-up cards in front of each player.
    pub fronts: BTreeMap<PlayerId, Vec<u32>>,
    /// The 10 cards removed unseen in a 2-player game.
    pub removed: Vec<u32>,
    pub round: Round,
    pub loser: Option<PlayerId>,
    pub loss_reason: Option<LossReason>,
    pub losing_kind: Option<Kind>,
    pub last_reveal: Option<Reveal>,
}

impl CockroachState {
    pub fn is_over(&self) -> bool {
        self.loser.is_some()
    }

    /// Same-kind count that loses, resolved for this table.
    pub fn lose_count(&self) -> usize {
        self.options.lose_count.resolve(self.order.len())
    }

    pub fn turn_ms(&self) -> i64 {
        i64::from(self.options.turn_seconds) * 1000
    }

    pub fn hand(&self, p: &PlayerId) -> &[u32] {
        self.hands.get(p).map_or(&[], Vec::as_slice)
    }

    pub fn front(&self, p: &PlayerId) -> &[u32] {
        self.fronts.get(p).map_or(&[], Vec::as_slice)
    }

    /// Cards of `kind` in front of `p`.
    pub fn front_count(&self, p: &PlayerId, kind: Kind) -> usize {
        self.front(p).iter().filter(|&&c| Kind::of(c) == Some(kind)).count()
    }

    /// The one player the game waits for: the starter choosing, or the holder.
    pub fn active(&self) -> Option<&PlayerId> {
        if self.is_over() {
            return None;
        }
        match &self.round.holder {
            Some(h) if self.round.card.is_some() => Some(h),
            _ => Some(&self.round.starter),
        }
    }

    /// Who the holder could hand the card to (before peeking: whether peeking is
    /// possible at all; after: the legal `pass` targets), in seat order.
    ///
    /// 3–6 players: everyone who has not seen the card. 2 players: nobody, unless the
    /// `twoPlayerPass` house rule lets the first receiver peek and hand it back; the
    /// card cannot bounce back again (the starter already saw it).
    pub fn pass_targets(&self) -> Vec<PlayerId> {
        let Some(holder) = self.round.holder.as_ref().filter(|_| self.round.card.is_some()) else {
            return Vec::new();
        };
        if self.order.len() == 2 {
            let may = self.options.two_player_pass && (self.round.peeked || !self.round.seen.contains(holder));
            if !may {
                return Vec::new();
            }
            return self.order.iter().filter(|q| *q != holder).cloned().collect();
        }
        self.order.iter().filter(|q| *q != holder && !self.round.seen.contains(q)).cloned().collect()
    }
}

/// What a client may send (PROTOCOL "cockroach-poker"). Struct variants so that
/// `deny_unknown_fields` also refuses extra fields on `peek`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum CockroachAction {
    Offer {
        #[serde(rename = "cardId")]
        card_id: u32,
        to: PlayerId,
        claim: Kind,
    },
    Call {
        call: CallWord,
    },
    Peek {},
    Pass {
        to: PlayerId,
        claim: Kind,
    },
}

/// Inputs only the server creates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum CockroachSystem {
    /// The active player ran out of time (or was away too long): `apply` makes the
    /// random choice of §8.5 with the lent RNG.
    Timeout {},
}

pub type CockroachInput = Input<CockroachAction, CockroachSystem>;

/// Public events: never the face or id of a card that is still hidden.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum CockroachEvent {
    Offered {
        from: PlayerId,
        to: PlayerId,
        claim: Kind,
    },
    Peeked {
        by: PlayerId,
    },
    Passed {
        from: PlayerId,
        to: PlayerId,
        claim: Kind,
    },
    /// The card is face up now, so its id and kind are public.
    Revealed {
        caller: PlayerId,
        call: CallWord,
        claim: Kind,
        card: CardFace,
        correct: bool,
        taken_by: PlayerId,
    },
    TimedOut {
        player: PlayerId,
    },
    RoundStarted {
        starter: PlayerId,
    },
    GameOver {
        loser: PlayerId,
        reason: LossReason,
        losing_kind: Option<Kind>,
    },
}

/// Why an input is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CockroachReject {
    GameOver,
    NotSeated,
    /// `offer` by someone other than the starter, or while a card is in flight.
    NotStarter,
    /// `call`/`peek`/`pass` by someone other than the holder.
    NotHolder,
    /// A system timeout for someone the game is not waiting for.
    NotYourTurn,
    NotInHand,
    SelfTarget,
    UnknownPlayer,
    /// `call` after `peek`.
    MustPass,
    AlreadyPeeked,
    /// `pass` before `peek`.
    PeekFirst,
    /// `peek` when everyone else has seen the card.
    NoOneToPass,
    /// `peek` in a 2-player game without the house rule.
    TwoPlayerNoPass,
    /// `pass` to someone who has seen the card.
    AlreadySeen,
}

impl Reject for CockroachReject {
    fn code(&self) -> &'static str {
        match self {
            CockroachReject::GameOver => "game_over",
            CockroachReject::NotSeated => "not_seated",
            CockroachReject::NotStarter => "not_starter",
            CockroachReject::NotHolder => "not_holder",
            CockroachReject::NotYourTurn => "not_your_turn",
            CockroachReject::NotInHand => "not_in_hand",
            CockroachReject::SelfTarget => "self_target",
            CockroachReject::UnknownPlayer => "unknown_player",
            CockroachReject::MustPass => "must_pass",
            CockroachReject::AlreadyPeeked => "already_peeked",
            CockroachReject::PeekFirst => "peek_first",
            CockroachReject::NoOneToPass => "no_one_to_pass",
            CockroachReject::TwoPlayerNoPass => "two_player_no_pass",
            CockroachReject::AlreadySeen => "already_seen",
        }
    }

    fn reason(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            CockroachReject::GameOver => "게임이 이미 끝났어요",
            CockroachReject::NotSeated => "이 게임의 참가자가 아니에요",
            CockroachReject::NotStarter => "지금은 카드를 건넬 차례가 아니에요",
            CockroachReject::NotHolder => "카드를 받은 사람만 할 수 있어요",
            CockroachReject::NotYourTurn => "지금은 차례가 아니에요",
            CockroachReject::NotInHand => "손에 없는 카드예요",
            CockroachReject::SelfTarget => "자기 자신에게는 건넬 수 없어요",
            CockroachReject::UnknownPlayer => "이 게임에 없는 사람에게는 건넬 수 없어요",
            CockroachReject::MustPass => "카드를 이미 봤으니 다른 사람에게 넘겨야 해요",
            CockroachReject::AlreadyPeeked => "카드를 이미 봤어요",
            CockroachReject::PeekFirst => "먼저 카드를 몰래 봐야 넘길 수 있어요",
            CockroachReject::NoOneToPass => "넘길 사람이 없어요. 진짜인지 거짓말인지 판정해야 해요",
            CockroachReject::TwoPlayerNoPass => "2인 게임에서는 넘길 수 없어요. 판정해야 해요",
            CockroachReject::AlreadySeen => "이 카드를 이미 본 사람에게는 넘길 수 없어요",
        })
    }
}
