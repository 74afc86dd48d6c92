//! `bus_frame`: any bytes as a frame published on a node's bus channel, through the
//! decoder the subscription uses (`roomd_fuzz::frames::bus_frame`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| roomd_fuzz::frames::bus_frame(data));
