//! `halli_galli`: any bytes as a warmed-up game plus one client action, through the room's
//! input path with the contract's invariants (`roomd_fuzz::run_game`).
#![no_main]

use engine::games::halli_galli::HalliGalli;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| roomd_fuzz::run_game::<HalliGalli>(data, &roomd_fuzz::HALLI_GALLI));
