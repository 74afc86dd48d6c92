//! Cluster building blocks on Redis: who is alive ([`membership`]), where a room belongs
//! ([`placement`]), and who may write a room's log ([`lease`]). Routing, failover and
//! drain are built from these.

pub mod lease;
pub mod membership;
pub mod placement;
