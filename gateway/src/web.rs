//! The web client: plain HTML/CSS/ES modules from `gateway/static/`, embedded in the
//! binary so a node serves it without any runtime path. `/` itself is `api::index`
//! (static/index.html); the rest is `/static/{file}` from the table below.

use actix_web::http::header;
use actix_web::{web, HttpResponse};

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
    Asset { name: "patch.js", content_type: JS, body: include_str!("../static/patch.js") },
];

/// Adds `GET /static/{file}`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/static/{file}", web::get().to(asset));
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
    }

    #[test]
    fn every_imported_module_is_embedded() {
        for a in ASSETS {
            for line in a.body.lines() {
                let Some(rest) = line.split(" from './").nth(1) else { continue };
                let Some(name) = rest.split('\'').next() else { continue };
                assert!(find(name).is_some(), "{} imports {name}, which is not embedded", a.name);
            }
        }
    }
}
