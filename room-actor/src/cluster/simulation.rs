//! What placement does to a cluster at scale, computed with the real [`placement::owner`]
//! (the function every node runs to place rooms and to pick the rooms it takes in a
//! failover scan) over synthetic node and room ids: how evenly rooms spread, how many
//! move when a node joins, leaves or dies, and how a dead node's rooms spread over the
//! survivors (each survivor restores those). `docs/capacity.md` has the figures; the
//! `placement_sim` command (benches) prints them for any size.

use crate::cluster::placement;
use std::collections::HashMap;

/// The figures of one simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    pub nodes: usize,
    pub rooms: usize,
    /// Rooms per node: the fullest, the emptiest, and the mean.
    pub max_per_node: usize,
    pub min_per_node: usize,
    pub mean_per_node: f64,
    /// Rooms whose owner changed when one more node joined (ideally `rooms / (nodes + 1)`).
    pub moved_on_join: usize,
    /// Rooms that moved when one node left or died, and how many of them were not that
    /// node's (rendezvous hashing: always 0).
    pub moved_on_leave: usize,
    pub moved_not_from_leaver: usize,
    /// The dead node's rooms taken per survivor: the most any one survivor restores, and
    /// how many survivors took any.
    pub max_taken_by_one: usize,
    pub survivors_taking: usize,
}

fn node_id(i: usize) -> String {
    format!("node-{i:04}")
}

fn room_id(i: usize) -> String {
    format!("r_{i:012x}")
}

/// Places `rooms` rooms on `nodes` nodes (ids like the real ones), then adds one node, and
/// separately removes the fullest one. Uses up to `threads` threads.
pub fn simulate(nodes: usize, rooms: usize, threads: usize) -> Spread {
    let ids: Vec<String> = (0..nodes).map(node_id).collect();
    let joiner = node_id(nodes);
    let owners = owners_of(&ids, rooms, threads);
    let mut per_node: HashMap<usize, usize> = HashMap::new();
    for owner in &owners {
        *per_node.entry(*owner).or_default() += 1;
    }
    let counts: Vec<usize> = (0..nodes).map(|n| per_node.get(&n).copied().unwrap_or(0)).collect();
    let leaver = (0..nodes).max_by_key(|n| counts[*n]).unwrap_or(0);
    // One more node: a room moves iff the newcomer now has the highest weight.
    let moved_on_join = (0..rooms)
        .filter(|r| {
            let room = room_id(*r);
            let before = ids[owners[*r]].as_str();
            placement::owner(&room, [before, joiner.as_str()]) == Some(joiner.as_str())
        })
        .count();
    // One node fewer: every room is placed again over the survivors.
    let survivors: Vec<String> =
        ids.iter().enumerate().filter(|(i, _)| *i != leaver).map(|(_, id)| id.clone()).collect();
    let after = owners_of(&survivors, rooms, threads);
    let (mut moved_on_leave, mut moved_not_from_leaver) = (0, 0);
    let mut taken: HashMap<&str, usize> = HashMap::new();
    for r in 0..rooms {
        let (was, now) = (ids[owners[r]].as_str(), survivors[after[r]].as_str());
        if was != now {
            moved_on_leave += 1;
            if owners[r] != leaver {
                moved_not_from_leaver += 1;
            }
            *taken.entry(now).or_default() += 1;
        }
    }
    Spread {
        nodes,
        rooms,
        max_per_node: counts.iter().copied().max().unwrap_or(0),
        min_per_node: counts.iter().copied().min().unwrap_or(0),
        mean_per_node: rooms as f64 / nodes.max(1) as f64,
        moved_on_join,
        moved_on_leave,
        moved_not_from_leaver,
        max_taken_by_one: taken.values().copied().max().unwrap_or(0),
        survivors_taking: taken.len(),
    }
}

/// The owner (an index into `nodes`) of every room, computed in `threads` slices.
fn owners_of(nodes: &[String], rooms: usize, threads: usize) -> Vec<usize> {
    let index: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let threads = threads.clamp(1, 64);
    let chunk = rooms.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = (0..rooms)
            .step_by(chunk)
            .map(|start| {
                let index = &index;
                scope.spawn(move || {
                    (start..(start + chunk).min(rooms))
                        .map(|r| {
                            let room = room_id(r);
                            placement::owner(&room, nodes.iter().map(String::as_str))
                                .and_then(|o| index.get(o).copied())
                                .unwrap_or(0)
                        })
                        .collect::<Vec<usize>>()
                })
            })
            .collect();
        parts.into_iter().flat_map(|p| p.join().unwrap_or_default()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_spread_evenly_and_only_the_rooms_that_must_move_do() {
        let s = simulate(50, 40_000, 2);
        assert_eq!(s.rooms, 40_000);
        // 800 rooms a node on average: the fullest within 15 % of it (binomial spread).
        assert!(s.max_per_node as f64 <= s.mean_per_node * 1.15, "{s:?}");
        assert!(s.min_per_node as f64 >= s.mean_per_node * 0.85, "{s:?}");
        // A newcomer takes about its share (1/51 of the rooms), from everyone.
        let share = 40_000.0 / 51.0;
        assert!((s.moved_on_join as f64 - share).abs() <= share * 0.2, "{s:?}");
        // A leaver's rooms move, nothing else, spread over most survivors.
        assert_eq!(s.moved_not_from_leaver, 0);
        assert_eq!(s.moved_on_leave, s.max_per_node, "exactly the leaver's (the fullest node's) rooms move");
        assert!(s.survivors_taking >= 45, "{s:?}");
        assert!(s.max_taken_by_one <= 60, "no survivor restores much more than 1/49 of 900: {s:?}");
    }
}
