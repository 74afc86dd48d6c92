//! A real Redis Cluster of the test's own: six `redis-server` processes on free loopback
//! ports (3 masters, 3 replicas, `redis-cli --cluster create … --cluster-replicas 1`; or
//! nine, with 2 replicas each),
//! each stopped by its own pid; and what the tests do to it (find a key's master and its
//! replica, SIGKILL / SIGSTOP a process, start it again, move a slot to another master).

use super::procs::free_port;
use room_actor::redis::target::RedisTarget;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One process of the cluster.
struct Member {
    port: u16,
    child: Option<Child>,
    /// SIGSTOPped: it takes connections (the kernel's backlog) and answers nothing, so
    /// nothing here asks it anything until it is continued.
    stopped: AtomicBool,
}

pub struct OwnRedisCluster {
    members: Vec<Member>,
    dir: PathBuf,
    /// TLS only (clients, cluster bus and replication): the CA, certificate and key.
    tls: Option<Tls>,
    /// AOF with `appendfsync always`: a member restarted (or the whole cluster) comes
    /// back with every write it acknowledged.
    aof: bool,
}

#[derive(Clone)]
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct NodeLine {
    pub id: String,
    pub port: u16,
    pub master: bool,
    pub failed: bool,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    pub slots: Vec<(u16, u16)>,
}

fn kill_pid(pid: u32, sig: &str) -> bool {
    Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().is_ok_and(|s| s.success())
}

/// `redis-cli -p port args…`: its output, or `None` if the process could not answer.
fn cli_on(tls: Option<&Tls>, port: u16, args: &[&str]) -> Option<String> {
    let mut cmd = Command::new("redis-cli");
    if let Some(tls) = tls {
        cmd.arg("--tls").arg("--cacert").arg(&tls.ca);
    }
    let out = cmd
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("redis-cli is installed with redis-server (./scripts/test installs it)");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.starts_with("Could not connect") && !text.starts_with("ERR")).then_some(text)
}

impl OwnRedisCluster {
    /// Starts the six processes and makes them one cluster; returns once every slot is
    /// served and every master has its replica.
    pub fn start() -> OwnRedisCluster {
        OwnRedisCluster::start_with(None, 1, false)
    }

    /// The six processes with AOF (`appendfsync always`), as production runs them: the
    /// whole cluster can be stopped and started again with its data.
    pub fn start_durable() -> OwnRedisCluster {
        OwnRedisCluster::start_with(None, 1, true)
    }

    /// Nine processes with AOF (`appendfsync always`): 3 masters with 2 replicas each, so
    /// a shard whose master failed still has a replica to acknowledge its writes
    /// (`ROOMD__REDIS__ACK_REPLICAS=1`) while the old master is away, and the whole
    /// cluster can be restarted with its data.
    pub fn start_with_two_replicas() -> OwnRedisCluster {
        OwnRedisCluster::start_with(None, 2, true)
    }

    /// The same cluster speaking TLS only (`rediss://`), with `tls`'s certificate.
    pub fn start_tls(tls: Tls) -> OwnRedisCluster {
        OwnRedisCluster::start_with(Some(tls), 1, false)
    }

