//! The 56 fruit cards (spec §3). A card's id alone determines its face: ids 0..14 are
//! strawberries, 14..28 bananas, 28..42 limes, 42..56 plums, and within a fruit the 14
//! cards show 1,1,1,1,1, 2,2,2, 3,3,3, 4,4, 5 fruits.

use serde::{Deserialize, Serialize};

/// Number of cards in the game.
pub const DECK_SIZE: u32 = 56;
/// Cards per fruit.
pub const PER_FRUIT: u32 = 14;
/// The fruit count shown on each of a fruit's 14 cards, by position.
const COUNTS: [u8; 14] = [1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 5];
/// The number that makes a ring correct.
pub const TARGET: u32 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Fruit {
    Strawberry,
    Banana,
    Lime,
    Plum,
}

pub const FRUITS: [Fruit; 4] = [Fruit::Strawberry, Fruit::Banana, Fruit::Lime, Fruit::Plum];

impl Fruit {
    pub fn index(self) -> usize {
        match self {
            Fruit::Strawberry => 0,
            Fruit::Banana => 1,
            Fruit::Lime => 2,
            Fruit::Plum => 3,
        }
    }

    /// Korean name, for summaries.
    pub fn name_ko(self) -> &'static str {
        match self {
            Fruit::Strawberry => "딸기",
            Fruit::Banana => "바나나",
            Fruit::Lime => "라임",
            Fruit::Plum => "자두",
        }
    }
}

/// What a face-up card shows: public once it is on top of a pile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Face {
    pub fruit: Fruit,
    pub count: u8,
}

/// The face of card `id`, or `None` for an id outside 0..56.
pub fn face(id: u32) -> Option<Face> {
    let fruit = *FRUITS.get((id / PER_FRUIT) as usize)?;
    let count = *COUNTS.get((id % PER_FRUIT) as usize)?;
    Some(Face { fruit, count })
}

/// The id of the `nth` (0-based) card of `fruit` showing `count` fruits, if it exists
/// (tests and benches use it to lay out tables by hand).
pub fn card_id(fruit: Fruit, count: u8, nth: usize) -> Option<u32> {
    let base = fruit.index() as u32 * PER_FRUIT;
    COUNTS.iter().enumerate().filter(|(_, c)| **c == count).nth(nth).map(|(i, _)| base + i as u32)
}

/// All card ids, in id order.
pub fn all_ids() -> Vec<u32> {
    (0..DECK_SIZE).collect()
}
