//! Where the node's Redis is ([`RedisTarget`]: one Redis or a Redis Cluster, from the
//! operator's settings) and how every connection to it is made: the timeouts, the TCP
//! settings and the cluster client builder that the single connection (`redis/conn.rs`),
//! the cluster connection (`redis/cluster.rs`) and the bus (`cluster/bus.rs`) share.

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::RedisResult;
use std::time::Duration;

/// How long connecting to a Redis, and waiting for one answer, may take.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// How long what a node sent to Redis may go unacknowledged by Redis's host before the
/// kernel drops the connection (`TCP_USER_TIMEOUT`, Linux). A response timeout alone
/// never drops a connection (the client keeps it, and every later command times out on
/// it too), so a connection that died without closing (Redis's pod gone behind a stable
/// Service address, a partition, a NAT that forgot it) would hold a node off Redis until
/// TCP gave up, about 15 minutes later. A Redis that is only slow or paused still
/// acknowledges at the TCP level, so this fires for a dead path only.
pub const USER_TIMEOUT: Duration = Duration::from_secs(5);

/// The TCP settings of every connection to Redis: `TCP_NODELAY` (a small command is
/// sent at once, never held back behind an unanswered one), keepalive (an idle
/// connection whose peer is gone is found within about 5 + 3 × 2 s) and
/// [`USER_TIMEOUT`].
pub fn tcp_settings() -> redis::io::tcp::TcpSettings {
    let keepalive = redis::io::tcp::socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(5))
        .with_interval(Duration::from_secs(2))
        .with_retries(3);
    let settings = redis::io::tcp::TcpSettings::default().set_nodelay(true).set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(USER_TIMEOUT);
    settings
}

/// Where the node's Redis is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis (`redis://` or `rediss://`).
    Single(String),
    /// Seed URLs of a Redis Cluster (any of its nodes; the rest are discovered).
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// The target the operator settings name: `url` (`ROOMD__REDIS__URL`) or
    /// `cluster_urls` (`ROOMD__REDIS__CLUSTER_URLS`, comma-separated), neither (the
    /// embedded node), never both.
    pub fn from_settings(url: Option<&str>, cluster_urls: Option<&str>) -> Result<Option<RedisTarget>, String> {
        let url = url.map(str::trim).filter(|u| !u.is_empty());
        let seeds: Vec<String> = cluster_urls
            .map(|list| list.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        match (url, seeds.is_empty()) {
            (Some(_), false) => Err("ROOMD__REDIS__URL and ROOMD__REDIS__CLUSTER_URLS are both set: set \
                                     ROOMD__REDIS__URL for one Redis or ROOMD__REDIS__CLUSTER_URLS for a Redis \
                                     Cluster, not both"
                .to_owned()),
            (Some(url), true) => Ok(Some(RedisTarget::Single(url.to_owned()))),
            (None, false) => {
                if let Some(bad) = seeds.iter().find(|s| !(s.starts_with("redis://") || s.starts_with("rediss://"))) {
                    return Err(format!(
                        "ROOMD__REDIS__CLUSTER_URLS: {bad:?} is not a redis:// or rediss:// URL (expected a \
                         comma-separated list such as redis://10.0.0.1:6379,redis://10.0.0.2:6379)"
                    ));
                }
                Ok(Some(RedisTarget::Cluster(seeds)))
            }
            (None, true) => {
                if cluster_urls.is_some_and(|c| !c.trim().is_empty()) {
                    return Err("ROOMD__REDIS__CLUSTER_URLS names no URL".to_owned());
                }
                Ok(None)
            }
        }
    }

    /// Whether any of its URLs is `rediss://`.
    pub fn uses_tls(&self) -> bool {
        match self {
            RedisTarget::Single(url) => url.starts_with("rediss://"),
            RedisTarget::Cluster(seeds) => seeds.iter().any(|s| s.starts_with("rediss://")),
        }
    }

    /// The operator setting this target came from (for error messages).
    pub fn setting(&self) -> &'static str {
        match self {
            RedisTarget::Single(_) => "ROOMD__REDIS__URL",
            RedisTarget::Cluster(_) => "ROOMD__REDIS__CLUSTER_URLS",
        }
    }

    /// A cluster client for the seeds (`push`: where sharded messages go, for the bus).
    pub fn cluster_client(
        seeds: &[String],
        push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    ) -> RedisResult<ClusterClient> {
        install_tls_provider(seeds.iter().any(|s| s.starts_with("rediss://")));
        let mut builder = ClusterClientBuilder::new(seeds.to_vec())
            .connection_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .retries(3)
            .max_retry_wait(500)
            .tcp_settings(tcp_settings());
        if let Some(push) = push {
            builder = builder.use_protocol(redis::ProtocolVersion::RESP3).push_sender(push);
        }
        builder.build()
    }
}

/// rustls needs one process-wide crypto provider for `rediss://`; a second install is
/// refused harmlessly.
pub(crate) fn install_tls_provider(tls: bool) {
    if tls {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_name_one_redis_a_cluster_or_neither_never_both() {
        assert_eq!(RedisTarget::from_settings(None, None), Ok(None));
        assert_eq!(RedisTarget::from_settings(Some(""), Some(" ")), Ok(None));
        assert_eq!(
            RedisTarget::from_settings(Some("redis://127.0.0.1:6380/"), None),
            Ok(Some(RedisTarget::Single("redis://127.0.0.1:6380/".into())))
        );
        assert_eq!(
            RedisTarget::from_settings(None, Some("redis://10.0.0.1:7000, rediss://10.0.0.2:7000,")),
            Ok(Some(RedisTarget::Cluster(vec!["redis://10.0.0.1:7000".into(), "rediss://10.0.0.2:7000".into()])))
        );
        let both = RedisTarget::from_settings(Some("redis://a/"), Some("redis://b:7000")).unwrap_err();
        assert!(both.contains("both set"), "{both}");
        let bad = RedisTarget::from_settings(None, Some("10.0.0.1:7000")).unwrap_err();
        assert!(bad.contains("not a redis:// or rediss:// URL"), "{bad}");
        assert_eq!(RedisTarget::from_settings(None, Some(",,")), Err("ROOMD__REDIS__CLUSTER_URLS names no URL".into()));
    }

    #[test]
    fn a_target_uses_tls_when_any_of_its_urls_is_rediss() {
        assert!(!RedisTarget::Single("redis://10.0.0.1:6379/".into()).uses_tls());
        assert!(RedisTarget::Single("rediss://10.0.0.1:6379/".into()).uses_tls());
        assert!(RedisTarget::Cluster(vec!["redis://a:7000".into(), "rediss://b:7000".into()]).uses_tls());
        assert!(!RedisTarget::Cluster(vec!["redis://a:7000".into()]).uses_tls());
    }
}
