// Browser test of the operator console (/admin): headless Chromium (playwright-core)
// against a real embedded roomd. An operator kicks a player (and lets them back) and
// closes a running room through the console (each behind its confirmation), and sees the
// result there and on the players' own pages. Usage: node admin.mjs /path/to/roomd
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { startRoomd as startEmbedded, stopRoomd } from './harness.mjs';

const ROOMD = process.argv[2];
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = path.join(path.dirname(new URL(import.meta.url).pathname), 'screenshots');
const ADMIN = 'e2e-operator-token-7f3a-0123456789abcdef';
mkdirSync(SHOTS, { recursive: true });

/** An embedded roomd with an operator token (`harness.mjs`). */
function startRoomd() {
  return startEmbedded(ROOMD, { ROOMD__ADMIN__TOKEN: ADMIN });
}

let browser;
let base;
const contexts = [];

/**
 * A page; its uncaught exceptions and console errors fail the test. The operator console
 * (`ops`) is told 401 and 404 by design (a wrong token; a room closed between two of its
 * refreshes), which Chromium logs as "Failed to load resource": only those are allowed
 * there, never on a player's page.
 */
async function newPage(viewport = { width: 390, height: 844 }, { ops = false } = {}) {
  const ctx = await browser.newContext({ viewport, locale: 'ko-KR' });
  contexts.push(ctx);
  const page = await ctx.newPage();
  page.setDefaultTimeout(15000);
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (ops && /^Failed to load resource: the server responded with a status of 40[14] /.test(m.text())) return;
    page.errors.push(`console.error: ${m.text()}`);
  });
  return page;
}

async function login(page, name) {
  await page.goto(base + '/');
  await page.fill('#name', name);
  await page.click('#login');
  await page.waitForSelector('#create');
  return page.evaluate(() => JSON.parse(localStorage.getItem('roomd.session')).userId);
}

async function toastShows(page, text) {
  await page.waitForFunction((t) => document.querySelector('#toast')?.textContent.includes(t), text);
}

