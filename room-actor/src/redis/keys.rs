//! Every Redis key roomd uses, in one place. Keys of one game share the hash tag of its
//! room (`{room:ID}`), so a game's log, counter, snapshot and lease live in one Redis
//! Cluster slot and one Lua script can touch them all.

/// A game's pk is `<room id>.<random hex>`, so the room (and so the hash tag) can be
/// found from the pk alone.
pub fn game_pk(room_id: &str, random_hex: &str) -> String {
    format!("{room_id}.{random_hex}")
}

/// The room id inside a game pk (`None` for a pk not made by [`game_pk`]).
pub fn room_of(game_pk: &str) -> Option<&str> {
    game_pk.split_once('.').map(|(room, _)| room).filter(|r| !r.is_empty() && !r.contains(['{', '}']))
}

#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
    /// Where the membership keys are: `<prefix>:{nodes}…`, one hash tag, so that on a
    /// Redis Cluster they share a slot and a heartbeat or `lua/forget.lua` can touch them
    /// together (on one Redis the tag changes nothing).
    nodes: String,
}

impl Keys {
    /// `prefix` separates deployments (and test runs) sharing one Redis.
    pub fn new(prefix: &str) -> Keys {
        Keys { prefix: prefix.to_owned(), nodes: format!("{prefix}:{{nodes}}") }
    }

    fn room(&self, room_id: &str) -> String {
        format!("{}:{{room:{room_id}}}", self.prefix)
    }

    /// `<prefix>:{room:ID}:game:PK:<what>`, built in one allocation: the log and counter
    /// keys are made for every append.
    fn game_key(&self, room_id: &str, pk: &str, what: &str) -> String {
        let parts = [self.prefix.as_str(), ":{room:", room_id, "}:game:", pk, ":", what];
        let mut key = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in parts {
            key.push_str(part);
        }
        key
    }

    pub fn start(&self, room_id: &str, pk: &str) -> String {
        self.game_key(room_id, pk, "start")
    }

    pub fn log(&self, room_id: &str, pk: &str) -> String {
        self.game_key(room_id, pk, "log")
    }

    pub fn seq(&self, room_id: &str, pk: &str) -> String {
        self.game_key(room_id, pk, "seq")
    }

    pub fn snapshot(&self, room_id: &str, pk: &str) -> String {
        format!("{}:game:{pk}:snap", self.room(room_id))
    }

    pub fn record(&self, room_id: &str, pk: &str) -> String {
        format!("{}:game:{pk}:record", self.room(room_id))
    }

    /// What the append queues' canary keys start with (each queue adds an id of its own;
    /// `redis/append/queue.rs`).
    pub fn appender_canary(&self) -> String {
        format!("{}:appender", self.prefix)
    }

    /// Node id → the address it takes peer links on (`cluster::link`), for nodes that do.
    pub fn node_peers(&self) -> String {
        format!("{}:peers", self.nodes)
    }

    /// The room's ownership lease (`node/epoch`), checked by every append.
    pub fn lease(&self, room_id: &str) -> String {
        let parts = [self.prefix.as_str(), ":{room:", room_id, "}:lease"];
        let mut key = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in parts {
            key.push_str(part);
        }
        key
    }

    /// The room's public info (JSON), which is enough to restore it on another node.
    pub fn meta(&self, room_id: &str) -> String {
        format!("{}:meta", self.room(room_id))
    }

    /// One bucket of the lobby index (a sorted set of open rooms by lobby position, see
    /// `lobby.rs`), in a hash slot of its own.
    pub fn lobby(&self, bucket: u64) -> String {
        format!("{}:{{lobby:{bucket}}}:rooms", self.prefix)
    }

    /// The dataset marker: a random id written once by the first node of a dataset; gone
    /// when Redis comes back without its data (`cluster/node/reconcile.rs`).
    pub fn dataset(&self) -> String {
        format!("{}:dataset", self.prefix)
    }

