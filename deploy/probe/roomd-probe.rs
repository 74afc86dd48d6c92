//! `roomd-probe`: the container's health check and `preStop` pause, with no shell.
//!
//! The runtime image (distroless) has no shell, curl or sleep, so this std-only program is
//! compiled next to `roomd` (`rustc -O`, see deploy/Dockerfile) and copied in.
//!
//!   roomd-probe               GET http://127.0.0.1:$ROOMD__HTTP__PORT/healthz; exit 0 on 200
//!   roomd-probe /readyz       the same for another path
//!   roomd-probe --sleep 5     wait 5 s and exit 0 (Kubernetes preStop)
//!
//! The port comes from `ROOMD__HTTP__PORT` (default 8080), the setting roomd itself
//! binds, so the probe never disagrees with the server about where it listens.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(3);

fn check(path: &str) -> Result<(), String> {
    let port: u16 = match std::env::var("ROOMD__HTTP__PORT") {
        Ok(p) => p.trim().parse().map_err(|_| format!("bad ROOMD__HTTP__PORT {p:?}"))?,
        Err(_) => 8080,
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(|e| format!("send: {e}"))?;
    let mut head = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match stream.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let status = String::from_utf8_lossy(&head[..got]);
    match status.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        Some(code) => Err(format!("{path} answered {code}")),
        None => Err(format!("{path}: no HTTP status line")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--sleep") {
        let secs = args.get(1).and_then(|s| s.parse::<u64>().ok()).unwrap_or(5);
        std::thread::sleep(Duration::from_secs(secs));
        return ExitCode::SUCCESS;
    }
    let path = args.first().map(String::as_str).unwrap_or("/healthz");
    match check(path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roomd-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
