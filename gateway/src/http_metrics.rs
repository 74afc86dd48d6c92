//! Metrics operators expect from any service: HTTP requests by route pattern (never the
//! raw path, so room ids do not explode the label set), method and status, with their
//! latency; the process's CPU, memory and file descriptors; and `roomd_build_info`.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use std::time::Instant;

/// The commit roomd was built from: `ROOMD_GIT_COMMIT` at build time (the Dockerfile
/// passes it), else `unknown`.
pub const COMMIT: &str = match option_env!("ROOMD_GIT_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

const BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

#[derive(Clone)]
pub struct HttpMetrics {
    pub requests: IntCounterVec,
    pub duration: HistogramVec,
}

impl HttpMetrics {
    pub fn new(registry: &Registry) -> Result<HttpMetrics, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new("roomd_http_requests_total", "HTTP requests by route pattern, method and status"),
            &["route", "method", "status"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "roomd_http_request_duration_seconds",
                "HTTP request latency by route pattern and method (for /ws: the upgrade only)",
            )
            .buckets(BUCKETS.to_vec()),
            &["route", "method"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        Ok(HttpMetrics { requests, duration })
    }
}

/// `process_*` (CPU seconds, resident memory, open and max fds, start time) and
/// `roomd_build_info{version,commit} 1`.
pub fn register_process_metrics(registry: &Registry) -> Result<(), prometheus::Error> {
    registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
    let build = IntGaugeVec::new(
        Opts::new("roomd_build_info", "always 1; the labels say which build runs"),
        &["version", "commit"],
    )?;
    build.with_label_values(&[env!("CARGO_PKG_VERSION"), COMMIT]).set(1);
    registry.register(Box::new(build))?;
    Ok(())
}

/// Middleware: counts and times every request under its matched route pattern
/// (`/api/rooms/{room}`), or `unmatched` when no route matched.
pub async fn track(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let metrics = req.app_data::<web::Data<HttpMetrics>>().map(|m| m.get_ref().clone());
    let method = req.method().as_str().to_owned();
    let started = Instant::now();
    let res = next.call(req).await;
    if let Some(m) = metrics {
        let (route, status) = match &res {
            Ok(r) => (r.request().match_pattern().unwrap_or_else(|| "unmatched".to_owned()), r.status().as_u16()),
            Err(e) => ("unmatched".to_owned(), e.as_response_error().status_code().as_u16()),
        };
        let method = match method.as_str() {
            "GET" | "POST" | "DELETE" | "PUT" | "PATCH" | "HEAD" | "OPTIONS" => method.as_str(),
            _ => "other",
        };
        m.requests.with_label_values(&[&route, method, &status.to_string()]).inc();
        m.duration.with_label_values(&[&route, method]).observe(started.elapsed().as_secs_f64());
    }
    res
}