async function operatorKicksAndCloses() {
  const host = await newPage();
  const guest = await newPage();
  await login(host, '방장');
  const guestId = await login(guest, '손님');
  // The example game is listed with ?dev only; its options are folded away.
  await host.goto(base + '/?dev#/');
  await host.waitForSelector('#create');
  await host.selectOption('#game', 'tally');
  await host.locator('#opts').evaluate((d) => { d.open = true; });
  await host.selectOption('select[data-key="target"]', JSON.stringify(100));
  await host.click('#create');
  await host.waitForSelector('#seats');
  const room = await host.evaluate(() => window.__roomd.screen.room);
  await guest.goto(`${base}/#/room/${room}`);
  await guest.click('#sit');
  await host.waitForFunction(() => document.querySelectorAll('#seats li').length === 2);

  // The console: token, then the room in the list with its owner node and players.
  const ops = await newPage({ width: 1280, height: 900 }, { ops: true });
  await ops.goto(base + '/admin');
  await ops.fill('#token', ADMIN);
  await ops.click('#token-save');
  await ops.waitForSelector('#nodes tbody tr');
  const row = ops.locator(`#rooms tbody tr[data-room="${room}"]`);
  await row.waitFor();
  assert.match(await row.locator('.r-players').textContent(), /^2 /);
  await row.click();
  await ops.waitForSelector(`#d-seats button.kick[data-user="${guestId}"]`);

  // Kick the guest, with a reason, behind a confirmation: cancelling first changes nothing.
  await ops.fill('#d-reason', '욕설 신고');
  await ops.click(`#d-seats button.kick[data-user="${guestId}"]`);
  await ops.click('#confirm-no');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await host.locator('#seats li').count(), 2, 'cancelled kick changed the room');
  await ops.click(`#d-seats button.kick[data-user="${guestId}"]`);
  await ops.screenshot({ path: path.join(SHOTS, 'admin-01-confirm-kick.png') });
  await ops.click('#confirm-yes');
  await toastShows(guest, '욕설 신고');
  await host.waitForFunction(() => document.querySelectorAll('#seats li').length === 1);
  await ops.waitForFunction((u) => !document.querySelector(`#d-seats button.kick[data-user="${u}"]`), guestId);
  await ops.waitForSelector(`#d-kicked button.unkick[data-user="${guestId}"]`);
  await ops.waitForFunction(() => document.querySelector('#status').textContent.includes('내보냈어요'));
  // The guest cannot come back to this room.
  await guest.goto(`${base}/#/`);
  await guest.waitForSelector('#create');
  // (Asked from here, not from the page: the refusal is the point, not a page error.)
  const guestToken = await guest.evaluate(() => JSON.parse(localStorage.getItem('roomd.session')).token);
  const res = await fetch(`${base}/api/rooms/${room}/seats`, { method: 'POST', headers: { Authorization: `Bearer ${guestToken}`, 'Content-Type': 'application/json' }, body: '{}' });
  const back = [res.status, (await res.json()).code];
  assert.deepEqual(back, [403, 'kicked']);
  // The operator lets the guest back (behind a confirmation): the console lists them no
  // more, and the room no longer refuses them (asked with a GET that changes nothing).
  await ops.screenshot({ path: path.join(SHOTS, 'admin-01b-kicked-user.png') });
  await ops.setViewportSize({ width: 390, height: 844 });
  await ops.locator('#d-kicked').scrollIntoViewIfNeeded();
  await ops.screenshot({ path: path.join(SHOTS, 'admin-01c-kicked-user-390.png') });
  await ops.setViewportSize({ width: 1280, height: 900 });
  await ops.click(`#d-kicked button.unkick[data-user="${guestId}"]`);
  await ops.click('#confirm-yes');
  await ops.waitForFunction((u) => !document.querySelector(`#d-kicked button.unkick[data-user="${u}"]`), guestId);
  await ops.waitForFunction(() => document.querySelector('#status').textContent.includes('다시 들어올 수 있어요'));
  const after = await fetch(`${base}/api/rooms/${room}`, { headers: { Authorization: `Bearer ${guestToken}` } });
  assert.equal(after.status, 200);
  assert.ok(!((await after.json()).kicked || []).includes(guestId), 'the guest is no longer listed as kicked');

  // The host plays alone; the console's live refresh shows the game and its seq.
  await host.click('#start');
  await host.waitForSelector('#bump');
  await host.click('#bump');
  await host.waitForFunction(() => document.querySelector('#count')?.textContent === '1');
  await ops.waitForFunction(() => document.querySelector('#d-info')?.dataset.status === 'playing');
  await ops.waitForFunction((r) => document.querySelector(`#rooms tbody tr[data-room="${r}"] .r-seq`)?.textContent === '1', room);
  await ops.waitForFunction(() => document.querySelector('#d-recent').textContent.includes('client:bump'));
  await ops.screenshot({ path: path.join(SHOTS, 'admin-02-room-detail.png') });

  // Close the running room: the host sees the game end with the reason.
  await ops.fill('#d-reason', '서버 점검');
  await ops.click('#d-close');
  await ops.click('#confirm-yes');
  await host.waitForSelector('#result');
  await toastShows(host, '서버 점검');
  assert.match(await host.locator('#result').textContent(), /서버 점검/);
  await host.screenshot({ path: path.join(SHOTS, 'admin-03-player-after-close.png') });
  await ops.waitForFunction((r) => !document.querySelector(`#rooms tbody tr[data-room="${r}"]`), room);
  await ops.waitForFunction(() => document.querySelector('#detail').hidden);
  await ops.screenshot({ path: path.join(SHOTS, 'admin-04-console-after-close.png') });
  for (const p of [host, guest, ops]) assert.deepEqual(p.errors, [], 'page errors');
}

/** At 390 px: the page does not scroll sideways and every table header is one line. */
async function fitsPhone(ops, what) {
  const l = await ops.evaluate(() => ({
    scroll: document.scrollingElement.scrollWidth,
    width: window.innerWidth,
    wrapped: [...document.querySelectorAll('th')].filter((th) => th.textContent.trim() && th.getClientRects().length).filter((th) => {
      const r = document.createRange();
      r.selectNodeContents(th);
      return new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size > 1;
    }).map((th) => th.textContent),
  }));
  assert.ok(l.scroll <= l.width, `${what}: the page is ${l.scroll}px wide at ${l.width}px`);
  assert.deepEqual(l.wrapped, [], `${what}: headers on more than one line`);
}

/**
 * An operator closes a waiting room from a phone (issue #59): a wrong token's warning is
 * gone after the right one, the console says the room is closed (not a red "없는 방이에요"),
 * and the host's waiting room says it is closed, with 시작 disabled.
 */
