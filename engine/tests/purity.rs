//! The engine never depends on an async runtime, an actor framework, a network client or
//! a clock crate: checked on the resolved dependency tree, so a stray dependency fails CI.

use std::process::Command;

#[test]
fn engine_has_no_io_dependencies() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-p", "engine", "-e", "normal", "--prefix", "none", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.contains("serde"), "unexpected tree: {tree}");
    for banned in ["tokio", "actix", "redis", "mio", "chrono", "time ", "reqwest", "hyper", "async-std"] {
        assert!(!tree.lines().any(|l| l.starts_with(banned)), "engine depends on {banned}:\n{tree}");
    }
}
