#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The OpenAPI document (`docs/openapi.json`, served at `/api/openapi.json`) against the
//! code: every route the actix app registers is documented and every documented
//! operation is registered, and the served document is the checked-in one. Its response
//! shapes and status codes are checked against a live node by schemathesis in
//! `scripts/test`.

mod support;

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use support::start_server;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// `{room}`, `{roomId}` and `{file:.+}` all become `{}`.
fn normalize(path: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in path.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    out.push_str("{}");
                }
            }
            '}' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The first string literal at or after `at`.
fn literal(src: &str, at: usize) -> Option<(String, usize)> {
    let start = at + src[at..].find('"')? + 1;
    let len = src[start..].find('"')?;
    Some((src[start..start + len].to_owned(), start + len + 1))
}

/// The `web::scope("…")` blocks of one source file: prefix and byte range (up to the
/// closing parenthesis of the call the scope is passed to).
fn scopes(src: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    for (at, _) in src.match_indices("web::scope(") {
        let (prefix, after) = literal(src, at).unwrap();
        // Inside the scope's own `(` (depth 1); the `)` that takes depth to -1 closes
        // the call the scope is passed to.
        let mut depth: i32 = 1;
        let mut end = src.len();
        for (i, c) in src[after..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == -1 {
                end = after + i;
                break;
            }
        }
        out.push((prefix, at..end));
    }
    out
}

/// `(METHOD, path)` of every `.route("…", web::method()…)` in the gateway's sources,
/// with the prefix of the scope it sits in.
fn registered_routes() -> BTreeSet<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut routes = BTreeSet::new();
    let mut files = vec![dir];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let full = std::fs::read_to_string(&path).unwrap();
        // Unit tests may build throwaway apps: only the code above them counts.
        let src = full.split("#[cfg(test)]").next().unwrap();
        let scoped = scopes(src);
        for (at, _) in src.match_indices(".route(\"") {
            let (route, after) = literal(src, at).unwrap();
            let rest = src[after..].trim_start_matches([',', ' ', '\n']);
            let method = METHODS
                .iter()
                .find(|m| rest.starts_with(&format!("web::{m}()")))
                .unwrap_or_else(|| panic!("{}: route {route} has no web::method()", path.display()));
            let prefix = scoped.iter().filter(|(_, r)| r.contains(&at)).map(|(p, _)| p.as_str()).collect::<String>();
            routes.insert((method.to_uppercase(), normalize(&format!("{prefix}{route}"))));
        }
    }
    routes
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            if item.get(m).is_some() {
                ops.insert((m.to_uppercase(), normalize(path)));
            }
        }
    }
    ops
}

fn checked_in() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn every_registered_route_is_documented_and_every_documented_one_registered() {
    let registered = registered_routes();
    assert!(
        registered.contains(&("POST".into(), "/api/rooms/{}/seats".into())),
        "the scan finds scoped routes: {registered:?}"
    );
    assert!(registered.contains(&("GET".into(), "/ws".into())));
    let documented = documented(&checked_in());
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    let unregistered: Vec<_> = documented.difference(&registered).collect();
    assert!(undocumented.is_empty(), "routes missing from docs/openapi.json: {undocumented:?}");
    assert!(unregistered.is_empty(), "docs/openapi.json documents routes the app does not register: {unregistered:?}");
}

#[test]
fn the_route_scan_sees_scopes_and_parameters() {
    let src = r#"cfg.route("/a", web::get().to(a)).service(
        web::scope("/api")
            .route("/x/{id}", web::post().to(x))
            .route("/y", web::delete().to(y)),
    );
    cfg.route("/b/{f:.+}", web::get().to(b));"#;
    let s = scopes(src);
    assert_eq!(s.len(), 1);
    let inside: Vec<bool> = src.match_indices(".route(").map(|(at, _)| s[0].1.contains(&at)).collect();
    assert_eq!(inside, [false, true, true, false]);
    assert_eq!(normalize("/b/{f:.+}"), "/b/{}");
}

#[test]
fn every_operation_has_an_id_and_only_documented_error_shapes() {
    let doc = checked_in();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_owned()), "operationId {id} twice");
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses.keys().all(|k| k.len() == 3 && k.parse::<u16>().is_ok()),
                "{method} {path}: no `default` response"
            );
            // The WebSocket takes its token as a query parameter, not a header.
            let secured = op.get("security").is_some() || path == "/ws";
            assert_eq!(secured, responses.contains_key("401"), "{method} {path}: token ⇔ 401");
        }
    }
}

#[tokio::test]
async fn the_served_document_is_the_checked_in_one() {
    let server = start_server();
    let (status, served) = server.get("/api/openapi.json", None).await;
    assert_eq!(status, 200);
    assert_eq!(served, checked_in());
    let res = reqwest::get(server.url("/docs/asyncapi.yaml")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.text().await.unwrap().starts_with("# The roomd WebSocket protocol"));
    let res = reqwest::get(server.url("/static/sdk/index.js")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
    assert_eq!(reqwest::get(server.url("/static/sdk/nope.js")).await.unwrap().status(), 404);
}

#[tokio::test]
async fn an_undocumented_method_is_405_with_allow_and_an_unknown_path_a_json_404() {
    let server = start_server();
    let http = reqwest::Client::new();
    let res = http.request(reqwest::Method::TRACE, server.url("/api/games")).send().await.unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers()["allow"], "GET");
    assert_eq!(res.json::<Value>().await.unwrap()["code"], "method_not_allowed");
    let res = http.put(server.url("/api/rooms/r_x/start")).send().await.unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers()["allow"], "POST");
    let res = http.get(server.url("/api/nowhere")).send().await.unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(res.json::<Value>().await.unwrap()["code"], "not_found");
}