async function closeWaitingRoomOnPhone() {
  const host = await newPage();
  await login(host, '방장2');
  await host.goto(base + '/?dev#/');
  await host.waitForSelector('#create');
  await host.selectOption('#game', 'tally');
  await host.click('#create');
  await host.waitForSelector('#seats');
  const room = await host.evaluate(() => window.__roomd.screen.room);
  assert.ok(await host.locator('#start').isEnabled());

  const ops = await newPage({ width: 390, height: 844 }, { ops: true });
  await ops.goto(base + '/admin');
  await ops.fill('#token', 'a-mistyped-token');
  await ops.click('#token-save');
  await ops.waitForFunction(() => document.querySelector('#status').textContent.includes('토큰'));
  await ops.waitForSelector('#login:not([hidden])');
  await ops.fill('#token', ADMIN);
  await ops.click('#token-save');
  const row = ops.locator(`#rooms tbody tr[data-room="${room}"]`);
  await row.waitFor();
  await ops.waitForFunction(() => Number(document.body.dataset.refreshed) > 0);
  assert.doesNotMatch(await ops.textContent('#status'), /토큰이 필요/, 'the last token\'s warning is still shown');
  await fitsPhone(ops, 'the console');
  await ops.screenshot({ path: path.join(SHOTS, 'admin-05-console-390.png'), fullPage: true });
  await row.click();
  await ops.waitForSelector('#detail:not([hidden])');
  await fitsPhone(ops, 'the console with a room open');
  await ops.fill('#d-reason', '점검');
  await ops.click('#d-close');
  await ops.click('#confirm-yes');
  await ops.waitForFunction(() => document.querySelector('#detail').hidden);
  // Two refreshes later the console still says the room is closed, not an error.
  const at = Number(await ops.evaluate(() => document.body.dataset.refreshed));
  await ops.waitForFunction((t) => Number(document.body.dataset.refreshed) > t + 2000, at, { timeout: 10000 });
  const st = await ops.evaluate(() => ({ text: document.querySelector('#status').textContent, error: document.querySelector('#status').classList.contains('error') }));
  assert.ok(!st.error && /닫았어요/.test(st.text) && !/없는 방/.test(st.text), `the console after the close: ${JSON.stringify(st)}`);
  await ops.screenshot({ path: path.join(SHOTS, 'admin-06-console-after-close-390.png'), fullPage: true });

  // The host's waiting room is marked closed, and 시작 cannot be pressed.
  await host.waitForSelector('#room-closed');
  assert.match(await host.textContent('#room-closed'), /닫혔어요.*점검/);
  assert.ok(await host.locator('#start').isDisabled(), '시작 is still enabled in a closed room');
  await host.screenshot({ path: path.join(SHOTS, 'admin-07-player-waiting-room-closed.png') });
  for (const p of [host, ops]) assert.deepEqual(p.errors, [], 'page errors');
}

async function wrongTokenIsRefused() {
  const ops = await newPage({ width: 1280, height: 900 }, { ops: true });
  await ops.goto(base + '/admin');
  await ops.fill('#token', 'not-the-token');
  await ops.click('#token-save');
  await ops.waitForSelector('#login:not([hidden])');
  assert.ok(await ops.locator('#console').isHidden());
  assert.deepEqual(ops.errors, [], 'page errors');
}

const TESTS = [
  ['admin console: an operator kicks a player and closes a running room', operatorKicksAndCloses],
  ['admin console: a wrong token gets nothing', wrongTokenIsRefused],
  ['admin console on a phone: a waiting room closed, seen on the console and by its host', closeWaitingRoomOnPhone],
];

let failed = 0;
let roomd;
const t0 = Date.now();
try {
  roomd = await startRoomd();
  base = roomd.base;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  for (const [name, fn] of TESTS) {
    const t = Date.now();
    try {
      await fn();
      console.log(`  ok   ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)`);
    } catch (e) {
      failed++;
      console.log(`  FAIL ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)\n       ${e.stack || e}`);
      let i = 0;
      for (const c of contexts) for (const p of c.pages()) {
        await p.screenshot({ path: path.join(SHOTS, `FAIL-admin-${i++}.png`) }).catch(() => {});
        if (p.errors?.length) console.log(`       page errors: ${p.errors.join(' | ')}`);
      }
    }
  }
} catch (e) {
  failed++;
  console.log(`e2e admin: could not run: ${e.stack || e}`);
} finally {
  for (const c of contexts) await c.close().catch(() => {});
  await browser?.close().catch(() => {});
  await stopRoomd(roomd);
}
console.log(`e2e admin: ${TESTS.length - failed}/${TESTS.length} passed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
if (failed && roomd) console.log('--- roomd log (tail) ---\n' + roomd.log().split('\n').slice(-30).join('\n'));
process.exit(failed ? 1 : 0);
