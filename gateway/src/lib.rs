//! # gateway: the roomd node
//!
//! HTTP API, WebSocket sessions, auth, config and the `roomd` binary. Rooms are reached
//! only through `room_actor::RoomsService` (`AppState.rooms`): no file here holds a
//! store or cluster handle, asks where a room is or names a Redis key.
//!
//! # Layout
//!
//! - [`config`]: settings (defaults → file → `ROOMD__…` environment).
//! - [`state`]: what every handler shares (`AppState`) and the player extractor.
//! - [`server`]: builds the state (the node's mode decided once, when it builds the rooms
//!   service); `start`, which binds and serves; drain.
//! - [`api`]: the HTTP API of `PROTOCOL.md`.
//! - [`admin`]: the operators' API (`/admin/api/…`) and console (`/admin`);
//!   [`admin_auth`]: the operators' token and audit trail.
//! - [`http_metrics`]: request counts and latencies by route, process and build metrics.
//! - [`ws`]: one session actor per WebSocket; [`ws_frames`]: its incoming frames, each
//!   frame's size decided from its header.
//! - [`protocol`]: parsing of the client's WebSocket messages (fuzzed in `fuzz/`).
//! - [`replay`]: replays of finished games for their players.
//! - [`auth`]: HS256 bearer tokens and the generated secret.
//! - [`limits`]: per-client-address limits (governor keyed by IP, trusted proxies).
//! - [`names`]: display names and user-id shapes.
//! - [`error`]: the `{"code","reason"}` error shape.
//! - [`telemetry`]: logging setup.
//! - [`web`]: the browser client's files (`static/`), embedded in the binary.

pub mod admin;
pub mod admin_auth;
pub mod api;
pub mod auth;
pub mod config;
pub mod error;
pub mod http_metrics;
pub mod limits;
pub mod log_flood;
pub mod names;
pub mod protocol;
pub mod replay;
pub mod server;
pub mod state;
pub mod telemetry;
pub mod web;
pub mod ws;
pub mod ws_frames;
