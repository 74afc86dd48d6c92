//! The operators' token and audit trail: the admin API's state kept by the node (the
//! handlers are in `admin.rs`). The token is compared as a SHA-256 digest in constant
//! time; audit lines name the operator or the token's fingerprint, never the token.
//!
//! Failed attempts are limited per client address ([`FAILURE_BURST`] at once, then
//! [`FAILURES_PER_MIN`] a minute): an address over its limit is answered 429 whatever
//! token it sends, the right one included, until a failure is allowed again. A right
//! token that passed the throttle would make the throttle useless, since the answer to a
//! guess (429 or 200) would still say whether it was right. Refusals are logged as one
//! summary line per [`FAILURE_REPORT_EVERY`] (counts and the busiest addresses), not a
//! line each: 3,000 guesses used to write 3,000 warnings.

use crate::limits::AddrKey;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use prometheus::{IntCounterVec, Opts, Registry};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tracing::{info, warn};

/// Missing or wrong admin tokens one client address may send at once...
pub const FAILURE_BURST: u32 = 10;
/// ...and then per minute (one every 12 s): a 128-bit token is out of reach either way,
/// and an operator who mistyped theirs waits seconds, not minutes.
pub const FAILURES_PER_MIN: u32 = 5;
/// How often refused admin requests are summarised in the log (`server.rs` calls
/// [`Admin::report_failures`] this often).
pub const FAILURE_REPORT_EVERY: Duration = Duration::from_secs(10);
/// Addresses named in one summary line: the busiest ones; the rest are only counted.
const ADDRESSES_NAMED: usize = 10;
/// Distinct addresses one summary tallies one by one; more are counted together, so a
/// flood from many addresses cannot grow the summary without bound.
const ADDRESSES_TALLIED: usize = 1024;

/// Why an admin request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No token, or not the admin token: 401.
    Wrong,
    /// The client's address failed too often: 429, retry after this long.
    Throttled(Duration),
}

/// Failed attempts per client address, and what the next summary line reports.
struct Failures {
    /// One cell per failed attempt, keyed by client address.
    limiter: DefaultKeyedRateLimiter<AddrKey, StateInformationMiddleware>,
    /// Addresses refused until an instant, whatever they send: set when a failure used an
    /// address's last cell, so no request from it is checked against the token (and
    /// none teaches it anything) until a failure would be allowed again.
    blocked: Mutex<HashMap<AddrKey, Instant>>,
    /// How long a spent cell takes to come back.
    refill: Duration,
    summary: Mutex<Summary>,
}

/// Refusals since the last summary line.
#[derive(Default)]
struct Summary {
    /// Missing or wrong tokens answered 401.
    wrong: u64,
    /// Requests answered 429 (their token was not looked at).
    throttled: u64,
    /// Refusals by client address (at most [`ADDRESSES_TALLIED`] addresses).
    by_address: HashMap<AddrKey, u64>,
    /// Refusals from addresses beyond those, or from no known address.
    others: u64,
}

impl Failures {
    fn new() -> Failures {
        let per_min = NonZeroU32::new(FAILURES_PER_MIN).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(FAILURE_BURST).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_minute(per_min).allow_burst(burst);
        Failures {
            limiter: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            blocked: Mutex::new(HashMap::new()),
            refill: quota.replenish_interval(),
            summary: Mutex::new(Summary::default()),
        }
    }

    /// How long `client` stays refused, if it is now.
    fn blocked_for(&self, client: AddrKey, now: Instant) -> Option<Duration> {
        let mut blocked = self.blocked.lock().ok()?;
        let until = *blocked.get(&client)?;
        if until > now {
            return Some(until - now);
        }
        blocked.remove(&client);
        None
    }

    /// Spends one of `client`'s cells on a failure: `Some(wait)` when it had none left
    /// (the failure is answered 429). The failure that spends the last cell is answered
    /// 401 and blocks the address until a cell is back.
    fn spend(&self, client: AddrKey, now: Instant) -> Option<Duration> {
        let (until, wait) = match self.limiter.check_key(&client) {
            Ok(state) if state.remaining_burst_capacity() > 0 => return None,
            Ok(_) => (now + self.refill, None),
            Err(not_until) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                (now + wait, Some(wait))
            }
        };
        if let Ok(mut blocked) = self.blocked.lock() {
            blocked.insert(client, until);
        }
        wait
    }

    fn note(&self, client: Option<AddrKey>, refusal: Refusal) {
        let Ok(mut summary) = self.summary.lock() else { return };
        match refusal {
            Refusal::Wrong => summary.wrong += 1,
            Refusal::Throttled(_) => summary.throttled += 1,
        }
        match client {
            Some(ip) if summary.by_address.len() < ADDRESSES_TALLIED || summary.by_address.contains_key(&ip) => {
                *summary.by_address.entry(ip).or_insert(0) += 1;
            }
            _ => summary.others += 1,
        }
    }

    fn forget_idle(&self, now: Instant) {
        self.limiter.retain_recent();
        if let Ok(mut blocked) = self.blocked.lock() {
            blocked.retain(|_, until| *until > now);
        }
    }
}

