//! The node's Redis: where it is and how every connection to it is made ([`target`]), how
//! it connects ([`conn`]: one Redis or a Redis Cluster behind one connection type;
//! [`cluster`]: the cluster connection that replaces itself when a master hangs), where
//! everything lives ([`keys`]), the Lua scripts (`lua/`), the group commit of log
//! appends ([`append`]), and what differs on a Redis Cluster beyond the connection,
//! decided once ([`topology`]). The store on top is `store/redis/`; the
//! cluster's Redis parts (membership, leases, the bus) are in `cluster/`.

pub mod append;
pub(crate) mod cluster;
pub mod conn;
pub mod keys;
pub mod slots;
pub mod target;
pub mod topology;