    fn start_with(tls: Option<Tls>, replicas: usize, aof: bool) -> OwnRedisCluster {
        let dir =
            std::env::temp_dir().join(format!("roomd-redis-cluster-{}", engine::Seed::from_os().unwrap().to_hex()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = OwnRedisCluster { members: Vec::new(), dir, tls, aof };
        for _ in 0..3 * (1 + replicas) {
            let port = free_port();
            cluster.members.push(Member { port, child: None, stopped: AtomicBool::new(false) });
            cluster.up(port);
        }
        let mut create = Command::new("redis-cli");
        if let Some(tls) = &cluster.tls {
            create.arg("--tls").arg("--cacert").arg(&tls.ca);
        }
        create.arg("--cluster").arg("create");
        for m in &cluster.members {
            create.arg(format!("127.0.0.1:{}", m.port));
        }
        let status = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        cluster.wait_healthy(Duration::from_secs(30));
        cluster
    }

    /// Starts (or restarts, with its node file: it rejoins) the process on `port`.
    pub fn up(&mut self, port: u16) {
        let data = self.dir.join(port.to_string());
        std::fs::create_dir_all(&data).unwrap();
        let mut cmd = Command::new("redis-server");
        match &self.tls {
            None => cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()]),
            Some(tls) => cmd
                .args(["--bind", "127.0.0.1", "--port", "0", "--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .args(["--tls-auth-clients", "no", "--tls-cluster", "yes", "--tls-replication", "yes"]),
        };
        let child = cmd
            .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
            // Quick failovers, and a replica that was stopped may still be promoted.
            .args(["--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0"])
            .args(if self.aof {
                ["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                ["--appendonly", "no", "--appendfsync", "everysec"]
            })
            .args(["--save", ""])
            .args(["--dir", data.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (./scripts/test installs it)");
        let member = self.members.iter_mut().find(|m| m.port == port).expect("a member of this cluster");
        member.child = Some(child);
        member.stopped.store(false, Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `ROOMD__REDIS__CLUSTER_URLS` for this cluster (every process as a seed).
    pub fn seeds(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        self.members.iter().map(|m| format!("{scheme}://127.0.0.1:{}/", m.port)).collect::<Vec<_>>().join(",")
    }

    /// The same seeds as a [`RedisTarget`], for a store of the test's own.
    pub fn target(&self) -> RedisTarget {
        RedisTarget::Cluster(self.seeds().split(',').map(str::to_owned).collect())
    }

    /// `redis-cli` against the member on `port`: its output, or `None` if it could not answer.
    pub fn cli(&self, port: u16, args: &[&str]) -> Option<String> {
        cli_on(self.tls.as_ref(), port, args)
    }

    pub fn ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.port).collect()
    }

    fn live_ports(&self) -> Vec<u16> {
        self.members
            .iter()
            .filter(|m| m.child.is_some() && !m.stopped.load(Ordering::Relaxed))
            .map(|m| m.port)
            .collect()
    }

    /// `CLUSTER NODES` as a live member sees it.
    pub fn nodes(&self) -> Vec<NodeLine> {
        for port in self.live_ports() {
            let Some(text) = self.cli(port, &["CLUSTER", "NODES"]) else { continue };
            return text.lines().filter_map(parse_node_line).collect();
        }
        panic!("no member of the Redis Cluster answers")
    }

    /// Waits until every slot has a master that is not failed and every master has a
    /// replica, as every live member sees it.
    pub fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let healthy = self.live_ports().iter().all(|port| {
                let Some(info) = self.cli(*port, &["CLUSTER", "INFO"]) else { return false };
                let Some(nodes) = self.cli(*port, &["CLUSTER", "NODES"]) else { return false };
                let nodes: Vec<NodeLine> = nodes.lines().filter_map(parse_node_line).collect();
                let masters: Vec<&NodeLine> = nodes.iter().filter(|n| n.master && !n.failed).collect();
                info.contains("cluster_state:ok")
                    && masters.iter().map(|m| m.slots.iter().map(|(a, b)| usize::from(b - a) + 1).sum::<usize>()).sum::<usize>() == 16384
                    && masters.iter().all(|m| nodes.iter().any(|r| !r.failed && r.master_id.as_deref() == Some(&m.id)))
                    // Every replica has finished its sync with its master.
                    && nodes.iter().filter(|n| !n.master && !n.failed && self.live_ports().contains(&n.port)).all(|r| {
                        self.cli(r.port, &["INFO", "replication"]).is_some_and(|i| i.contains("master_link_status:up"))
                    })
            });
            if healthy {
                return;
            }
            assert!(Instant::now() < deadline, "the Redis Cluster did not become healthy: {:?}", self.nodes());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The hash slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        let port = self.live_ports()[0];
        self.cli(port, &["CLUSTER", "KEYSLOT", key]).and_then(|s| s.parse().ok()).expect("CLUSTER KEYSLOT")
    }

    /// The master serving `slot` now, and its replica.
    pub fn shard_of(&self, slot: u16) -> (NodeLine, Option<NodeLine>) {
        let nodes = self.nodes();
        let master = nodes
            .iter()
            .find(|n| n.master && !n.failed && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .unwrap_or_else(|| panic!("no master serves slot {slot}: {nodes:?}"))
            .clone();
        let replica = nodes.iter().find(|n| !n.failed && n.master_id.as_deref() == Some(&master.id)).cloned();
        (master, replica)
    }

    /// `kill -sig` to the member on `port`; while it is stopped (`STOP` until `CONT`) the
    /// helpers here ask the other members only.
    pub fn signal(&self, port: u16, sig: &str) {
        let member = self.members.iter().find(|m| m.port == port).expect("a member");
        let child = member.child.as_ref().expect("running");
        assert!(kill_pid(child.id(), sig), "kill -{sig} redis {port}");
        match sig {
            "STOP" => member.stopped.store(true, Ordering::Relaxed),
            "CONT" => member.stopped.store(false, Ordering::Relaxed),
            _ => {}
        }
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self, port: u16) {
        if let Some(member) = self.members.iter_mut().find(|m| m.port == port) {
            if let Some(mut child) = member.child.take() {
                kill_pid(child.id(), "CONT");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Waits until `slot` is served by a master other than the one on `old` (one of its
    /// replicas promoted); returns the new master's port.
    pub fn wait_failed_over(&self, slot: u16, old: u16, within: Duration) -> u16 {
        let deadline = Instant::now() + within;
        loop {
            let nodes = self.nodes();
            let serving = nodes.iter().find(|n| {
                n.master && !n.failed && n.port != old && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            });
            if let Some(master) = serving {
                return master.port;
            }
            assert!(Instant::now() < deadline, "slot {slot} never failed over from redis {old}: {nodes:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs every member (the whole cluster down at once).
    pub fn kill_all(&mut self) {
        for port in self.ports() {
            self.kill(port);
        }
    }

    /// Starts every member that is not running (with its node file and AOF: the cluster
    /// as it was).
    pub fn up_all(&mut self) {
        for port in self.ports() {
            if self.members.iter().any(|m| m.port == port && m.child.is_none()) {
                self.up(port);
            }
        }
    }

    /// Waits until every member answers `cluster_state:ok`.
    pub fn wait_state_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self
            .ports()
            .iter()
            .all(|port| self.cli(*port, &["CLUSTER", "INFO"]).is_some_and(|info| info.contains("cluster_state:ok")))
        {
            assert!(Instant::now() < deadline, "the Redis Cluster never reached cluster_state:ok: {:?}", self.nodes());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the member on `port` is a replica whose link to its master is up.
    pub fn wait_replica_linked(&self, port: u16, within: Duration) {
        let deadline = Instant::now() + within;
        while !self
            .cli(port, &["INFO", "replication"])
            .is_some_and(|i| i.contains("role:slave") && i.contains("master_link_status:up"))
        {
            assert!(Instant::now() < deadline, "redis {port} never linked as a replica: {:?}", self.nodes());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the member on `port` serves as a master.
    pub fn wait_master(&self, port: u16, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.nodes().iter().any(|n| n.port == port && n.master && !n.failed) {
            assert!(Instant::now() < deadline, "redis {port} was never promoted: {:?}", self.nodes());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Moves `slot` (with its keys) to the master on `to`, as `redis-cli --cluster
    /// reshard` does it: importing/migrating, `MIGRATE` of every key, then the new owner
    /// announced to every master.
    pub fn move_slot(&self, slot: u16, to: u16) {
        let (from, _) = self.shard_of(slot);
        let nodes = self.nodes();
        let target = nodes.iter().find(|n| n.port == to && n.master).expect("the target is a master");
        let slot_s = slot.to_string();
        assert!(self.cli(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from.id]).is_some(), "importing");
        assert!(self.cli(from.port, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &target.id]).is_some(), "migrating");
        loop {
            let keys = self.cli(from.port, &["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"]).unwrap_or_default();
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", port.as_str(), "", "0", "5000", "KEYS"];
            args.extend(keys);
            assert!(self.cli(from.port, &args).is_some(), "MIGRATE of slot {slot}");
        }
        for master in nodes.iter().filter(|n| n.master && !n.failed) {
            self.cli(master.port, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &target.id]);
        }
    }

    /// Commands of `name` (`cmdstat_<name>` calls) run by all live masters so far.
    pub fn calls(&self, name: &str) -> u64 {
        let masters: Vec<u16> = self.nodes().iter().filter(|n| n.master && !n.failed).map(|n| n.port).collect();
        masters
            .iter()
            .filter_map(|port| self.cli(*port, &["INFO", "commandstats"]))
            .map(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                    .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }
}

fn parse_node_line(line: &str) -> Option<NodeLine> {
    let mut fields = line.split_whitespace();
    let id = fields.next()?.to_owned();
    let addr = fields.next()?;
    let port = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
    let flags: Vec<&str> = fields.next()?.split(',').collect();
    let master_id = fields.next().filter(|m| *m != "-").map(str::to_owned);
    let slots = fields
        .skip(4)
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|x| (x, x)),
        })
        .collect();
    Some(NodeLine {
        id,
        port,
        master: flags.contains(&"master"),
        // `fail`, `fail?` or `noaddr` (not `nofailover`).
        failed: flags.iter().any(|f| matches!(*f, "fail" | "fail?" | "noaddr")),
        master_id,
        slots,
    })
}

impl Drop for OwnRedisCluster {
    fn drop(&mut self) {
        for port in self.ports() {
            self.kill(port);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
