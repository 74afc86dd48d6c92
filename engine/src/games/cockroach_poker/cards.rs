//! The deck: 64 cards, 8 kinds × 8. A card's id fixes its face, so a hidden card's id
//! is as secret as its kind.

use serde::{Deserialize, Serialize};

/// Cards in the box: 8 kinds × 8. Card `id` (0..64) has kind `Kind::ALL[id / 8]`.
pub const DECK_SIZE: u32 = 64;
/// Cards of each kind.
pub const PER_KIND: u32 = 8;
/// Cards removed unseen in a 2-player game.
pub const TWO_PLAYER_REMOVED: usize = 10;

/// The eight vermin (spec §3), in the order card ids follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Cockroach,
    Bat,
    Fly,
    Toad,
    Rat,
    Scorpion,
    Spider,
    Stinkbug,
}

impl Kind {
    pub const ALL: [Kind; 8] =
        [Kind::Cockroach, Kind::Bat, Kind::Fly, Kind::Toad, Kind::Rat, Kind::Scorpion, Kind::Spider, Kind::Stinkbug];

    /// The kind of card `id`, or `None` for an id outside the deck.
    pub fn of(id: u32) -> Option<Kind> {
        Kind::ALL.get(usize::try_from(id / PER_KIND).ok()?).copied()
    }

    /// The first card id of this kind (tests build hands with it).
    pub fn first_id(self) -> u32 {
        Kind::ALL.iter().position(|k| *k == self).map_or(0, |i| i as u32 * PER_KIND)
    }

    /// Korean display name (spec §3).
    pub fn name_ko(self) -> &'static str {
        match self {
            Kind::Cockroach => "바퀴벌레",
            Kind::Bat => "박쥐",
            Kind::Fly => "파리",
            Kind::Toad => "두꺼비",
            Kind::Rat => "쥐",
            Kind::Scorpion => "전갈",
            Kind::Spider => "거미",
            Kind::Stinkbug => "노린재",
        }
    }
}

/// A card with its face, as views show it to those allowed to see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardFace {
    pub id: u32,
    pub kind: Kind,
}

impl CardFace {
    pub fn of(id: u32) -> Option<CardFace> {
        Kind::of(id).map(|kind| CardFace { id, kind })
    }
}
