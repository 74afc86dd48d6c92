// What every browser test file shares: a real embedded roomd on a free loopback port,
// headless Debian Chromium (playwright-core), pages whose errors fail the test, the web
// client's login, and a runner that screenshots every page of a failed test.
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { randomBytes } from 'node:crypto';
import path from 'node:path';

export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const SHOTS = path.join(path.dirname(new URL(import.meta.url).pathname), 'screenshots');
export const PHONE = { width: 390, height: 844 };
export const DESKTOP = { width: 1280, height: 800 };
mkdirSync(SHOTS, { recursive: true });

/** An embedded roomd (memory store, its own secret, limits raised for one address). */
/** Resolves to `{child, base, log(), secret}` (`secret`: its token secret, to mint tokens). */
export function startRoomd(bin, extraEnv = {}) {
  const data = mkdtempSync(path.join(os.tmpdir(), 'roomd-e2e-'));
  process.on('exit', () => rmSync(data, { recursive: true, force: true }));
  const secret = randomBytes(32).toString('hex');
  const env = { ...process.env, ROOMD__HTTP__BIND: '127.0.0.1', ROOMD__HTTP__PORT: '0', ROOMD__LOG__FORMAT: 'json',
    ROOMD__AUTH__SECRET: secret, ROOMD__STORE__PATH: data, ROOMD__STORE__KIND: 'memory',
    ROOMD__HTTP__ADDR_RATE_PER_MIN: '100000', ROOMD__HTTP__ADDR_BURST: '100000', ROOMD__HTTP__ADDR_MAX_SOCKETS: '100000',
    ...extraEnv };
  delete env.ROOMD__REDIS__URL;
  const child = spawn(bin, [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`roomd did not print its address in 20 s:\n${log}`)), 20000);
    const onData = (buf) => {
      log += buf.toString();
      const m = log.match(/roomd listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) { clearTimeout(timer); resolve({ child, base: m[1], log: () => log, secret }); }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`roomd exited (${code}) before listening:\n${log}`)); });
  });
}

/** Stops a roomd of `startRoomd` (SIGTERM, SIGKILL after 3 s), if it still runs. */
export async function stopRoomd(roomd) {
  if (roomd && roomd.child.exitCode === null) {
    const gone = new Promise((r) => roomd.child.once('exit', r));
    roomd.child.kill('SIGTERM');
    const t = setTimeout(() => roomd.child.kill('SIGKILL'), 3000);
    await gone;
    clearTimeout(t);
  }
}

/** A browser and its pages; any page error or console error fails the test. */
export class Browser {
  constructor() { this.contexts = []; }

  async launch() {
    this.browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
    });
  }

  async page(viewport = PHONE) {
    const ctx = await this.browser.newContext({ viewport, locale: 'ko-KR' });
    this.contexts.push(ctx);
    const page = await ctx.newPage();
    page.setDefaultTimeout(15000);
    page.errors = [];
    page.on('pageerror', (e) => page.errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error') page.errors.push(`console.error: ${m.text()}`); });
    return page;
  }

  async close() {
    for (const c of this.contexts) await c.close().catch(() => {});
    await this.browser?.close().catch(() => {});
  }
}

/** Logs in through the web client's form: the new user's id. */
export async function login(base, page, name) {
  await page.goto(base + '/');
  await page.fill('#name', name);
  await page.click('#login');
  await page.waitForSelector('#create');
  return page.evaluate(() => JSON.parse(localStorage.getItem('roomd.session')).userId);
}

/** One HTTP call with the page's session token, made from the page: its JSON. */
export function call(page, method, p, body) {
  return page.evaluate(async ([method, p, body]) => {
    const token = JSON.parse(localStorage.getItem('roomd.session')).token;
    const r = await fetch(p, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body) });
    const json = await r.json().catch(() => null);
    if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${JSON.stringify(json)}`);
    return json;
  }, [method, p, body]);
}

/** Runs `tests` (`[name, fn]`) with roomd `bin`; exits 0 only if all pass and no page erred. */
export async function run(label, bin, tests, browser) {
  const t0 = Date.now();
  let failed = 0;
  let roomd;
  try {
    roomd = await startRoomd(bin);
    await browser.launch();
    for (const [name, fn] of tests) {
      const t = Date.now();
      try {
        await fn(roomd.base);
        const errors = browser.contexts.flatMap((c) => c.pages()).flatMap((p) => p.errors || []);
        if (errors.length) throw new Error(`page errors: ${errors.join(' | ')}`);
        console.log(`  ok   ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)`);
      } catch (e) {
        failed++;
        console.log(`  FAIL ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)\n       ${e.stack || e}`);
        let i = 0;
        for (const c of browser.contexts) for (const p of c.pages()) {
          await p.screenshot({ path: path.join(SHOTS, `FAIL-${label}-${i++}.png`) }).catch(() => {});
        }
      }
    }
  } catch (e) {
    failed++;
    console.log(`e2e ${label}: could not run: ${e.stack || e}`);
  } finally {
    await browser.close();
    await stopRoomd(roomd);
  }
  console.log(`e2e ${label}: ${tests.length - failed}/${tests.length} passed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  if (failed && roomd) console.log('--- roomd log (tail) ---\n' + roomd.log().split('\n').slice(-30).join('\n'));
  process.exit(failed ? 1 : 0);
}
