//! Limits per client address: guest sessions, room creations and WebSocket upgrades are
//! each rate-limited per IP (governor, keyed by address) so minting guests cannot get
//! around the per-user limits. The client address is the TCP peer, or, when the peer is
//! one of `http.trusted_proxies`, the right-most `X-Forwarded-For` entry that is not
//! itself a trusted proxy.

use crate::error::ApiError;
use actix_web::http::StatusCode;
use actix_web::HttpRequest;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use std::net::IpAddr;
use std::num::NonZeroU32;

/// What a client address is limited on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Session,
    Room,
    Socket,
}

/// One keyed limiter per kind, all with the same quota.
pub struct AddrLimits {
    sessions: DefaultKeyedRateLimiter<IpAddr>,
    rooms: DefaultKeyedRateLimiter<IpAddr>,
    sockets: DefaultKeyedRateLimiter<IpAddr>,
    trusted: Vec<IpNet>,
}

impl AddrLimits {
    pub fn new(rate_per_min: u32, burst: u32, trusted: Vec<IpNet>) -> AddrLimits {
        let rate = NonZeroU32::new(rate_per_min).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_minute(rate).allow_burst(burst);
        AddrLimits {
            sessions: RateLimiter::keyed(quota),
            rooms: RateLimiter::keyed(quota),
            sockets: RateLimiter::keyed(quota),
            trusted,
        }
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
        let limiter = match kind {
            Kind::Session => &self.sessions,
            Kind::Room => &self.rooms,
            Kind::Socket => &self.sockets,
        };
        limiter.check_key(&ip).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            tracing::info!(client = %ip, ?kind, "per-address limit reached");
            let mut err = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "요청이 너무 많아요. 잠시 후 다시 시도해 주세요",
            );
            err.retry_after_s = Some(wait.as_secs().max(1));
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
        AddrLimits::new(60, 5, trusted.iter().map(|s| s.parse().unwrap()).collect())
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
