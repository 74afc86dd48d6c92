//! The games. Each lives in its own folder with the same files: `mod.rs` (the [`Game`]
//! impl that ties it together), `options.rs`, `rules.rs` (state, inputs, validate,
//! apply), `view.rs` and `bot.rs`; `tally` is the annotated example.
//!
//! [`Game`]: crate::game::Game

pub mod cockroach_poker;
pub mod halli_galli;
pub mod tally;
