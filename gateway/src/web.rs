//! The web client: plain HTML/CSS/ES modules from `gateway/static/`, embedded in the
//! binary so a node serves it without any runtime path. `/` itself is `api::index`
//! (static/index.html); the rest is `/static/{file}` from the table below. The SDK
//! (`clients/js`, `@roomd/client`) is embedded as built into `static/sdk/` (checked by
//! `clients/js/test/static.test.mjs`), so cargo never needs node. The API descriptions
//! are served from `docs/`: `/api/openapi.json` and `/docs/asyncapi.yaml`.

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use std::sync::OnceLock;

/// One embedded file: its name under `/static/`, content type and bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

const ASSETS: &[Asset] = &[
    Asset { name: "style.css", content_type: "text/css; charset=utf-8", body: include_str!("../static/style.css") },
    Asset { name: "app.js", content_type: JS, body: include_str!("../static/app.js") },
    Asset { name: "net.js", content_type: JS, body: include_str!("../static/net.js") },
    Asset { name: "ui.js", content_type: JS, body: include_str!("../static/ui.js") },
    Asset { name: "halli.js", content_type: JS, body: include_str!("../static/halli.js") },
    Asset { name: "cockroach.js", content_type: JS, body: include_str!("../static/cockroach.js") },
    Asset { name: "tally.js", content_type: JS, body: include_str!("../static/tally.js") },
    Asset { name: "replay.js", content_type: JS, body: include_str!("../static/replay.js") },
    Asset { name: "chat.js", content_type: JS, body: include_str!("../static/chat.js") },
    Asset { name: "sdk/index.js", content_type: JS, body: include_str!("../static/sdk/index.js") },
    Asset { name: "sdk/types.js", content_type: JS, body: include_str!("../static/sdk/types.js") },
    Asset { name: "sdk/http.js", content_type: JS, body: include_str!("../static/sdk/http.js") },
    Asset { name: "sdk/connection.js", content_type: JS, body: include_str!("../static/sdk/connection.js") },
    Asset { name: "sdk/patch.js", content_type: JS, body: include_str!("../static/sdk/patch.js") },
];

/// The OpenAPI 3.1 description of the HTTP API (kept true by `tests/openapi.rs` and
/// schemathesis in `scripts/test`).
pub const OPENAPI_JSON: &str = include_str!("../../docs/openapi.json");
/// The AsyncAPI 3 description of the WebSocket protocol (kept true by the SDK's tests).
pub const ASYNCAPI_YAML: &str = include_str!("../../docs/asyncapi.yaml");

/// Adds `GET /static/{file}` (also `static/sdk/…`), `/api/openapi.json` and
/// `/docs/asyncapi.yaml`. Registered before the `/api` scope, which would otherwise
/// answer 404 for the OpenAPI path.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/static/{file:.+}", web::get().to(asset))
        .route("/api/openapi.json", web::get().to(openapi))
        .route("/docs/asyncapi.yaml", web::get().to(asyncapi))
        .default_service(web::to(fallback));
}

/// The documented paths (OpenAPI templates split into segments, `None` for a
/// parameter) with the methods each allows, upper-case.
type Documented = Vec<(Vec<Option<String>>, Vec<String>)>;

fn documented() -> &'static Documented {
    static DOC: OnceLock<Documented> = OnceLock::new();
    DOC.get_or_init(|| {
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(OPENAPI_JSON) else { return Vec::new() };
        let Some(paths) = doc.get("paths").and_then(|p| p.as_object()) else { return Vec::new() };
        paths
            .iter()
            .map(|(path, item)| {
                let segments =
                    path.split('/').map(|s| if s.starts_with('{') { None } else { Some(s.to_owned()) }).collect();
                let methods =
                    item.as_object().map(|o| o.keys().map(|m| m.to_uppercase()).collect()).unwrap_or_default();
                (segments, methods)
            })
            .collect()
    })
}

/// The methods the API documents for this path, if it documents the path at all.
fn allowed_methods(path: &str) -> Option<&'static [String]> {
    let parts: Vec<&str> = path.split('/').collect();
    documented()
        .iter()
        .find(|(segments, _)| {
            segments.len() == parts.len()
                && segments.iter().zip(&parts).all(|(s, p)| s.as_deref().map_or(!p.is_empty(), |s| s == *p))
        })
        .map(|(_, methods)| methods.as_slice())
}

/// Whatever no route takes: 405 with `Allow` for a known path (the method is wrong),
/// else 404, both in the API's error shape.
async fn fallback(req: HttpRequest) -> HttpResponse {
    match allowed_methods(req.path()) {
        Some(methods) => HttpResponse::MethodNotAllowed().insert_header((header::ALLOW, methods.join(", "))).json(
            serde_json::json!({"code": "method_not_allowed", "reason": "이 주소에서 쓸 수 없는 요청 방식이에요"}),
        ),
        None => actix_web::ResponseError::error_response(&crate::error::ApiError::not_found()),
    }
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(OPENAPI_JSON)
}

async fn asyncapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/yaml; charset=utf-8").body(ASYNCAPI_YAML)
}

fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

async fn asset(path: web::Path<String>) -> HttpResponse {
    match find(&path) {
        Some(a) => HttpResponse::Ok()
            .content_type(a.content_type)
            // The files change only with the binary; revalidate so an upgrade shows at once.
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(a.body),
        None => HttpResponse::NotFound()
            .content_type("application/json")
            .body(r#"{"code":"not_found","reason":"없는 파일이에요"}"#),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_is_served_with_a_javascript_type() {
        for a in ASSETS {
            if a.name.ends_with(".js") {
                assert!(a.content_type.starts_with("text/javascript"), "{}", a.name);
            }
            assert!(!a.body.is_empty(), "{}", a.name);
        }
        assert!(find("app.js").is_some());
        assert!(find("../Cargo.toml").is_none());
        assert!(find("sdk/../app.js").is_none());
    }

    #[test]
    fn every_sdk_file_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("static/sdk");
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let asset = find(&format!("sdk/{name}")).unwrap_or_else(|| panic!("static/sdk/{name} is not embedded"));
            assert_eq!(asset.body, std::fs::read_to_string(dir.join(&name)).unwrap());
            files += 1;
        }
        assert_eq!(files, ASSETS.iter().filter(|a| a.name.starts_with("sdk/")).count());
    }

    #[test]
    fn a_wrong_method_on_a_documented_path_is_405_and_an_unknown_path_404() {
        assert_eq!(allowed_methods("/api/rooms").map(|m| m.join(",")), Some("GET,POST".into()));
        assert_eq!(allowed_methods("/api/rooms/r_1/seats/me").map(|m| m.join(",")), Some("DELETE".into()));
        assert!(allowed_methods("/api/rooms/r_1/nope").is_none());
        assert!(allowed_methods("/api/rooms//seats").is_none());
        assert!(allowed_methods("/nope").is_none());
    }

    #[test]
    fn the_api_descriptions_parse() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        assert!(ASYNCAPI_YAML.contains("asyncapi: 3.0.0"));
    }

    #[test]
    fn every_imported_module_is_embedded() {
        for a in ASSETS {
            let dir = a.name.rsplit_once('/').map(|(d, _)| format!("{d}/")).unwrap_or_default();
            for line in a.body.lines() {
                let Some(rest) = line.split(" from './").nth(1) else { continue };
                let Some(name) = rest.split('\'').next() else { continue };
                let path = format!("{dir}{name}");
                assert!(find(&path).is_some(), "{} imports {path}, which is not embedded", a.name);
            }
        }
    }
}
