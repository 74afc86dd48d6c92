#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! The open-loop schedule against the limit server (in process, loopback): a server that
//! stalls for a second shows in the open-loop tail, not in the closed-loop one
//! (coordinated omission); rate and socket stages; the command line's thresholds and
//! report. Generous bounds: the machine is shared.

use benches::limit::{serve_observed, serve_with, Closes, Stall};
use benches::loadgen::{self, spec::parse_stages, Config, GameKind, LoopMode, Report, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// A limit server on a free loopback port; stalls once as `stall` says.
async fn limit_server(stall: Option<Stall>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with(listener, stall));
    addr
}

fn config(addr: SocketAddr) -> Config {
    Config {
        urls: vec![format!("http://{addr}")],
        target: Target::Limit,
        game: GameKind::Tally,
        rooms: 1,
        duration: Duration::from_secs(4),
        concurrency: 1,
        ramp_timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

fn stall() -> Option<Stall> {
    // One second without answers, one second after the first action.
    Some(Stall::new(Duration::from_secs(1), Duration::from_secs(1)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_second_stall_shows_in_the_open_loop_p99_but_not_in_the_closed_loop_one() {
    // The same load twice (4 clients, 200 bumps/s for 4 s) against servers that stall
    // for 1 s: open loop (the default) and closed loop (the old pacing, one in flight).
    let open = loadgen::run(Config { rate: Some(200.0), ..config(limit_server(stall()).await) }).await.unwrap();
    let closed = loadgen::run(Config {
        mode: LoopMode::Closed,
        interval: Duration::from_millis(20),
        max_in_flight: 1,
        ..config(limit_server(stall()).await)
    })
    .await
    .unwrap();
    for r in [&open, &closed] {
        assert_eq!((r.errors, r.unanswered, r.connected_clients), (0, 0, 4), "{}", r.text());
        // Both saw the stall happen: their slowest action waited about a second.
        assert!(r.latency.max_ms >= 800.0, "{}", r.text());
    }
    // Open loop: the ~200 bumps due during the stall all waited (0–1 s each), a quarter of
    // the samples, so the p99 is the stall.
    assert!(open.latency.p99_ms >= 800.0, "open-loop p99 hides the stall:\n{}", open.text());
    assert!(open.scheduled >= 700 && open.acks + open.missed >= open.scheduled - 5, "{}", open.text());
    assert_eq!(open.skipped, 0, "{}", open.text());
    // Closed loop: each client had one bump in flight through the stall and skipped its
    // ticks; four slow samples out of hundreds, so the p99 looks healthy.
    assert!(closed.latency.p99_ms < 400.0, "closed-loop p99 should hide the stall:\n{}", closed.text());
    assert!(closed.skipped >= 100, "the closed loop skipped its ticks during the stall:\n{}", closed.text());
    // The per-second series shows where: some second's p99 in the open run is the stall.
    assert!(open.series.iter().any(|s| s.p99_ms >= 500.0), "{:?}", open.series);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_closes_its_socket_while_another_still_waits_for_answers_after_the_window() {
    // Two rooms, eight clients; the first socket's answers stop 0.3 s before the window
    // closes and come 0.7 s after it, in the drain. The other seven are answered at once:
    // they stay connected until that client has its answers, so what is still in flight
    // is never timed against a server busy with the rest of the run's sockets closing.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stall = Arc::new(Stall::new(Duration::from_millis(1700), Duration::from_secs(1)).on_connection(1));
    let closes = Arc::new(Closes::default());
    tokio::spawn(serve_observed(listener, Some(stall.clone()), closes.clone()));
    let r = loadgen::run(Config { rooms: 2, rate: Some(80.0), duration: Duration::from_secs(2), ..config(addr) })
        .await
        .unwrap();
    assert_eq!((r.errors, r.unanswered, r.connected_clients), (0, 0, 8), "{}", r.text());
    // The stalled client's last bumps waited into the drain and were answered there.
    assert!(r.latency.max_ms >= 500.0, "{}", r.text());
    // The server notes a close once it has read the client's close frame, which may be
    // after `run` returned on a busy machine: wait for all eight (bounded).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while closes.count() < 8 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (Some(first_close), Some(stall_end)) = (closes.first(), stall.ends_at()) else {
        panic!("no socket closed ({}) or no act came", closes.count())
    };
    assert_eq!(closes.count(), 8);
    assert!(
        first_close >= stall_end,
        "a socket closed {:?} before the stalled client's answers came",
        stall_end.saturating_duration_since(first_close)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_stages_ramp_the_schedule_and_the_window_is_their_length() {
    let addr = limit_server(None).await;
    // 0 → 300/s over 2 s, then 300 → 0 over 1 s: 300 + 150 = 450 bumps.
    let r: Report =
        loadgen::run(Config { rate_stages: Some(parse_stages("2s:300,1s:0").unwrap()), ..config(addr) }).await.unwrap();
    assert_eq!(r.errors, 0, "{}", r.text());
    assert!((r.window_s - 3.0).abs() < 1e-9, "{}", r.text());
    assert!((430..=451).contains(&r.scheduled), "{}", r.text());
    assert_eq!(r.target_rate, Some(300.0));
    // The series rises and falls: the middle second carries more than the first.
    assert!(r.series.len() >= 3, "{:?}", r.series);
    assert!(r.series[1].scheduled > r.series[0].scheduled, "{:?}", r.series);
    assert!(r.series[1].scheduled > r.series[2].scheduled, "{:?}", r.series);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_stages_set_rooms_up_and_tear_them_down_while_measuring() {
    let addr = limit_server(None).await;
    let cfg = Config {
        socket_stages: Some(parse_stages("1s:8,2s:8,1s:0").unwrap()),
        interval: Duration::from_millis(100),
        ..config(addr)
    };
    let r = loadgen::run(cfg).await.unwrap();
    assert_eq!(r.errors, 0, "{}", r.text());
    assert_eq!((r.rooms_ready, r.connected_clients), (2, 8), "{}", r.text());
    assert!(r.acks > 0 && r.unanswered == 0, "{}", r.text());
    let peak = r.series.iter().map(|s| s.sockets).max().unwrap_or(0);
    assert_eq!(peak, 8, "{:?}", r.series);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_threshold_exits_99_naming_it_and_the_report_has_its_plots() {
    let addr = limit_server(None).await;
    let dir = std::env::temp_dir().join(format!("loadgen-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("out.html");
    let args: Vec<String> = [
        "--limit",
        "--url",
        &format!("http://{addr}"),
        "--rooms",
        "1",
        "--duration",
        "2s",
        "--rate",
        "100",
        "--threshold",
        "p99<1us",
        "--threshold",
        "errors<1%",
        "--report",
        &html.display().to_string(),
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_loadgen")).args(args).output().unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(99), "{stderr}");
    assert!(stderr.contains("threshold failed: p99<1us"), "{stderr}");
    assert!(!stderr.contains("threshold failed: errors<1%"), "{stderr}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.matches("<svg").count() >= 3, "rate, latency and histogram plots");
    assert!(page.contains("p99&lt;1us"));
    let _ = std::fs::remove_dir_all(dir);
}
