//! Which client sequence numbers (`cs`) each player has had applied, and at which `seq`:
//! a retried `act` is answered with its original `seq` and never applied twice
//! (PROTOCOL.md, conventions).
//!
//! A room keeps every pair for the whole game, so the layout matters: one sorted
//! `Vec<(cs, seq)>` per player is 16 bytes per applied action, where a map keyed by
//! `(PlayerId, cs)` cost a cloned id and a hash slot per action (about 100 bytes). Clients
//! number their actions in increasing order, so inserting is an append in practice.

use engine::PlayerId;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppliedCs {
    by_player: Vec<(PlayerId, Vec<(u64, u64)>)>,
}

impl AppliedCs {
    pub fn new() -> AppliedCs {
        AppliedCs::default()
    }

    fn list(&self, player: &PlayerId) -> Option<&Vec<(u64, u64)>> {
        self.by_player.iter().find(|(p, _)| p == player).map(|(_, list)| list)
    }

    /// The `seq` at which `player`'s action `cs` was applied, if it was.
    pub fn get(&self, player: &PlayerId, cs: u64) -> Option<u64> {
        let list = self.list(player)?;
        list.binary_search_by_key(&cs, |&(c, _)| c).ok().map(|i| list[i].1)
    }

    /// Records that `player`'s action `cs` was applied as `seq` (a second record of the
    /// same `cs` keeps the first, which is what the log holds).
    pub fn insert(&mut self, player: &PlayerId, cs: u64, seq: u64) {
        let list = match self.by_player.iter().position(|(p, _)| p == player) {
            Some(i) => &mut self.by_player[i].1,
            None => {
                self.by_player.push((player.clone(), Vec::new()));
                let last = self.by_player.len() - 1;
                &mut self.by_player[last].1
            }
        };
        match list.last() {
            Some(&(last, _)) if last < cs => list.push((cs, seq)),
            None => list.push((cs, seq)),
            _ => {
                if let Err(i) = list.binary_search_by_key(&cs, |&(c, _)| c) {
                    list.insert(i, (cs, seq));
                }
            }
        }
    }

    /// How many actions are recorded, over all players.
    pub fn len(&self) -> usize {
        self.by_player.iter().map(|(_, list)| list.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn retries_find_their_original_seq_in_any_order() {
        let (a, b) = (PlayerId::from("a"), PlayerId::from("b"));
        let mut applied = AppliedCs::new();
        applied.insert(&a, 1, 10);
        applied.insert(&b, 1, 11);
        applied.insert(&a, 3, 12);
        applied.insert(&a, 2, 13); // out of order: still found
        applied.insert(&a, 3, 99); // a second record keeps the first
        assert_eq!(applied.get(&a, 1), Some(10));
        assert_eq!(applied.get(&a, 2), Some(13));
        assert_eq!(applied.get(&a, 3), Some(12));
        assert_eq!(applied.get(&b, 1), Some(11));
        assert_eq!(applied.get(&b, 2), None);
        assert_eq!(applied.get(&PlayerId::from("c"), 1), None);
        assert_eq!(applied.len(), 4);
    }

    #[test]
    fn agrees_with_a_map_on_random_histories() {
        // A tiny xorshift so the test needs no dependency and reproduces.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let players: Vec<PlayerId> = (0..4).map(|i| PlayerId::new(format!("p{i}"))).collect();
        let mut applied = AppliedCs::new();
        let mut model: HashMap<(PlayerId, u64), u64> = HashMap::new();
        for seq in 1..2_000 {
            let p = &players[(next() % 4) as usize];
            let cs = next() % 300;
            applied.insert(p, cs, seq);
            model.entry((p.clone(), cs)).or_insert(seq);
        }
        for p in &players {
            for cs in 0..300 {
                assert_eq!(applied.get(p, cs), model.get(&(p.clone(), cs)).copied(), "{p} {cs}");
            }
        }
        assert_eq!(applied.len(), model.len());
    }
}
