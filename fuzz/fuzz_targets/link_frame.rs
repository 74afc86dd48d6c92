//! `link_frame`: frames sealed as a dialer writes them, mixed with bytes a relay adds,
//! through a peer link's reader and its check (`roomd_fuzz::frames::link_frame`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| roomd_fuzz::frames::link_frame(data));
