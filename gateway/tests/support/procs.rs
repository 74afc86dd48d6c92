//! Real processes for the cluster fault tests: `roomd` nodes (restartable with the same
//! node id) and a Redis of the test's own with AOF (`appendfsync always`, so an
//! acknowledged write survives a Redis restart), each on a free loopback port and stopped
//! by its own pid.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
}

impl OwnRedis {
    pub fn start() -> OwnRedis {
        let dir = std::env::temp_dir().join(format!("roomd-faults-{}", engine::Seed::from_os().unwrap().to_hex()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = OwnRedis { child: None, port: free_port(), dir };
        redis.up();
        redis
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

/// A `roomd` cluster node process.
pub struct Proc {
    child: Option<Child>,
    pub id: String,
    pub base: String,
    prefix: String,
    url: String,
    env: Vec<(String, String)>,
}

impl Proc {
    /// Starts node `id` (cluster mode on `url`, keys under `prefix`); `env` adds or
    /// overrides settings (`ROOMD__…`).
    pub fn start(id: &str, prefix: &str, url: &str, env: &[(&str, &str)]) -> Proc {
        let mut node = Proc {
            child: None,
            id: id.to_owned(),
            base: String::new(),
            prefix: prefix.to_owned(),
            url: url.to_owned(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        node.up();
        node
    }

    /// Starts the process (again, with the same node id) and waits for its address.
    pub fn up(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_roomd"));
        cmd.env("ROOMD__HTTP__PORT", "0")
            .env("ROOMD__HTTP__WORKERS", "1")
            .env("ROOMD__NODE__ID", &self.id)
            .env("ROOMD__REDIS__URL", &self.url)
            .env("ROOMD__REDIS__PREFIX", &self.prefix)
            .env("ROOMD__AUTH__SECRET", SECRET)
            .env("ROOMD__CLUSTER__LEASE_MS", "1500")
            .env("ROOMD__CLUSTER__HEARTBEAT_MS", "300")
            .env("ROOMD__CLUSTER__DRAIN_GRACE_S", "6")
            .env("ROOMD__LOG__LEVEL", "warn")
            .env("ROOMD__ROOMS__MAX_OPEN_PER_USER", "100")
            // Every test client is 127.0.0.1.
            .env("ROOMD__HTTP__ADDR_RATE_PER_MIN", "1000000")
            .env("ROOMD__HTTP__ADDR_BURST", "1000000")
            .env("ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER", "1000")
            .env("ROOMD__WS__RATE_PER_S", "1000")
            .env("ROOMD__WS__BURST", "1000");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
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
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        self.base = format!("http://{addr}");
        self.child = Some(child);
    }

    pub fn ws(&self) -> String {
        self.base.replace("http://", "ws://")
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
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

/// A started tally room (no target: it never ends) with `host` and `others` seated, all
/// through `base`: `(roomId, gamePk, owner node)`.
pub async fn tally_room(http: &reqwest::Client, base: &str, host: &str, others: &[&str]) -> (String, String, String) {
    let created: Value = http
        .post(format!("{base}/api/rooms"))
        .bearer_auth(host)
        .json(&json!({"game": "tally", "options": {"target": null}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let room = created["roomId"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    for token in others {
        let r = http.post(format!("{base}/api/rooms/{room}/seats")).bearer_auth(token).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
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