/// `1.2.3.4 ×120, ::1 ×3`: the busiest addresses first, at most [`ADDRESSES_NAMED`].
fn busiest(by_address: HashMap<AddrKey, u64>) -> (String, usize) {
    let mut addresses: Vec<(AddrKey, u64)> = by_address.into_iter().collect();
    addresses.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let unnamed = addresses.len().saturating_sub(ADDRESSES_NAMED);
    let named: Vec<String> = addresses.iter().take(ADDRESSES_NAMED).map(|(ip, n)| format!("{ip} \u{d7}{n}")).collect();
    (named.join(", "), unnamed)
}

/// Admin state kept by the node.
pub struct Admin {
    /// SHA-256 of the configured token (compared in constant time); `None` = API off.
    token_digest: Option<[u8; 32]>,
    /// `who` in audit lines.
    pub(crate) who: String,
    pub actions: IntCounterVec,
    pub denied: prometheus::IntCounter,
    /// The address this node serves on (set once bound).
    pub addr: OnceLock<String>,
    /// Failed attempts per client address and their summary.
    failures: Failures,
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A short, non-reversible name for a token in logs: 12 hex digits of its SHA-256.
pub fn fingerprint(token: &str) -> String {
    digest(token.as_bytes()).iter().take(6).map(|b| format!("{b:02x}")).collect()
}

impl Admin {
    pub fn new(settings: &crate::config::Admin, registry: &Registry) -> Result<Admin, prometheus::Error> {
        let token = settings.token.as_deref().filter(|t| !t.is_empty());
        let who = match (&settings.operator, token) {
            (Some(name), _) if !name.trim().is_empty() => name.trim().to_owned(),
            (_, Some(t)) => format!("token:{}", fingerprint(t)),
            _ => "nobody".to_owned(),
        };
        let actions = IntCounterVec::new(
            Opts::new("roomd_admin_actions_total", "operator actions through the admin API, by action and outcome"),
            &["action", "outcome"],
        )?;
        let denied = prometheus::IntCounter::new(
            "roomd_admin_auth_failures_total",
            "admin API requests refused: a missing or wrong token (401), or an address over its failure limit (429)",
        )?;
        registry.register(Box::new(actions.clone()))?;
        registry.register(Box::new(denied.clone()))?;
        Ok(Admin {
            token_digest: token.map(|t| digest(t.as_bytes())),
            who,
            actions,
            denied,
            addr: OnceLock::new(),
            failures: Failures::new(),
        })
    }

    pub fn enabled(&self) -> bool {
        self.token_digest.is_some()
    }

    /// Whether `presented` is the admin token. Both sides are hashed first, so the
    /// comparison takes the same time whatever the presented token's length or content.
    pub(crate) fn accepts(&self, presented: &str) -> bool {
        let Some(expected) = &self.token_digest else { return false };
        bool::from(digest(presented.as_bytes()).ct_eq(expected))
    }

    /// Whether a request from `client` presenting `presented` is an operator's. A request
    /// with no token is a plain 401: it guesses nothing, so it spends nothing (it is still
    /// summarised). An address over its limit is refused before its token is looked at; a
    /// wrong token counts against its address and goes into the next summary line.
    /// Addresses count as every per-address limit counts them ([`AddrKey`]: an IPv6 /64 is
    /// one address).
    pub(crate) fn authorize(&self, client: Option<IpAddr>, presented: Option<&str>) -> Result<(), Refusal> {
        let client = client.map(AddrKey::from);
        if presented.is_none() {
            return Err(self.refuse(client, Refusal::Wrong));
        }
        let now = Instant::now();
        if let Some(wait) = client.and_then(|ip| self.failures.blocked_for(ip, now)) {
            return Err(self.refuse(client, Refusal::Throttled(wait)));
        }
        if presented.is_some_and(|token| self.accepts(token)) {
            return Ok(());
        }
        let refusal = match client.and_then(|ip| self.failures.spend(ip, now)) {
            Some(wait) => Refusal::Throttled(wait),
            None => Refusal::Wrong,
        };
        Err(self.refuse(client, refusal))
    }

    fn refuse(&self, client: Option<AddrKey>, refusal: Refusal) -> Refusal {
        self.denied.inc();
        self.failures.note(client, refusal);
        refusal
    }

