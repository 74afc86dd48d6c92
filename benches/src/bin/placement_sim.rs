//! Placement at scale with the real placement code (`room_actor::cluster::simulation`):
//! how rooms spread over nodes and what moves when a node joins, leaves or dies.
//!
//!     cargo run --release -p benches --bin placement_sim -- --nodes 1000 --rooms 1000000
//!
//! Prints one JSON object (the figures of `docs/capacity.md`).

use anyhow::Context;
use room_actor::cluster::simulation::simulate;
use serde_json::json;
use std::time::Instant;

fn arg(name: &str, default: usize) -> anyhow::Result<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)) {
        Some(v) => v.parse().with_context(|| format!("{name} takes a number, not {v:?}")),
        None => Ok(default),
    }
}

fn main() -> anyhow::Result<()> {
    let nodes = arg("--nodes", 1000)?;
    let rooms = arg("--rooms", 1_000_000)?;
    let threads = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    anyhow::ensure!(nodes >= 2, "--nodes must be at least 2 (one of them leaves)");
    let started = Instant::now();
    let s = simulate(nodes, rooms, threads);
    let report = json!({
        "nodes": s.nodes,
        "rooms": s.rooms,
        "roomsPerNode": {"max": s.max_per_node, "min": s.min_per_node, "mean": s.mean_per_node,
                         "maxOverMean": s.max_per_node as f64 / s.mean_per_node},
        "join": {"moved": s.moved_on_join, "ideal": rooms as f64 / (nodes + 1) as f64},
        "leave": {"moved": s.moved_on_leave, "movedNotFromLeaver": s.moved_not_from_leaver,
                  "maxTakenBySurvivor": s.max_taken_by_one, "survivorsTaking": s.survivors_taking,
                  "meanTakenBySurvivor": s.moved_on_leave as f64 / s.survivors_taking.max(1) as f64},
        "seconds": started.elapsed().as_secs_f64(),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
