//! `cockroach_poker`: any bytes as a warmed-up game plus one client action, through the room's
//! input path with the contract's invariants (`roomd_fuzz::run_game`).
#![no_main]

use engine::games::cockroach_poker::CockroachPoker;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| roomd_fuzz::run_game::<CockroachPoker>(data, &roomd_fuzz::COCKROACH_POKER));