    /// Ids of rooms that have not finished.
    pub fn open_rooms(&self) -> String {
        format!("{}:rooms:open", self.prefix)
    }

    /// The room's lease epoch counter (only ever grows).
    pub fn epoch(&self, room_id: &str) -> String {
        format!("{}:epoch", self.room(room_id))
    }

    /// Live nodes, scored by heartbeat expiry (epoch ms).
    pub fn nodes(&self) -> String {
        self.nodes.clone()
    }

    /// Draining flags by node id.
    pub fn draining(&self) -> String {
        format!("{}:draining", self.nodes)
    }

    /// What each node last reported for operators (address, rooms, sockets), by node id.
    pub fn node_stats(&self) -> String {
        format!("{}:stats", self.nodes)
    }

    /// A user's finished games, scored by end time.
    pub fn user_games(&self, user: &str) -> String {
        format!("{}:user:{{{user}}}:games", self.prefix)
    }

    /// The open rooms a user hosts, for the per-user cap on open rooms across the cluster
    /// (`cluster/quota.rs`, `RoomQuota`).
    pub fn user_rooms(&self, user: &str) -> String {
        format!("{}:user:{{{user}}}:rooms", self.prefix)
    }

    /// The rooms a user took a seat in (and the rooms they created), for the cap on
    /// waiting seats (`cluster/quota.rs`).
    pub fn user_seated(&self, user: &str) -> String {
        format!("{}:user:{{{user}}}:seated", self.prefix)
    }

    /// A user's open WebSockets, a hash with one field per node (its count there), for the
    /// per-user socket cap across the cluster (`cluster/quota.rs`, `UserSockets`).
    pub fn user_sockets(&self, user: &str) -> String {
        format!("{}:user:{{{user}}}:sockets", self.prefix)
    }

    /// The users a node counted sockets for in their [`Keys::user_sockets`], so that the
    /// node, restarted with the same id, can zero its field in each (its old sockets died
    /// with the process). Used alone: no hash tag.
    pub fn node_socket_users(&self, node: &str) -> String {
        format!("{}:node:{node}:socket-users", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_game_share_the_room_hash_tag() {
        let keys = Keys::new("roomd");
        let pk = game_pk("r_1", "ab");
        let room = room_of(&pk).unwrap();
        for key in [keys.start(room, &pk), keys.log(room, &pk), keys.seq(room, &pk), keys.lease(room)] {
            assert!(key.starts_with("roomd:{room:r_1}:"), "{key}");
        }
        assert_eq!(keys.log(room, &pk), format!("roomd:{{room:r_1}}:game:{pk}:log"));
        assert_eq!(keys.seq(room, &pk), format!("roomd:{{room:r_1}}:game:{pk}:seq"));
        assert_eq!(keys.start(room, &pk), format!("roomd:{{room:r_1}}:game:{pk}:start"));
        assert_eq!(keys.lease(room), "roomd:{room:r_1}:lease");
        assert_eq!(room_of("no-dot"), None);
        assert_eq!(room_of(".x"), None);
        assert_eq!(room_of("a{b}.x"), None);
    }

    #[test]
    fn the_membership_keys_share_one_hash_tag() {
        let keys = Keys::new("roomd");
        assert_eq!(
            [keys.nodes(), keys.draining(), keys.node_stats(), keys.node_peers()],
            ["roomd:{nodes}", "roomd:{nodes}:draining", "roomd:{nodes}:stats", "roomd:{nodes}:peers"]
        );
    }

    #[test]
    fn a_users_keys_share_the_users_hash_tag() {
        let keys = Keys::new("roomd");
        assert_eq!(
            [keys.user_rooms("u1"), keys.user_seated("u1"), keys.user_sockets("u1"), keys.user_games("u1")],
            ["roomd:user:{u1}:rooms", "roomd:user:{u1}:seated", "roomd:user:{u1}:sockets", "roomd:user:{u1}:games"]
        );
    }
}
