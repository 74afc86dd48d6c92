//! Cluster building blocks on Redis: who is alive ([`membership`]), where a room belongs
//! ([`placement`]), who may write a room's log ([`lease`]), how nodes talk ([`bus`] and
//! its [`frame`]s, [`outbox`], [`link`] and its [`link_wire`] format), and the node that
//! ties them together ([`node`]); where watched rooms are ([`routes`]); operators' reads
//! ([`ops`]).

pub mod bus;
pub mod failover;
pub mod frame;
pub mod lease;
pub mod link;
pub mod link_wire;
pub mod membership;
pub mod node;
pub mod ops;
pub mod outbox;
pub mod placement;
pub mod quota;
pub mod routes;
pub mod simulation;
