//! `soak`: thousands of short connect / play / disconnect cycles against a roomd you run
//! yourself, sampling the server's memory, to show whether it stays flat over time. A
//! documented command, not a CI test: see the "Soak" section of `benches/README.md`.
//!
//! Only point it at servers you run: it connects to `--url` and nowhere else.
//!
//! One cycle: guest sessions for 1–4 people, the first creates a room (`tally` with a small
//! target, `halli-galli` with short timers, or `cockroach-poker` with a 3-card loss; some
//! with a bot), the others sit, everyone connects and `sub`s, the host starts, and the
//! people play to the `result`. In some cycles one player drops its TCP connection
//! mid-game without a close frame (half with a reset, half with a plain FIN), and some of
//! those come back (new socket, `sub`, `sync`) and play on. After the result everyone
//! leaves: most with a close frame (some `unsub` first), some abruptly.
//!
//! Every await is bounded: HTTP calls and handshakes by their own deadlines, each socket
//! read by an idle timeout, each send by a send timeout, and each whole cycle by
//! `--cycle-timeout`. A cycle that runs out of time is counted as an error, with the
//! step each of its players was in, and its sockets are dropped; it is never waited for.
//!
//! # Layout
//!
//! - [`cli`]: the flags (`soak --help`).
//! - `plan`: what each cycle does, decided from the seed.
//! - `cycle`: one cycle, and the workers that run them.
//! - `player`: one person playing, dropping, coming back and leaving.
//! - `net`: the bounded socket and HTTP steps.
//! - `counts`: what cycles saw (errors by kind as loadgen counts them).
//! - `sample`: server RSS from `/proc`, `/metrics`, the RSS slope.
//! - `run`, `report`: the run with its progress lines, then the table and verdict.
//!
//! `src/bin/soak.rs` is the command; `benches/soak.sh` runs it against a fresh roomd.

pub mod cli;
mod counts;
mod cycle;
mod net;
mod plan;
mod player;
mod report;
mod run;
mod sample;

pub use cli::{parse_args, Args, USAGE};
pub use run::soak;
