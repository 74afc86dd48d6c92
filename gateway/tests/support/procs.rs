//! Real processes for the tests that need them: `roomd` nodes (cluster nodes restartable
//! with the same node id, or an embedded node on a data directory) and a Redis of the
//! test's own with AOF (`appendfsync always`, so an acknowledged write survives a Redis
//! restart), each on a free loopback port and stopped by its own pid; and what the
//! cluster tests do with them (wait for membership, sessions, rooms, sockets, metrics).

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const SECRET: &str = "fault-test-secret";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn kill_pid(pid: u32, sig: &str) -> bool {
    Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().is_ok_and(|s| s.success())
}

/// A Redis with AOF on a port of its own; restarts keep its port and data directory.
pub struct OwnRedis {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// The master's port, for a replica.
    master: Option<u16>,
}

impl OwnRedis {
    pub fn start() -> OwnRedis {
        OwnRedis::launch(None)
    }

    /// A replica of `master`, returned once it has linked to it.
    pub fn replica_of(master: &OwnRedis) -> OwnRedis {
        let replica = OwnRedis::launch(Some(master.port));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !replica.linked() {
            assert!(Instant::now() < deadline, "the replica never linked to its master");
            std::thread::sleep(Duration::from_millis(50));
        }
        replica
    }

    fn launch(master: Option<u16>) -> OwnRedis {
        let dir = std::env::temp_dir().join(format!("roomd-faults-{}", engine::Seed::from_os().unwrap().to_hex()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = OwnRedis { child: None, port: free_port(), dir, master };
        redis.up();
        redis
    }

    fn linked(&self) -> bool {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "info", "replication"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("master_link_status:up"))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the process (again) and waits until it accepts connections.
    pub fn up(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--save", ""])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(
                self.master
                    .iter()
                    .flat_map(|port| ["--replicaof".to_owned(), "127.0.0.1".to_owned(), port.to_string()]),
            )
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (./scripts/test installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start on {}", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL (the AOF, fsynced on every write, keeps everything acknowledged).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_pid(child.id(), "CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Deletes its data (AOF and all), as a Redis that comes back on a new empty volume.
    /// Only while it is down.
    pub fn wipe(&mut self) {
        assert!(self.child.is_none(), "wipe a stopped Redis only");
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).unwrap();
    }

    pub fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            assert!(kill_pid(child.id(), sig), "kill -{sig} redis");
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `roomd` process's settings as `ROOMD__…` environment variables, applied in order:
/// `Some(value)` sets one, `None` removes it from what the test inherited.
#[derive(Clone, Debug, Default)]
pub struct Settings(Vec<(String, Option<String>)>);

impl Settings {
    /// What every test process has: any free port, one worker, warnings only, and
    /// per-address limits that never bite (every test client is 127.0.0.1).
    pub fn base() -> Settings {
        Settings::default()
            .set("ROOMD__HTTP__PORT", "0")
            .set("ROOMD__HTTP__WORKERS", "1")
            .set("ROOMD__LOG__LEVEL", "warn")
            .set("ROOMD__HTTP__ADDR_RATE_PER_MIN", "1000000")
            .set("ROOMD__HTTP__ADDR_BURST", "1000000")
            .set("ROOMD__HTTP__ADDR_MAX_SOCKETS", "1000000")
            .set("ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER", "1000")
    }

    /// Cluster node `id` on the Redis at `url`, its keys under `prefix`.
    pub fn cluster(id: &str, prefix: &str, url: &str) -> Settings {
        Settings::base()
            .set("ROOMD__NODE__ID", id)
            .set("ROOMD__REDIS__URL", url)
            .set("ROOMD__REDIS__PREFIX", prefix)
            .set("ROOMD__AUTH__SECRET", SECRET)
            .set("ROOMD__ROOMS__MAX_OPEN_PER_USER", "100")
            // Frames between nodes go on peer links, as by default (`auto`: the HTTP
            // address, any free port); a test that wants Redis pub/sub sets it `off`.
            .unset("ROOMD__CLUSTER__PEER_LISTEN")
    }

    /// A short lease: a lost owner is noticed in about 1.5 s.
    pub fn short_lease(self) -> Settings {
        self.set("ROOMD__CLUSTER__LEASE_MS", "1500").set("ROOMD__CLUSTER__HEARTBEAT_MS", "300")
    }

    pub fn set(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Settings {
        self.0.push((key.to_owned(), Some(value.as_ref().to_string_lossy().into_owned())));
        self
    }

    /// Removes `key` from the environment the process inherits.
    pub fn unset(mut self, key: &str) -> Settings {
        self.0.push((key.to_owned(), None));
        self
    }

    /// Adds or overrides `env` (`ROOMD__…`).
    pub fn with(self, env: &[(&str, &str)]) -> Settings {
        env.iter().fold(self, |s, (k, v)| s.set(k, v))
    }

    /// Sets (and removes) these variables in `cmd`'s environment, in order.
    pub fn apply(&self, cmd: &mut Command) {
        for (key, value) in &self.0 {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
    }
}

/// A `roomd` process (a cluster node, or an embedded node on a data directory).
pub struct Proc {
    child: Option<Child>,
    pub id: String,
    pub base: String,
    /// The line in which the process named its address.
    pub banner: String,
    /// Everything the process printed after its address (across restarts).
    pub log: Arc<Mutex<String>>,
    settings: Settings,
}

impl Proc {
    /// Starts node `id` (cluster mode on `url`, keys under `prefix`) with the fault
    /// tests' timings; `env` adds or overrides settings (`ROOMD__…`).
    pub fn start(id: &str, prefix: &str, url: &str, env: &[(&str, &str)]) -> Proc {
        let settings = Settings::cluster(id, prefix, url)
            .short_lease()
            .set("ROOMD__CLUSTER__DRAIN_GRACE_S", "6")
            .set("ROOMD__WS__RATE_PER_S", "1000")
            .set("ROOMD__WS__BURST", "1000")
            .with(env);
        Proc::spawn(id, settings)
    }

    /// Starts a process with exactly `settings`; `id` names it in failures.
    pub fn spawn(id: &str, settings: Settings) -> Proc {
        let mut node = Proc {
            child: None,
            id: id.to_owned(),
            base: String::new(),
            banner: String::new(),
            log: Arc::new(Mutex::new(String::new())),
            settings,
        };
        node.up();
        node
    }

    /// Starts the process (again, with the same settings) and waits for its address.
    pub fn up(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_roomd"));
        self.settings.apply(&mut cmd);
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("roomd starts");
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let mut addr = None;
        // The first line naming the address (log lines may come first).
        for _ in 0..200 {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if let Some(rest) = line.split("roomd listening on http://").nth(1) {
                addr = rest.split_whitespace().next().map(str::to_owned);
                break;
            }
        }
        let addr = addr.unwrap_or_else(|| panic!("node {} printed no address (last line {line:?})", self.id));
        // Keep reading the node's output so its logging never hits a closed pipe.
        let log = self.log.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            while reader.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                if let Ok(mut log) = log.lock() {
                    log.push_str(&String::from_utf8_lossy(&buf));
                }
                buf.clear();
            }
        });
        self.base = format!("http://{addr}");
        self.banner = line;
        self.child = Some(child);
    }

    pub fn ws(&self) -> String {
        self.base.replace("http://", "ws://")
    }

    /// The last `n` lines the process printed, each prefixed with its id: what a failure
    /// shows, so that a slow or failed recovery can be read rather than guessed at.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log.lock().unwrap();
        let tail: Vec<&str> = log.lines().rev().take(n).collect();
        tail.iter().rev().map(|line| format!("    {}: {line}\n", self.id)).collect()
    }

    pub fn addr(&self) -> SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    /// The process id while it runs (its `/proc/<pid>` for what it holds).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// The process has exited by itself (it is reaped).
    pub fn exited(&mut self) -> bool {
        let Some(child) = &mut self.child else { return true };
        if child.try_wait().unwrap().is_some() {
            self.child = None;
            return true;
        }
        false
    }

    pub fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            assert!(kill_pid(child.id(), sig), "kill -{sig} {}", self.id);
        }
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_pid(child.id(), "CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the process to exit by itself; `false` if it is still running after
    /// `within` (it is then killed).
    pub fn wait_exit(&mut self, within: Duration) -> bool {
        let Some(child) = &mut self.child else { return true };
        let deadline = Instant::now() + within;
        loop {
            if child.try_wait().ok().flatten().is_some() {
                self.child = None;
                return true;
            }
            if Instant::now() > deadline {
                self.kill();
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Node `id` on the Redis Cluster `seeds` (no `ROOMD__REDIS__URL`), with the fault tests'
/// timings; `env` adds or overrides settings.
pub fn on_redis_cluster(id: &str, prefix: &str, seeds: &str, env: &[(&str, &str)]) -> Proc {
    let settings = Settings::cluster(id, prefix, "")
        .unset("ROOMD__REDIS__URL")
        .set("ROOMD__REDIS__CLUSTER_URLS", seeds)
        .short_lease()
        .set("ROOMD__WS__RATE_PER_S", "1000")
        .set("ROOMD__WS__BURST", "1000")
        .with(env);
    Proc::spawn(id, settings)
}

/// Waits until `node` sees `n` live nodes.
pub async fn until_sees(http: &reqwest::Client, node: &Proc, n: u64, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let ready: Value = match http.get(format!("{}/readyz", node.base)).send().await {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        if ready["liveNodes"].as_u64() == Some(n) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{} never saw {n} nodes: {ready}", node.id);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A guest session through `base`: `(userId, token)`.
pub async fn guest(http: &reqwest::Client, base: &str, name: &str) -> (String, String) {
    let v: Value = http
        .post(format!("{base}/api/session"))
        .json(&json!({"name": name}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (v["userId"].as_str().unwrap().into(), v["token"].as_str().unwrap().into())
}

/// Creates a room through `base` as `host` (`body`: `{"game": …, "options": …}`): its id.
pub async fn create_room(http: &reqwest::Client, base: &str, host: &str, body: Value) -> String {
    let created: Value = http
        .post(format!("{base}/api/rooms"))
        .bearer_auth(host)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    created["roomId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned()
}

/// A started tally room (no target: it never ends) with `host` and `others` seated, all
/// through `base`: `(roomId, gamePk, owner node)`.
pub async fn tally_room(http: &reqwest::Client, base: &str, host: &str, others: &[&str]) -> (String, String, String) {
    let room = create_room(http, base, host, json!({"game": "tally", "options": {"target": null}})).await;
    for token in others {
        // A room just created may still be coming up on its owner: `room_unavailable`
        // says try again, as any client would (set-up, not what the tests are about).
        let mut tries = 0;
        loop {
            let r = http.post(format!("{base}/api/rooms/{room}/seats")).bearer_auth(token).send().await.unwrap();
            if r.status() == 503 && tries < 20 {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                continue;
            }
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
            break;
        }
    }
    let started: Value = http
        .post(format!("{base}/api/rooms/{room}/start"))
        .bearer_auth(host)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pk = started["gamePk"].as_str().unwrap_or_else(|| panic!("{started}")).to_owned();
    let info: Value =
        http.get(format!("{base}/api/rooms/{room}")).bearer_auth(host).send().await.unwrap().json().await.unwrap();
    (room, pk, info["node"].as_str().unwrap_or_default().to_owned())
}

/// The test Redis (`REDIS_URL`, started by ./scripts/test): cluster tests fail, never
/// skip, without it.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").expect("REDIS_URL is not set: run the tests with ./scripts/test")
}

/// The Redis the cluster tests run on: the Redis Cluster of `ROOMD_TEST_REDIS_CLUSTER_URLS`
/// when set (./scripts/test runs the cluster tests a second time on a 6-process Redis
/// Cluster it starts), else the one Redis of `REDIS_URL`.
pub fn test_redis_cluster() -> Option<String> {
    std::env::var("ROOMD_TEST_REDIS_CLUSTER_URLS").ok().filter(|s| !s.trim().is_empty())
}

/// Cluster node settings on the tests' Redis (see [`test_redis_cluster`]).
pub fn on_test_redis(id: &str, prefix: &str) -> Settings {
    match test_redis_cluster() {
        Some(seeds) => {
            Settings::cluster(id, prefix, "").unset("ROOMD__REDIS__URL").set("ROOMD__REDIS__CLUSTER_URLS", seeds)
        }
        None => Settings::cluster(id, prefix, &redis_url()),
    }
}

/// `redis-cli` arguments that reach the tests' Redis (`-c`: follow a cluster's redirects).
pub fn redis_cli_target() -> Vec<String> {
    match test_redis_cluster() {
        Some(seeds) => {
            let first = seeds.split(',').next().unwrap_or_default().to_owned();
            vec!["-c".into(), "-u".into(), first]
        }
        None => vec!["-u".into(), redis_url()],
    }
}

/// The verb that publishes on the bus there (`SPUBLISH` on a Redis Cluster).
pub fn bus_publish_verb() -> &'static str {
    if test_redis_cluster().is_some() {
        "SPUBLISH"
    } else {
        "PUBLISH"
    }
}

/// A key prefix of the test's own (`roomd-<tag>-<random>`), so tests never see each
/// other's rooms.
pub fn prefix(tag: &str) -> String {
    format!("roomd-{tag}-{}", engine::Seed::from_os().unwrap().to_hex())
}

/// Waits until every node sees `n` live nodes.
pub async fn until_all_see(nodes: &[&Proc], n: u64) {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for node in nodes {
        loop {
            let ready: Value = match http.get(format!("{}/readyz", node.base)).send().await {
                Ok(r) => r.json().await.unwrap_or_default(),
                Err(_) => Value::Null,
            };
            if ready["liveNodes"].as_u64() == Some(n) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "nodes never saw each other");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A guest session through `node`: `(userId, token)`.
pub async fn token(http: &reqwest::Client, node: &Proc, name: &str) -> (String, String) {
    guest(http, &node.base, name).await
}

/// `GET url` with `token`, as JSON.
pub async fn get_json(http: &reqwest::Client, url: String, token: &str) -> Value {
    http.get(url).bearer_auth(token).send().await.unwrap().json().await.unwrap()
}

/// The value of the sample `name` (without labels) on `node`'s `/metrics`.
pub async fn metric(http: &reqwest::Client, node: &Proc, name: &str) -> f64 {
    let text = http.get(format!("{}/metrics", node.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} on {}", node.base))
}

/// A counter's value, zero while it has never been counted (a labelled series appears
/// with its first count).
pub async fn counter(http: &reqwest::Client, node: &Proc, name: &str) -> f64 {
    let text = http.get(format!("{}/metrics", node.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A player socket on `node`.
pub async fn connect(node: &Proc, token: &str) -> Ws {
    tokio_tungstenite::connect_async(format!("{}/ws?token={token}", node.ws())).await.unwrap().0
}

pub async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

/// The next message matching `pred` within `within`; `None` on silence or a closed socket.
pub async fn next_within(ws: &mut Ws, within: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if pred(&v) {
                    return Some(v);
                }
            }
            Ok(Some(Ok(_))) => {}
            _ => return None,
        }
    }
}

/// Sends bump `cs` to `room` every `every` until its ack comes, as a client resends an
/// action it got no answer to, for at most `within`: the ack.
pub async fn resend_until_acked(ws: &mut Ws, room: &str, cs: u64, every: Duration, within: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        send(ws, json!({"t": "act", "room": room, "cs": cs, "a": {"type": "bump"}})).await;
        if let Some(ack) = next_within(ws, every, |v| v["t"] == "ack" && v["room"] == room && v["cs"] == cs).await {
            return Some(ack);
        }
    }
    None
}

/// Creates a tally room through `via` (`target`: its option), seats each of `others`
/// through their node and starts it: `(roomId, owner node)`.
pub async fn start_tally(
    http: &reqwest::Client,
    via: &Proc,
    host: &str,
    others: &[(&Proc, &str)],
    target: Value,
) -> (String, String) {
    let room = create_room(http, &via.base, host, json!({"game": "tally", "options": {"target": target}})).await;
    for (node, token) in others {
        let r = http.post(format!("{}/api/rooms/{room}/seats", node.base)).bearer_auth(token).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    let started = http.post(format!("{}/api/rooms/{room}/start", via.base)).bearer_auth(host).send().await.unwrap();
    assert_eq!(started.status(), 200, "{}", started.text().await.unwrap());
    let info: Value = get_json(http, format!("{}/api/rooms/{room}", via.base), host).await;
    (room, info["node"].as_str().unwrap().to_owned())
}

/// Starts tally rooms as [`start_tally`] does until one is owned by `owner`, at most
/// `tries` of them: its id. Placement is uniform: with three nodes, 40 tries miss one
/// node about once in 10^7 (16 missed it once in ~650 calls, which the suite makes
/// several of per run).
pub async fn room_on(
    http: &reqwest::Client,
    via: &Proc,
    host: &str,
    others: &[(&Proc, &str)],
    owner: &str,
    target: Value,
    tries: usize,
) -> String {
    for _ in 0..tries {
        let (room, at) = start_tally(http, via, host, others, target.clone()).await;
        if at == owner {
            return room;
        }
    }
    panic!("no room landed on {owner} in {tries} tries");
}

/// A CA and a server certificate it signed for 127.0.0.1, as PEM files in `dir`:
/// (ca.pem, server.pem, server.key).
pub fn tls_files(dir: &std::path::Path, ca_name: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, ca_name);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let paths = (dir.join(format!("{ca_name}.pem")), dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, server.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}
