//! The reference limit server for tally fan-out (see `benches::limit`).
//!
//! Usage: `limit_server [PORT]` (default 8090). Binds 127.0.0.1 only.

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let port: u16 = match std::env::args().nth(1) {
        Some(p) => p.parse().context("PORT must be a number")?,
        None => 8090,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        eprintln!("limit_server listening on {}", listener.local_addr()?);
        benches::limit::serve(listener).await?;
        anyhow::Ok(())
    })
}
