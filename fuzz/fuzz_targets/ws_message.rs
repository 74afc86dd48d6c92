//! `ws_message`: any bytes as a WebSocket text frame, through
//! `gateway::protocol::parse` and, for an `act`, on into every game's input path
//! (`roomd_fuzz::ws_message`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| roomd_fuzz::ws_message(data));
