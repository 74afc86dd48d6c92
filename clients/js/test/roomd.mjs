// Starts real roomd processes for the tests: the cargo-built binary, an embedded node
// (port 0, its own token secret) or cluster nodes on a shared Redis. ROOMD_BIN overrides
// the binary (default: <repo>/target/debug/roomd).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '../../..');

export function roomdBin() {
  const target = process.env.CARGO_TARGET_DIR ? path.resolve(repo, process.env.CARGO_TARGET_DIR) : path.join(repo, 'target');
  const bin = process.env.ROOMD_BIN || path.join(target, 'debug', 'roomd');
  if (!existsSync(bin)) throw new Error(`no roomd binary at ${bin}: run \`cargo build -p gateway\` or set ROOMD_BIN`);
  return bin;
}

/** Settings every test node has: loopback only, JSON logs, per-address limits that never bite. */
const TEST_ENV = {
  ROOMD__HTTP__BIND: '127.0.0.1',
  ROOMD__HTTP__PORT: '0',
  ROOMD__LOG__FORMAT: 'json',
  ROOMD__LOG__LEVEL: 'warn,gateway=info',
  // The tests open many sessions and sockets from one address.
  ROOMD__HTTP__ADDR_RATE_PER_MIN: '100000',
  ROOMD__HTTP__ADDR_BURST: '100000',
  ROOMD__HTTP__ADDR_MAX_SOCKETS: '100000',
};

/**
 * Starts roomd with `env` (the whole environment) and resolves once it prints its
 * address: `{base, pid, log(), signal(sig), exited, stop()}`. `exited` resolves with the
 * exit code when the process ends; `stop()` kills it (SIGKILL) unless it has ended.
 */
function spawnRoomd(env, name = 'roomd') {
  const child = spawn(roomdBin(), [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  let done = false;
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => { done = true; resolve(code ?? signal); }));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`${name} did not print its address in 20 s:\n${log}`)); }, 20000);
    let listening = false;
    const onData = (buf) => {
      log += buf.toString();
      const m = !listening && log.match(/roomd listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        listening = true;
        clearTimeout(timer);
        resolve({
          base: m[1],
          pid: child.pid,
          log: () => log,
          exited,
          signal: (sig) => { if (!done) child.kill(sig); },
          stop: async () => {
            if (!done) child.kill('SIGKILL');
            await exited;
          },
        });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    void exited.then((code) => { clearTimeout(timer); if (!listening) reject(new Error(`${name} exited (${code}) before listening:\n${log}`)); });
  });
}

/** `{base, stop(), log()}` of a fresh embedded roomd on a free loopback port. */
export function startRoomd(extraEnv = {}) {
  const env = {
    ...process.env,
    ...TEST_ENV,
    ROOMD__AUTH__SECRET: randomBytes(32).toString('hex'),
    ROOMD__STORE__KIND: 'memory',
    ...extraEnv,
  };
  delete env.ROOMD__REDIS__URL;
  delete env.ROOMD__REDIS__CLUSTER_URLS;
  return spawnRoomd(env);
}

/** The Redis the cluster tests share: `REDIS_URL` (scripts/test starts a private one). */
export function redisUrl() {
  const url = process.env.REDIS_URL;
  if (!url) {
    throw new Error('REDIS_URL is not set: the cluster tests need a Redis only the tests use '
      + '(scripts/test starts one; or REDIS_URL=redis://127.0.0.1:PORT/ scripts/sdk-test)');
  }
  return url;
}

/** A free TCP port on loopback (nothing listens on it once this resolves). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * A cluster's settings shared by its nodes: the Redis (`REDIS_URL`), a key prefix of its
 * own (so runs and tests never share rooms or membership) and one token secret.
 */
export function newCluster() {
  return {
    redis: redisUrl(),
    prefix: `sdk-${randomBytes(8).toString('hex')}`,
    secret: randomBytes(32).toString('hex'),
  };
}

/**
 * Starts cluster node `id` of `cluster` (from [`newCluster`]) on a free loopback port,
 * with `ROOMD__NODE__PUBLIC_URL` set to its own address (`publicUrl` overrides it, e.g.
 * a closed port), so room info names it as `nodeUrl`. Short leases and drain grace, as
 * the Rust cluster tests use. `{id, base, publicUrl, …}` plus what [`spawnRoomd`] gives.
 */
export async function startClusterNode(cluster, id, { publicUrl, env = {} } = {}) {
  // The node must know its own address before it starts: choose the port here.
  const port = await freePort();
  const own = `http://127.0.0.1:${port}`;
  const settings = {
    ...process.env,
    ...TEST_ENV,
    ROOMD__HTTP__PORT: String(port),
    ROOMD__NODE__ID: id,
    ROOMD__NODE__PUBLIC_URL: publicUrl ?? own,
    ROOMD__REDIS__URL: cluster.redis,
    ROOMD__REDIS__PREFIX: cluster.prefix,
    ROOMD__AUTH__SECRET: cluster.secret,
    ROOMD__CLUSTER__LEASE_MS: '1500',
    ROOMD__CLUSTER__HEARTBEAT_MS: '300',
    ROOMD__CLUSTER__DRAIN_GRACE_S: '6',
    ROOMD__ROOMS__MAX_OPEN_PER_USER: '100',
    ROOMD__ROOMS__MAX_WAITING_SEATS_PER_USER: '1000',
    ROOMD__WS__RATE_PER_S: '1000',
    ROOMD__WS__BURST: '1000',
    ...env,
  };
  delete settings.ROOMD__REDIS__CLUSTER_URLS;
  delete settings.ROOMD__STORE__KIND;
  const node = await spawnRoomd(settings, `node ${id}`);
  if (node.base !== own) {
    await node.stop();
    throw new Error(`node ${id} listens on ${node.base}, not ${own}`);
  }
  return { ...node, id, publicUrl: settings.ROOMD__NODE__PUBLIC_URL.replace(/\/+$/, '') };
}

/** Waits until every node's `/readyz` counts `nodes.length` live nodes. */
export async function untilAllSee(nodes, ms = 20000) {
  for (const node of nodes) {
    await until(`${node.id} to see ${nodes.length} live nodes`, async () => {
      try {
        const r = await fetch(`${node.base}/readyz`);
        const body = await r.json();
        return body.liveNodes === nodes.length;
      } catch {
        return false;
      }
    }, ms);
  }
}

/** Polls `fn` until it returns a truthy value; bounded by `ms`. */
export async function until(what, fn, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The next event `event` of `emitter` that passes `pred`, within `ms`. */
export function next(emitter, event, pred = () => true, ms = 10000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { off(); reject(new Error(`no ${event} within ${ms} ms`)); }, ms);
    const off = emitter.on(event, (v) => {
      if (!pred(v)) return;
      clearTimeout(timer);
      off();
      resolve(v);
    });
  });
}
