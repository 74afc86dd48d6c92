//! `tally`: any bytes as a warmed-up game plus one client action, through the room's
//! input path with the contract's invariants (`roomd_fuzz::run_game`).
#![no_main]

use engine::games::tally::Tally;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| roomd_fuzz::run_game::<Tally>(data, &roomd_fuzz::TALLY));