    /// Writes one warning with the refusals since the last call, if there were any (called
    /// every [`FAILURE_REPORT_EVERY`]).
    pub fn report_failures(&self) {
        let summary = match self.failures.summary.lock() {
            Ok(mut summary) => std::mem::take(&mut *summary),
            Err(_) => return,
        };
        if summary.wrong + summary.throttled == 0 {
            return;
        }
        let (addresses, unnamed) = busiest(summary.by_address);
        warn!(
            target: "audit",
            refused = summary.wrong,
            throttled = summary.throttled,
            addresses = %addresses,
            more_addresses = unnamed,
            unknown_or_untallied = summary.others,
            every_s = FAILURE_REPORT_EVERY.as_secs(),
            "admin API requests refused: missing or wrong token (refused), or too many failures from one address (throttled)"
        );
    }

    /// Forgets addresses whose failures are behind them (called periodically, like the
    /// other per-address limits).
    pub fn forget_idle(&self) {
        self.failures.forget_idle(Instant::now());
    }

    /// One audit line and one count per operator action.
    pub(crate) fn audit(&self, action: &'static str, target: &str, outcome: &str, detail: &str) {
        self.actions.with_label_values(&[action, outcome]).inc();
        // `subject`, not `target`: JSON logs already use `target` for the log target (`audit`).
        info!(target: "audit", audit = true, who = %self.who, action, subject = %target, outcome, detail, "admin action");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin(token: Option<&str>, operator: Option<&str>) -> Admin {
        let settings = crate::config::Admin { token: token.map(str::to_owned), operator: operator.map(str::to_owned) };
        Admin::new(&settings, &Registry::new()).unwrap()
    }

    #[test]
    fn only_the_exact_token_is_accepted() {
        let a = admin(Some("s3cret-admin"), None);
        assert!(a.enabled());
        assert!(a.accepts("s3cret-admin"));
        for wrong in ["", "s3cret-admi", "s3cret-admin ", "S3CRET-ADMIN", "s3cret-adminx"] {
            assert!(!a.accepts(wrong), "{wrong:?}");
        }
        let off = admin(None, None);
        assert!(!off.enabled());
        assert!(!off.accepts(""));
        // An empty configured token is the same as none: never "accept the empty string".
        assert!(!admin(Some(""), None).enabled());
    }

    #[test]
    fn audit_lines_name_the_operator_or_a_fingerprint_never_the_token() {
        let a = admin(Some("s3cret-admin"), None);
        assert!(a.who.starts_with("token:"), "{}", a.who);
        assert_eq!(a.who.len(), "token:".len() + 12);
        assert!(!a.who.contains("s3cret"));
        assert_eq!(a.who, format!("token:{}", fingerprint("s3cret-admin")));
        assert_eq!(admin(Some("t"), Some("민지")).who, "민지");
        a.audit("kick", "r_1", "ok", "");
        assert_eq!(a.actions.with_label_values(&["kick", "ok"]).get(), 1);
    }

    #[test]
    fn failures_are_throttled_per_address_and_summarised() {
        let a = admin(Some("s3cret-admin"), None);
        let (guesser, other): (IpAddr, IpAddr) = ("203.0.113.7".parse().unwrap(), "2001:db8::1".parse().unwrap());
        for i in 0..FAILURE_BURST {
            assert_eq!(a.authorize(Some(guesser), Some(&format!("guess-{i}"))), Err(Refusal::Wrong), "{i}");
        }
        let Err(Refusal::Throttled(wait)) = a.authorize(Some(guesser), Some("s3cret-admin")) else {
            panic!("the right token passed a throttled address")
        };
        assert!(wait <= Duration::from_secs(12), "{wait:?}");
        // No token at all guesses nothing: a plain 401 even from a throttled address.
        assert_eq!(a.authorize(Some(guesser), None), Err(Refusal::Wrong));
        assert_eq!(a.authorize(Some(other), Some("s3cret-admin")), Ok(()));
        assert_eq!(a.authorize(None, Some("s3cret-admin")), Ok(()));
        assert_eq!(a.authorize(Some(other), Some("nope")), Err(Refusal::Wrong));
        assert_eq!(a.denied.get(), 13);
        {
            let summary = a.failures.summary.lock().unwrap();
            assert_eq!((summary.wrong, summary.throttled, summary.others), (12, 1, 0));
            assert_eq!(summary.by_address[&AddrKey::from(guesser)], 12);
        }
        a.report_failures();
        let summary = a.failures.summary.lock().unwrap();
        assert_eq!(summary.wrong + summary.throttled, 0, "a report starts the next summary afresh");
    }

    #[test]
    fn a_summary_names_the_busiest_addresses_and_counts_the_rest() {
        let by_address: HashMap<AddrKey, u64> =
            (0..15u8).map(|i| (AddrKey::from(IpAddr::from([10, 0, 0, i])), u64::from(i) + 1)).collect();
        let (named, unnamed) = busiest(by_address);
        assert!(named.starts_with("10.0.0.14 \u{d7}15, 10.0.0.13 \u{d7}14"), "{named}");
        assert_eq!(named.split(", ").count(), ADDRESSES_NAMED);
        assert_eq!(unnamed, 5);
    }
}
