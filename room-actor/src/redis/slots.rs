//! A Redis Cluster's slots as the node last read them: which slot a key is in (the
//! cluster's own rule: CRC16 of the key's hash tag, modulo 16384), which master serves a
//! slot ([`Masters`], from `CLUSTER NODES`, `redis/cluster.rs`), and a key of a given
//! stem that lands on a given master ([`Masters::key_on`]: the append queues' canaries,
//! one per master, `redis/append/`).

/// Slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The slot of `key`: the CRC16 (XMODEM) of its hash tag (what is between its first `{`
/// and the first `}` after it, when that is not empty), else of the whole key.
pub fn slot_of(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % SLOTS
}

/// What of `key` decides its slot: its hash tag (between its first `{` and the first `}`
/// after it, when that is not empty), else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    key.iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter().position(|&b| b == b'}').filter(|&close| close > 0).map(|close| &rest[..close])
        })
        .unwrap_or(key)
}

/// Which master serves which slots: `(first, last, master address)`, in slot order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Masters(pub(crate) Vec<(u16, u16, String)>);

impl Masters {
    /// The address of the master that serves `slot` (`None`: no master does, as read).
    pub fn of(&self, slot: u16) -> Option<&str> {
        let i = self.0.partition_point(|(_, last, _)| *last < slot);
        self.0.get(i).filter(|(first, _, _)| *first <= slot).map(|(_, _, addr)| addr.as_str())
    }

    /// A key `<stem>:{<tag>}` whose slot `master` serves, with the first tag `m0`, `m1`,
    /// … that lands there, and that slot (`None` if `master` serves no slot).
    pub fn key_on(&self, stem: &str, master: &str) -> Option<(String, u16)> {
        if !self.0.iter().any(|(_, _, addr)| addr == master) {
            return None;
        }
        // Each tag lands on a master in proportion to its slots: a master with a
        // thousandth of them is found within a few thousand tries.
        (0..u32::from(SLOTS) * 8).find_map(|i| {
            let key = format!("{stem}:{{m{i}}}");
            let slot = slot_of(key.as_bytes());
            (self.of(slot) == Some(master)).then_some((key, slot))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_slot_is_redis_clusters_own() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"bar"), 5061);
        assert_eq!(slot_of(b"123456789"), 0x31c3 % SLOTS);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"roomd:{room:r_1}:lease"), slot_of(b"room:r_1"));
        assert_eq!(slot_of(b"foo{}{bar}"), slot_of(b"foo{}{bar}"), "an empty tag: the whole key");
        assert_ne!(slot_of(b"foo{}{bar}"), slot_of(b"bar"));
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"), "the tag ends at the first close");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar", "no close: the whole key");
        assert_eq!(hash_tag(b"roomd:{room:r_1}:game:g:log"), b"room:r_1");
    }

    fn three() -> Masters {
        Masters(vec![
            (0, 5460, "127.0.0.1:7001".into()),
            (5461, 10922, "127.0.0.1:7002".into()),
            (10923, 16383, "127.0.0.1:7003".into()),
        ])
    }

    #[test]
    fn a_slots_master_is_the_one_whose_range_holds_it() {
        let masters = three();
        assert_eq!(masters.of(0), Some("127.0.0.1:7001"));
        assert_eq!(masters.of(5460), Some("127.0.0.1:7001"));
        assert_eq!(masters.of(5461), Some("127.0.0.1:7002"));
        assert_eq!(masters.of(16383), Some("127.0.0.1:7003"));
        let gap = Masters(vec![(0, 10, "a".into()), (20, 30, "b".into())]);
        assert_eq!(gap.of(15), None, "a slot nobody serves");
        assert_eq!(gap.of(31), None);
        assert_eq!(Masters::default().of(3), None);
    }

    #[test]
    fn a_key_on_a_master_lands_in_one_of_its_slots() {
        let masters = three();
        for master in ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"] {
            let (key, slot) = masters.key_on("roomd:appender:q", master).expect("each master serves slots");
            assert!(key.starts_with("roomd:appender:q:{m"), "{key}");
            assert_eq!(slot_of(key.as_bytes()), slot);
            assert_eq!(masters.of(slot), Some(master));
        }
        let tiny = Masters(vec![(0, 16382, "big".into()), (16383, 16383, "one-slot".into())]);
        let (_, slot) = tiny.key_on("s", "one-slot").expect("found although it serves one slot");
        assert_eq!(slot, 16383);
        assert_eq!(masters.key_on("s", "127.0.0.1:9999"), None, "not a master");
    }
}
