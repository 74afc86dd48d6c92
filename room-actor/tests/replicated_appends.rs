#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.
//! Group-committed appends with replicated acknowledgements (`ROOMD__REDIS__ACK_REPLICAS`)
//! on one Redis: a private master and replica (`redis-server` on free loopback ports,
//! stopped by PID), never the machine's shared Redis. A batch counts only once the
//! replica holds it; with the replica gone, every entry of a batch is `Unknown`.

use engine::{Actor, Seed};
use room_actor::keys::game_pk;
use room_actor::log::LogEntry;
use room_actor::redis_conn::RedisTarget;
use room_actor::{RedisStore, StoreError};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of this test's own, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (./scripts/test installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, port }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn info(&self, section: &str) -> String {
        let out = Command::new("redis-cli").args(["-p", &self.port.to_string(), "info", section]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn entry(seq: u64) -> LogEntry {
    LogEntry {
        seq,
        at: seq as i64,
        actor: Actor::Server,
        cs: None,
        rtt_ms: None,
        auto: true,
        input_json: "{}".into(),
        rtt: None,
    }
}

#[tokio::test]
async fn a_batch_counts_once_the_replica_holds_it_and_none_of_it_counts_without_the_replica() {
    let master = Server::start(&[]);
    let master_port = master.port.to_string();
    let replica = Server::start(&["--replicaof", "127.0.0.1", &master_port]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !replica.info("replication").contains("master_link_status:up") {
        assert!(Instant::now() < deadline, "the replica never linked to its master");
        std::thread::sleep(Duration::from_millis(50));
    }
    let target = RedisTarget::Single(master.url());
    let prefix = format!("roomd-test-{}", Seed::from_os().unwrap().to_hex());
    let store = RedisStore::connect_to(&target, &prefix).await.unwrap().with_acks(&target, 1, 300).await.unwrap();
    let pks: Vec<String> = (0..3).map(|i| game_pk(&format!("r_rep{i}"), "01")).collect();

    let (batches, _) = store.append_batches().expect("one Redis batches its appends");
    let results =
        futures_util::future::join_all(pks.iter().map(|pk| store.append_fenced(pk.clone(), entry(1), String::new())))
            .await;
    assert_eq!(results, vec![Ok(()), Ok(()), Ok(())]);
    assert_eq!(store.append_batches().unwrap().0 - batches, 1, "the three went in one batch, one WAIT");

    // The replica gone, the entries reach the master only: none of them is acknowledged.
    drop(replica);
    let results =
        futures_util::future::join_all(pks.iter().map(|pk| store.append_fenced(pk.clone(), entry(2), String::new())))
            .await;
    for result in &results {
        match result {
            Err(StoreError::Unknown(why)) => assert!(why.contains("ROOMD__REDIS__ACK_REPLICAS"), "{why}"),
            other => panic!("an unreplicated batch was answered {other:?}"),
        }
    }
}
