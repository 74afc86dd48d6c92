#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! `https://` URLs: loadgen's sockets go over `wss://` to the limit server behind TLS with
//! a self-signed certificate (made here, loopback only); `--insecure` accepts it, and
//! without it the run refuses the certificate.

use benches::limit::serve_tls;
use benches::loadgen::{self, Config, GameKind, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

async fn tls_limit_server() -> SocketAddr {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let der = rustls::pki_types::CertificateDer::from(cert.cert.der().to_vec());
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.key_pair.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_tls(listener, tokio_rustls::TlsAcceptor::from(Arc::new(config))));
    addr
}

fn config(addr: SocketAddr, insecure: bool) -> Config {
    Config {
        urls: vec![format!("https://{addr}")],
        target: Target::Limit,
        game: GameKind::Tally,
        rooms: 1,
        duration: Duration::from_secs(1),
        rate: Some(40.0),
        ramp_timeout: Duration::from_secs(20),
        insecure,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_urls_play_over_wss_and_insecure_accepts_a_self_signed_certificate() {
    let addr = tls_limit_server().await;
    let r = loadgen::run(config(addr, true)).await.unwrap();
    assert_eq!((r.errors, r.connected_clients, r.unanswered), (0, 4, 0), "{}", r.text());
    assert!(r.acks >= 20, "{}", r.text());

    // Without --insecure the self-signed certificate is refused: the room never sets up.
    let refused = loadgen::run(config(addr, false)).await;
    match refused {
        Err(e) => {
            let e = format!("{e:#}");
            assert!(e.contains("no room was set up") && e.contains("invalid peer certificate"), "{e}");
        }
        Ok(r) => panic!("a self-signed certificate was accepted without --insecure:\n{}", r.text()),
    }
}
