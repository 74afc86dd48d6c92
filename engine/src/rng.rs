//! Deterministic randomness: sfc32 (Chris Doty-Humphrey's Small Fast Counting generator,
//! 32-bit variant) with 128-bit seeds.
//!
//! The runner owns the generator. It builds an [`Rng`] from the stored [`RngState`], lends
//! it to `setup`/`apply`, and stores the new state afterwards; games never hold RNG state,
//! which is why a seed plus the input log reproduces a game exactly.
//!
//! Seeding: the four 32-bit words of the seed (big-endian) become `a, b, c, d` and the
//! first [`WARM_UP`] outputs are discarded, as the reference implementation recommends
//! so that similar seeds diverge.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Outputs discarded right after seeding.
pub const WARM_UP: usize = 15;

/// A 128-bit seed, written as 32 lowercase hex characters on the wire and in logs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seed(pub u128);

impl Seed {
    /// A fresh seed from the operating system's random source.
    pub fn from_os() -> Result<Seed, getrandom::Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        Ok(Seed(u128::from_be_bytes(bytes)))
    }

    /// Parses exactly 32 hex characters.
    pub fn from_hex(text: &str) -> Option<Seed> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(text, 16).ok().map(Seed)
    }

    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seed({})", self.to_hex())
    }
}

impl Serialize for Seed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seed, D::Error> {
        let text = String::deserialize(d)?;
        Seed::from_hex(&text).ok_or_else(|| serde::de::Error::custom("seed must be 32 hex characters"))
    }
}

/// The generator's whole state: four 32-bit words. Serializable so a room can be stored
/// and restored mid-stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RngState {
    pub a: u32,
    pub b: u32,
    pub c: u32,
    pub d: u32,
}

/// sfc32 with the helpers games need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: RngState,
}

impl Rng {
    /// A generator seeded with `seed` and warmed up.
    pub fn from_seed(seed: Seed) -> Rng {
        let v = seed.0;
        let mut rng =
            Rng { state: RngState { a: (v >> 96) as u32, b: (v >> 64) as u32, c: (v >> 32) as u32, d: v as u32 } };
        for _ in 0..WARM_UP {
            rng.next_u32();
        }
        rng
    }

    /// Resumes a generator exactly where `state` left it.
    pub fn from_state(state: RngState) -> Rng {
        Rng { state }
    }

    pub fn state(&self) -> RngState {
        self.state
    }

