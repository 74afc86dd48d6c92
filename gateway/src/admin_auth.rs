//! The operators' token and audit trail: the admin API's state kept by the node (the
//! handlers are in `admin.rs`). The token is compared as a SHA-256 digest in constant
//! time; audit lines name the operator or the token's fingerprint, never the token.

use prometheus::{IntCounterVec, Opts, Registry};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;
use subtle::ConstantTimeEq;
use tracing::info;

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
            "admin API requests refused for a missing or wrong token",
        )?;
        registry.register(Box::new(actions.clone()))?;
        registry.register(Box::new(denied.clone()))?;
        Ok(Admin { token_digest: token.map(|t| digest(t.as_bytes())), who, actions, denied, addr: OnceLock::new() })
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
}
