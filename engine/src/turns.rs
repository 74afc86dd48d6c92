//! Seat order helpers: clockwise is increasing seat index, wrapping around.

use crate::game::PlayerId;

/// The next seat clockwise after `from` whose player satisfies `is_in`, or `None` when
/// nobody (other than possibly `from`) does. `from` itself is returned only if it is the
/// only such player.
pub fn next_clockwise<F>(order: &[PlayerId], from: &PlayerId, is_in: F) -> Option<PlayerId>
where
    F: Fn(&PlayerId) -> bool,
{
    let start = order.iter().position(|p| p == from)?;
    (1..=order.len()).map(|k| &order[(start + k) % order.len()]).find(|p| is_in(p)).cloned()
}

/// The seats after `from` clockwise (excluding `from`) that satisfy `is_in`, in order.
pub fn others_clockwise<F>(order: &[PlayerId], from: &PlayerId, is_in: F) -> Vec<PlayerId>
where
    F: Fn(&PlayerId) -> bool,
{
    let Some(start) = order.iter().position(|p| p == from) else {
        return Vec::new();
    };
    (1..order.len()).map(|k| &order[(start + k) % order.len()]).filter(|p| is_in(p)).cloned().collect()
}

/// The seats rotated so that `first` sits first (seat order otherwise kept).
pub fn rotate_to(order: &[PlayerId], first: &PlayerId) -> Vec<PlayerId> {
    match order.iter().position(|p| p == first) {
        Some(i) => order[i..].iter().chain(order[..i].iter()).cloned().collect(),
        None => order.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seats(names: &[&str]) -> Vec<PlayerId> {
        names.iter().map(|n| PlayerId::from(*n)).collect()
    }

    #[test]
    fn next_wraps_and_skips_inactive() {
        let order = seats(&["a", "b", "c", "d"]);
        let active = |p: &PlayerId| p.as_str() != "b";
        assert_eq!(next_clockwise(&order, &"a".into(), active), Some("c".into()));
        assert_eq!(next_clockwise(&order, &"d".into(), active), Some("a".into()));
        assert_eq!(next_clockwise(&order, &"b".into(), active), Some("c".into()));
    }

    #[test]
    fn next_returns_self_only_when_alone() {
        let order = seats(&["a", "b"]);
        assert_eq!(next_clockwise(&order, &"a".into(), |p| p.as_str() == "a"), Some("a".into()));
        assert_eq!(next_clockwise(&order, &"a".into(), |_| false), None);
        assert_eq!(next_clockwise(&order, &"zz".into(), |_| true), None);
    }

    #[test]
    fn others_in_clockwise_order() {
        let order = seats(&["a", "b", "c", "d"]);
        assert_eq!(others_clockwise(&order, &"c".into(), |_| true), seats(&["d", "a", "b"]));
        assert_eq!(others_clockwise(&order, &"c".into(), |p| p.as_str() != "a"), seats(&["d", "b"]));
    }

    #[test]
    fn rotation_starts_with_first() {
        let order = seats(&["a", "b", "c", "d"]);
        assert_eq!(rotate_to(&order, &"c".into()), seats(&["c", "d", "a", "b"]));
        assert_eq!(rotate_to(&order, &"x".into()), order);
    }
}
