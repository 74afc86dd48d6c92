#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Alerts and dashboards as code name only metrics a live node really exports, and the
//! metrics operators expect (process, build info, HTTP by route) are there.

mod support;

use serde_json::json;
use std::collections::BTreeSet;

const ADMIN: &str = "observability-admin-token-0123456789";

/// Every `roomd_…` / `process_…` identifier in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| t.starts_with("roomd_") || t.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// Names with at least one sample line on the node (`name{…} v` or `name v`).
fn exported(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

async fn scrape(server: &support::Server) -> String {
    server.http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn every_metric_in_the_rules_and_the_dashboard_exists_on_a_live_node() {
    let server = support::start_server_with(|s| s.admin.token = Some(ADMIN.into()));
    // Labelled series appear with their first sample: one of each.
    let host = server.guest("방장").await;
    let room = server.create_room(&host, "tally", json!({"target": 10}), 60).await;
    let mut ws = server.ws(&host).await;
    ws.sub(&room).await;
    let cs = ws.cs();
    ws.act_rejected(&room, cs, json!({"type": "bump"}), "not_started", "아직 게임이 시작되지 않았어요").await;
    let (status, _) = server.post(&format!("/admin/api/rooms/{room}/kick"), Some(ADMIN), json!({"user": "u_x"})).await;
    assert_eq!(status, 404);
    assert_eq!(server.get("/admin/api/nodes", None).await.0, 401);
    let metrics = scrape(&server).await;
    let have = exported(&metrics);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut checked = 0;
    for file in [
        "deploy/observability/roomd-rules.yaml",
        "deploy/observability/roomd-dashboard.json",
        "k8s/components/monitoring/roomd-prometheusrule.yaml",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        let names = metric_names(&text);
        assert!(names.len() >= 5, "{file} names only {names:?}");
        for name in names {
            // Annotations mention histograms by their base name.
            let base_ok = have.contains(&format!("{name}_bucket"));
            assert!(have.contains(&name) || base_ok, "{file} uses {name}, which the node does not export");
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} names checked");
}

#[tokio::test]
async fn process_build_and_http_route_metrics_are_exported() {
    let server = support::start_server();
    let host = server.guest("방장").await;
    let room = server.create_room(&host, "tally", json!({"target": 10}), 60).await;
    assert_eq!(server.get(&format!("/api/rooms/{room}"), Some(&host.token)).await.0, 200);
    assert_eq!(server.get("/api/rooms/r_nope", Some(&host.token)).await.0, 404);
    assert_eq!(server.get("/no/such/path", None).await.0, 404);
    let metrics = scrape(&server).await;
    for name in ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds"] {
        assert!(exported(&metrics).contains(name), "{name} missing");
    }
    let build = format!(
        r#"roomd_build_info{{commit="{}",version="{}"}} 1"#,
        gateway::http_metrics::COMMIT,
        env!("CARGO_PKG_VERSION")
    );
    assert!(metrics.contains(&build), "{build} not in\n{metrics}");
    // By matched route pattern, never by raw path (room ids would explode the label set).
    assert!(
        metrics.contains(r#"roomd_http_requests_total{method="GET",route="/api/rooms/{room}",status="200"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"roomd_http_requests_total{method="GET",route="/api/rooms/{room}",status="404"} 1"#));
    assert!(metrics.contains(r#"roomd_http_requests_total{method="GET",route="unmatched",status="404"} 1"#));
    assert!(metrics.contains(r#"roomd_http_requests_total{method="POST",route="/api/session",status="200"} 1"#));
    assert!(!metrics.contains(&room), "a raw room id became a label");
    assert!(metrics.contains(r#"roomd_http_request_duration_seconds_count{method="POST",route="/api/rooms"} 1"#));
}
