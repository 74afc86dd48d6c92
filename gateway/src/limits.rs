//! Limits per client address: guest sessions, room creations and WebSocket upgrades are
//! each rate-limited per address (governor, keyed by [`AddrKey`]) so minting guests cannot
//! get around the per-user limits, and the WebSockets an address holds open at once are
//! capped (`http.addr_max_sockets`), so one address cannot take every socket of a node.
//! The client address is the TCP peer, or, when the peer is one of
//! `http.trusted_proxies`, the right-most `X-Forwarded-For` entry that is not itself a
//! trusted proxy.

use crate::error::ApiError;
use actix_web::http::StatusCode;
use actix_web::HttpRequest;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a per-address limit counts by: an IPv4 address, or an IPv6 address's /64.
///
/// One IPv6 host is usually given a whole /64 (SLAAC, privacy addresses), so keying the
/// full /128 would give one client 2^64 budgets. An IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`, what a dual-stack listener sees) is the IPv4 address it maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrKey {
    V4(Ipv4Addr),
    /// The first 64 bits of the address.
    V6Net(u64),
}

impl From<IpAddr> for AddrKey {
    fn from(ip: IpAddr) -> AddrKey {
        match ip {
            IpAddr::V4(v4) => AddrKey::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => AddrKey::V4(v4),
                None => AddrKey::V6Net((v6.to_bits() >> 64) as u64),
            },
        }
    }
}

impl std::fmt::Display for AddrKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AddrKey::V4(v4) => write!(f, "{v4}"),
            AddrKey::V6Net(net) => {
                write!(f, "{}/64", std::net::Ipv6Addr::from_bits(u128::from(*net) << 64))
            }
        }
    }
}

/// What a client address is limited on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Session,
    Room,
    Socket,
}

/// One keyed limiter per kind, all with the same quota, and the open sockets per address.
pub struct AddrLimits {
    sessions: DefaultKeyedRateLimiter<AddrKey>,
    rooms: DefaultKeyedRateLimiter<AddrKey>,
    sockets: DefaultKeyedRateLimiter<AddrKey>,
    open: Arc<OpenSockets>,
    trusted: Vec<IpNet>,
}

/// The WebSockets each address holds open on this node. A std `Mutex`: it is held for a
/// map lookup, once when a socket opens and once when it closes, never across an await.
struct OpenSockets {
    max: u32,
    by_addr: Mutex<HashMap<AddrKey, u32>>,
}

/// One open WebSocket's place in its address's count, given back when dropped (with the
/// session that holds it, however the session ends).
#[derive(Debug)]
pub struct SocketSlot {
    addr: AddrKey,
    open: Arc<OpenSockets>,
}

impl std::fmt::Debug for OpenSockets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenSockets").field("max", &self.max).finish_non_exhaustive()
    }
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        let Ok(mut by_addr) = self.open.by_addr.lock() else { return };
        if let Some(open) = by_addr.get_mut(&self.addr) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                by_addr.remove(&self.addr);
            }
        }
    }
}

/// The seconds to put in `Retry-After` for a wait of `wait`: rounded up, so a client that
/// waits that long passes (a 1.5 s wait said as `1` would be refused again), and at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

impl AddrLimits {
    pub fn new(rate_per_min: u32, burst: u32, max_sockets: u32, trusted: Vec<IpNet>) -> AddrLimits {
        let rate = NonZeroU32::new(rate_per_min).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_minute(rate).allow_burst(burst);
        AddrLimits {
            sessions: RateLimiter::keyed(quota),
            rooms: RateLimiter::keyed(quota),
            sockets: RateLimiter::keyed(quota),
            open: Arc::new(OpenSockets { max: max_sockets, by_addr: Mutex::new(HashMap::new()) }),
            trusted,
        }
    }

    /// A place for one more open WebSocket from the request's client, held until the
    /// returned slot is dropped; a 429 `too_many_sockets` when its address already holds
    /// `http.addr_max_sockets` of this node's sockets.
    pub fn open_socket(&self, req: &HttpRequest) -> Result<Option<SocketSlot>, ApiError> {
        let Some(ip) = self.client_ip(req) else { return Ok(None) };
        self.open_socket_for(ip).map(Some)
    }