    /// One step of sfc32: the raw 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        let RngState { a, b, c, d } = self.state;
        let t = a.wrapping_add(b).wrapping_add(d);
        self.state = RngState {
            a: b ^ (b >> 9),
            b: c.wrapping_add(c << 3),
            c: c.rotate_left(21).wrapping_add(t),
            d: d.wrapping_add(1),
        };
        t
    }

    /// A float in `[0, 1)` with 32 bits of randomness (`t / 2^32`, as the reference does).
    /// Named as in the spec's `Rng` interface; it is not an `Iterator`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> f64 {
        f64::from(self.next_u32()) / 4_294_967_296.0
    }

    /// A uniform integer in `0..n`, without modulo bias (rejection sampling). `int(0)`
    /// returns 0 and consumes nothing; callers that can have an empty range use [`Rng::pick`].
    pub fn int(&mut self, n: u32) -> u32 {
        if n <= 1 {
            return 0;
        }
        // Largest multiple of n that fits in 2^32: values at or above it are rejected.
        let zone = (1u64 << 32) - ((1u64 << 32) % u64::from(n));
        loop {
            let x = u64::from(self.next_u32());
            if x < zone {
                return (x % u64::from(n)) as u32;
            }
        }
    }

    /// A uniform index in `0..len` for slices (`len` saturates at `u32::MAX`).
    pub fn index(&mut self, len: usize) -> usize {
        self.int(u32::try_from(len).unwrap_or(u32::MAX)) as usize
    }

    /// A uniformly chosen element, or `None` for an empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        let i = self.index(items.len());
        items.get(i)
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.next() < p
    }

    /// Fisher–Yates shuffle in place (from the last element down, as Knuth's algorithm P).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.index(i + 1);
            items.swap(i, j);
        }
    }

    /// A shuffled copy, as the spec's `shuffle(arr)` returns.
    pub fn shuffled<T: Clone>(&mut self, items: &[T]) -> Vec<T> {
        let mut v = items.to_vec();
        self.shuffle(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference sfc32, written once more from the published definition
    /// (PractRand `sfc32`, as in bryc's JavaScript port) on `Wrapping`-free u64 arithmetic,
    /// so the known answers below do not come from the code under test.
    fn reference(mut a: u64, mut b: u64, mut c: u64, mut d: u64, n: usize) -> Vec<u32> {
        const M: u64 = 0xffff_ffff;
        let mut out = Vec::new();
        for _ in 0..n {
            let t = (((a + b) & M) + d) & M;
            d = (d + 1) & M;
            a = b ^ (b >> 9);
            b = (c + ((c << 3) & M)) & M;
            c = (((c << 21) & M) | (c >> 11)) & M;
            c = (c + t) & M;
            out.push(t as u32);
        }
        out
    }

    #[test]
    fn raw_outputs_match_reference_definition() {
        for words in [[0u32, 0, 0, 0], [1, 2, 3, 4], [0xdead_beef, 0x0123_4567, 0x89ab_cdef, 0xffff_ffff]] {
            let expected = reference(words[0].into(), words[1].into(), words[2].into(), words[3].into(), 64);
            let mut rng = Rng::from_state(RngState { a: words[0], b: words[1], c: words[2], d: words[3] });
            let got: Vec<u32> = (0..64).map(|_| rng.next_u32()).collect();
            assert_eq!(got, expected, "words {words:x?}");
        }
    }

    #[test]
    fn known_answer_vector_for_zero_state() {
        // Worked by hand from the definition: t = a + b + d, with d counting up from 0;
        // the fourth output is b (= 9) + d (= 3), the fifth 9 + 18874386 + 4.
        let mut rng = Rng::from_state(RngState { a: 0, b: 0, c: 0, d: 0 });
        let got: Vec<u32> = (0..5).map(|_| rng.next_u32()).collect();
        assert_eq!(got, [0, 1, 2, 12, 18_874_399]);
        assert_eq!(reference(0, 0, 0, 0, 5), got);
    }

    #[test]
    fn seeding_splits_words_big_endian_and_warms_up() {
        let seed = Seed(0x0000_0001_0000_0002_0000_0003_0000_0004);
        let expected = reference(1, 2, 3, 4, WARM_UP + 5);
        let mut rng = Rng::from_seed(seed);
        let got: Vec<u32> = (0..5).map(|_| rng.next_u32()).collect();
        assert_eq!(got, expected[WARM_UP..]);
    }

    #[test]
    fn next_is_in_unit_interval_and_matches_t_over_2_32() {
        let mut a = Rng::from_seed(Seed(42));
        let mut b = a.clone();
        for _ in 0..10_000 {
            let x = a.next();
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x, f64::from(b.next_u32()) / 4_294_967_296.0);
        }
    }

    #[test]
    fn int_is_uniform_chi_square() {
        // 6 buckets, 60,000 draws; chi-square with 5 degrees of freedom has a 0.1% critical
        // value of 20.52. A fixed seed keeps the test deterministic.
        let mut rng = Rng::from_seed(Seed(0x5eed));
        let n = 6u32;
        let draws = 60_000;
        let mut buckets = vec![0u32; n as usize];
        for _ in 0..draws {
            let x = rng.int(n);
            assert!(x < n);
            buckets[x as usize] += 1;
        }
        let expected = f64::from(draws) / f64::from(n);
        let chi: f64 = buckets.iter().map(|&o| (f64::from(o) - expected).powi(2) / expected).sum();
        assert!(chi < 20.52, "chi-square {chi} for {buckets:?}");
    }

    #[test]
    fn int_rejects_biased_zone() {
        // n = 3 * 2^30: 2^32 % n = 2^30, so raw values >= 3 * 2^30 must be rejected rather
        // than folded onto the low end (which a modulo would do).
        let n = 3u32 << 30;
        let mut rng = Rng::from_seed(Seed(7));
        let mut raw = rng.clone();
        for _ in 0..1000 {
            let got = rng.int(n);
            let expected = loop {
                let x = raw.next_u32();
                if x < n {
                    break x;
                }
            };
            assert_eq!(got, expected);
        }
    }

    #[test]
    fn shuffle_is_a_permutation_and_deterministic() {
        let items: Vec<u32> = (0..56).collect();
        let a = Rng::from_seed(Seed(99)).shuffled(&items);
        let b = Rng::from_seed(Seed(99)).shuffled(&items);
        assert_eq!(a, b);
        assert_ne!(a, items);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, items);
    }

    #[test]
    fn shuffle_positions_are_uniform() {
        // Where element 0 of a 4-element list lands, over 40,000 shuffles.
        let mut rng = Rng::from_seed(Seed(1234));
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            let v = rng.shuffled(&[0, 1, 2, 3]);
            let pos = v.iter().position(|&x| x == 0).unwrap();
            counts[pos] += 1;
        }
        let chi: f64 = counts.iter().map(|&o| (f64::from(o) - 10_000.0).powi(2) / 10_000.0).sum();
        assert!(chi < 16.27, "chi-square {chi} for {counts:?}"); // 3 dof, p = 0.001
    }

    #[test]
    fn restore_mid_stream_continues_identically() {
        let mut rng = Rng::from_seed(Seed(0xabcdef));
        for _ in 0..37 {
            rng.next_u32();
        }
        let saved = serde_json::to_string(&rng.state()).unwrap();
        let expected: Vec<u32> = (0..100).map(|_| rng.next_u32()).collect();
        let state: RngState = serde_json::from_str(&saved).unwrap();
        let mut restored = Rng::from_state(state);
        let got: Vec<u32> = (0..100).map(|_| restored.next_u32()).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn seed_hex_round_trip_and_rejects_bad_text() {
        let seed = Seed(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(seed.to_hex(), "0123456789abcdef0011223344556677");
        assert_eq!(Seed::from_hex(&seed.to_hex()), Some(seed));
        assert_eq!(Seed::from_hex("123"), None);
        assert_eq!(Seed::from_hex("zz23456789abcdef0011223344556677"), None);
        assert_eq!(Seed::from_hex("+123456789abcdef0011223344556677"), None);
        let json = serde_json::to_string(&seed).unwrap();
        assert_eq!(json, "\"0123456789abcdef0011223344556677\"");
    }

    #[test]
    fn os_seeds_differ() {
        let a = Seed::from_os();
        let b = Seed::from_os();
        assert!(matches!((a, b), (Ok(a), Ok(b)) if a != b));
    }
}
