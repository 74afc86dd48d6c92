// Starts a real roomd for the tests: the cargo-built binary, embedded mode, port 0, its own
// token secret. ROOMD_BIN overrides the binary (default: <repo>/target/debug/roomd).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
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

/** `{base, stop(), log()}` of a fresh embedded roomd on a free loopback port. */
export function startRoomd(extraEnv = {}) {
  const env = {
    ...process.env,
    ROOMD__HTTP__BIND: '127.0.0.1',
    ROOMD__HTTP__PORT: '0',
    ROOMD__AUTH__SECRET: randomBytes(32).toString('hex'),
    ROOMD__STORE__KIND: 'memory',
    ROOMD__LOG__FORMAT: 'json',
    ROOMD__LOG__LEVEL: 'warn,gateway=info',
    // The tests open many sessions and sockets from one address.
    ROOMD__HTTP__ADDR_RATE_PER_MIN: '100000',
    ROOMD__HTTP__ADDR_BURST: '100000',
    ROOMD__HTTP__ADDR_MAX_SOCKETS: '100000',
    ...extraEnv,
  };
  delete env.ROOMD__REDIS__URL;
  const child = spawn(roomdBin(), [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill(); reject(new Error(`roomd did not print its address in 20 s:\n${log}`)); }, 20000);
    const onData = (buf) => {
      log += buf.toString();
      const m = log.match(/roomd listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({
          base: m[1],
          log: () => log,
          stop: () => new Promise((done) => { child.once('exit', done); child.kill('SIGKILL'); }),
        });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`roomd exited (${code}) before listening:\n${log}`)); });
  });
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