    fn open_socket_for(&self, ip: IpAddr) -> Result<SocketSlot, ApiError> {
        let addr = AddrKey::from(ip);
        let refused = || {
            tracing::info!(client = %addr, max = self.open.max, "WebSocket refused: address at http.addr_max_sockets");
            let mut err = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_sockets",
                "이 주소에서 연 연결이 너무 많아요. 쓰지 않는 창을 닫고 다시 시도해 주세요",
            );
            err.retry_after_s = Some(5);
            err
        };
        let Ok(mut by_addr) = self.open.by_addr.lock() else { return Err(refused()) };
        let open = by_addr.entry(addr).or_insert(0);
        if *open >= self.open.max {
            return Err(refused());
        }
        *open += 1;
        Ok(SocketSlot { addr, open: self.open.clone() })
    }

    /// The client's address as far as we can believe it.
    pub fn client_ip(&self, req: &HttpRequest) -> Option<IpAddr> {
        let peer = req.peer_addr()?.ip();
        Some(self.client_ip_of(peer, req.headers().get_all("x-forwarded-for").filter_map(|v| v.to_str().ok())))
    }

    /// `peer`, or when `peer` is a trusted proxy, the right-most forwarded address that
    /// is not (addresses further left were written by the client and prove nothing).
    pub fn client_ip_of<'a>(&self, peer: IpAddr, forwarded: impl Iterator<Item = &'a str>) -> IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        let hops: Vec<&str> = forwarded.flat_map(|h| h.split(',')).map(str::trim).collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            let Ok(ip) = hop.parse::<IpAddr>() else { break };
            client = ip;
            if !self.is_trusted(ip) {
                break;
            }
        }
        client
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// Takes one `kind` for the request's client; a 429 with `Retry-After` when its
    /// address is over the limit.
    pub fn check(&self, kind: Kind, req: &HttpRequest) -> Result<(), ApiError> {
        let Some(ip) = self.client_ip(req) else { return Ok(()) };
        let addr = AddrKey::from(ip);
        let limiter = match kind {
            Kind::Session => &self.sessions,
            Kind::Room => &self.rooms,
            Kind::Socket => &self.sockets,
        };
        limiter.check_key(&addr).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            tracing::info!(client = %addr, ?kind, "per-address limit reached");
            let mut err = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "요청이 너무 많아요. 잠시 후 다시 시도해 주세요",
            );
            err.retry_after_s = Some(retry_after_secs(wait));
            err
        })
    }

    /// Forgets addresses that are back to a full burst (called periodically so the
    /// tables do not grow with every address ever seen).
    pub fn forget_idle(&self) {
        self.sessions.retain_recent();
        self.rooms.retain_recent();
        self.sockets.retain_recent();
    }
}

/// `http.trusted_proxies`: a comma-separated string (environment) or a list (file).
pub fn cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(String),
        Many(Vec<String>),
    }
    let items = match Raw::deserialize(d)? {
        Raw::One(s) => s.split(',').map(str::to_owned).collect(),
        Raw::Many(v) => v,
    };
    items
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| serde::de::Error::custom(format!("http.trusted_proxies: `{s}` is not a CIDR or address")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(trusted: &[&str]) -> AddrLimits {
        AddrLimits::new(60, 5, 2, trusted.iter().map(|s| s.parse().unwrap()).collect())
    }

    fn key(s: &str) -> AddrKey {
        AddrKey::from(s.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_mapped_ipv4_as_the_ipv4_address() {
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff:ffff:ffff:ffff"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:203.0.113.7"), key("203.0.113.7"));
        assert_ne!(key("203.0.113.7"), key("203.0.113.8"));
        assert_eq!(key("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
        assert_eq!(key("::ffff:203.0.113.7").to_string(), "203.0.113.7");
    }

    #[test]
    fn an_address_holds_at_most_its_sockets_and_gets_one_back_when_a_slot_is_dropped() {
        let limits = limits(&[]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let first = limits.open_socket_for(ip("2001:db8::1")).unwrap();
        let _second = limits.open_socket_for(ip("2001:db8::2")).unwrap();
        // A third from the same /64 is refused, whatever its last 64 bits.
        let refused = limits.open_socket_for(ip("2001:db8::ffff")).unwrap_err();
        assert_eq!((refused.code.as_str(), refused.status.as_u16()), ("too_many_sockets", 429));
        // Another address is not affected, and a dropped slot frees a place.
        assert!(limits.open_socket_for(ip("2001:db8:0:1::1")).is_ok());
        drop(first);
        assert!(limits.open_socket_for(ip("2001:db8::3")).is_ok());
        assert!(limits.open.by_addr.lock().unwrap().len() <= 2);
    }

    #[test]
    fn retry_after_rounds_the_wait_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1999)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let none = limits(&[]);
        assert_eq!(none.client_ip_of(ip("10.0.0.1"), ["1.2.3.4"].into_iter()), ip("10.0.0.1"));
        let lb = limits(&["10.0.0.0/8"]);
        assert_eq!(lb.client_ip_of(ip("10.0.0.1"), ["1.2.3.4"].into_iter()), ip("1.2.3.4"));
        // A client-written left part is ignored: the right-most untrusted hop counts.
        assert_eq!(lb.client_ip_of(ip("10.0.0.1"), ["6.6.6.6, 1.2.3.4, 10.0.0.7"].into_iter()), ip("1.2.3.4"));
        // From an untrusted peer, the header is ignored.
        assert_eq!(lb.client_ip_of(ip("5.5.5.5"), ["1.2.3.4"].into_iter()), ip("5.5.5.5"));
        // Garbage in the header: the last good address.
        assert_eq!(lb.client_ip_of(ip("10.0.0.1"), ["nonsense"].into_iter()), ip("10.0.0.1"));
        assert_eq!(lb.client_ip_of(ip("::ffff:10.0.0.1"), ["1.2.3.4"].into_iter()), ip("1.2.3.4"));
    }

    #[test]
    fn trusted_proxies_parse_from_a_string_or_a_list() {
        let v: Vec<IpNet> = cidrs(serde_json::json!("10.0.0.0/8, 127.0.0.1")).unwrap();
        assert_eq!(v.len(), 2);
        assert!(v[1].contains(&"127.0.0.1".parse::<IpAddr>().unwrap()));
        assert_eq!(cidrs(serde_json::json!(["::1/128"])).unwrap().len(), 1);
        assert!(cidrs(serde_json::json!("")).unwrap().is_empty());
        assert!(cidrs(serde_json::json!("not-a-net")).is_err());
    }
}
