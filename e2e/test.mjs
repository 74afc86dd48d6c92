// Browser tests of the roomd web client: headless Debian Chromium (playwright-core)
// against a real roomd on a free loopback port. Usage: node test.mjs /path/to/roomd
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { createHmac } from 'node:crypto';
import path from 'node:path';
import assert from 'node:assert/strict';
import { startRoomd as startEmbedded, stopRoomd } from './harness.mjs';

const ROOMD = process.argv[2];
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = path.join(path.dirname(new URL(import.meta.url).pathname), 'screenshots');
const PHONE = { width: 390, height: 844 };
const DESKTOP = { width: 1280, height: 800 };
const SIZES = [PHONE, DESKTOP];
mkdirSync(SHOTS, { recursive: true });

// ---- roomd ---------------------------------------------------------------------------

/** An embedded roomd (`harness.mjs`); keeps its token secret for `mint`. */
async function startRoomd() {
  const started = await startEmbedded(ROOMD);
  secret = started.secret;
  return started;
}

// ---- helpers -------------------------------------------------------------------------

let browser;
let base;
/** roomd's token secret: a login service of our own can mint tokens, as PROTOCOL.md allows. */
let secret;

/** An HS256 token with `claims`, signed like a login service sharing roomd's secret. */
function mint(claims) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${b64({ typ: 'JWT', alg: 'HS256' })}.${b64(claims)}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}
const contexts = [];
/** Every page opened; the runner fails a test whose pages logged any error. */
const pages = [];

async function newPage(viewport = PHONE) {
  const ctx = await browser.newContext({ viewport, deviceScaleFactor: 1, locale: 'ko-KR' });
  contexts.push(ctx);
  if (process.env.E2E_STATIC_FROM_DISK) {
    // For working on the client: serve gateway/static/ from disk instead of the copy
    // embedded in roomd, so an edit needs no rebuild. The default tests the binary.
    const dir = path.join(path.dirname(SHOTS), '..', 'gateway', 'static');
    const types = { '.js': 'text/javascript', '.css': 'text/css', '.html': 'text/html' };
    await ctx.route((u) => u.pathname === '/' || u.pathname.startsWith('/static/'), (route) => {
      const p = new URL(route.request().url()).pathname;
      const file = p === '/' ? path.join(dir, 'index.html') : path.join(dir, p.slice('/static/'.length));
      return route.fulfill({ path: file, contentType: `${types[path.extname(file)] || 'application/octet-stream'}; charset=utf-8` });
    });
  }
  const page = await ctx.newPage();
  page.setDefaultTimeout(15000);
  page.errors = [];
  // Any uncaught exception or console error fails the test that opened the page.
  page.on('pageerror', (e) => page.errors.push(`pageerror: ${e.stack || e}`));
  page.on('console', (m) => { if (m.type() === 'error') page.errors.push(`console.error: ${m.text()}`); });
  pages.push(page);
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`) });
}

async function login(page, name, shotName) {
  await page.goto(base + '/');
  await page.fill('#name', name);
  if (shotName) await shot(page, shotName);
  await page.click('#login');
  await page.waitForSelector('#create');
}

/** The current room view the page shows (null before the first sync). */
const view = (page) => page.evaluate(() => window.__roomd.screen?.view ?? null);
const roomResult = (page) => page.evaluate(() => window.__roomd.screen?.result ?? null);

async function until(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function createRoom(page, game, options) {
  await page.selectOption('#game', game);
  if (Object.keys(options).length) await page.locator('#opts').evaluate((d) => { d.open = true; });
  for (const [k, v] of Object.entries(options)) await page.selectOption(`select[data-key="${k}"]`, JSON.stringify(v));
  await page.click('#create');
  await page.waitForSelector('#seats');
  return page.evaluate(() => window.__roomd.screen.room);
}

async function addBotsAndStart(page, n, shotName, start = true) {
  for (let i = 0; i < n; i++) {
    const before = await page.locator('#seats li').count();
    await page.click('#add-bot');
    await page.waitForFunction((c) => document.querySelectorAll('#seats li').length === c, before + 1);
  }
  if (shotName) await shot(page, shotName);
  if (!start) return;
  await page.click('#start');
  await page.waitForSelector('#board');
}

const me = (page) => page.evaluate(() => JSON.parse(localStorage.getItem('roomd.session')).userId);

/**
 * Card flights (spec §9): records every Element.animate on an element with a
 * data-flight in window.__flights. Set window.__hold to a flight's name and the next
 * such flight stops half-way (window.__held), for a screenshot of the card in the air.
 */
async function hookFlights(page) {
  await page.addInitScript(() => {
    window.__flights = [];
    window.__hold = null;
    window.__held = null;
    const animate = Element.prototype.animate;
    Element.prototype.animate = function (frames, opts) {
      const a = animate.call(this, frames, opts);
      const kind = this.dataset?.flight;
      if (kind) {
        window.__flights.push(kind);
        if (window.__hold === kind) {
          window.__hold = null;
          a.pause();
          a.currentTime = (typeof opts === 'number' ? opts : opts.duration) / 2;
          window.__held = a;
        }
      }
      return a;
    };
  });
}

const flights = (page) => page.evaluate(() => window.__flights || []);

/**
 * Holds the next `kind` flight half-way while `step` (called until the flight runs)
 * plays on, checks the flying card is on screen, takes `name`, and lets it land.
 */
async function catchFlight(page, kind, name, step, ms = 60000) {
  await page.evaluate((k) => { window.__hold = k; window.__held = null; }, kind);
  await until(`a ${kind} flight`, async () => {
    if (await page.evaluate(() => !!window.__held)) return true;
    await step();
    return false;
  }, ms);
  const box = await page.locator(`.flight[data-flight="${kind}"]`).first().boundingBox();
  const size = page.viewportSize();
  assert.ok(box && box.x >= -1 && box.x + box.width <= size.width + 1 && box.y >= -1 && box.y + box.height <= size.height + 1,
    `the ${kind} card flies on screen: ${JSON.stringify(box)}`);
  await shot(page, name);
  await page.evaluate(() => { window.__held.finish(); window.__held = null; });
}

/** One wrong ring of mine (Space on a table without five), when the bell can be rung. */
async function wrongRing(page) {
  const v = await view(page);
  if (!v || v.phase !== 'playing' || fiveOnTable(v) || !(await page.locator('#bell').isEnabled())) return;
  await page.keyboard.press('Space');
  await page.waitForTimeout(150);
}

function fiveOnTable(v) {
  const t = {};
  for (const p of Object.values(v.players)) if (p.top && p.active) t[p.top.fruit] = (t[p.top.fruit] || 0) + p.top.count;
  return Object.values(t).includes(5);
}

// ---- tests ---------------------------------------------------------------------------

const state = {};

async function halliGalli() {
  const page = await newPage();
  await hookFlights(page);
  await login(page, '도윤', '01-login');
  // The logo is a drawing that ships with the page, not an emoji that needs a font.
  assert.equal(await page.locator('#home svg').count(), 1, 'the logo is an inline drawing');
  assert.ok(!(await page.textContent('#home')).includes('🃏'));
  // Korean breaks between words, never inside one; a long run still wraps.
  assert.deepEqual(await page.evaluate(() => [getComputedStyle(document.body).wordBreak, getComputedStyle(document.body).overflowWrap]), ['keep-all', 'anywhere']);
  await shot(page, '02-lobby');
  await page.locator('#opts summary').click();
  await fitsAndApart(page, '#opts label.opt > *', 'the lobby options');
  await shot(page, '02b-lobby-options');
  // One-on-one with a bot; a wrong ring costs a card at once (no lock), so ringing wrongly
  // on purpose knocks me out. Nothing the bot does can end the game early: its wrong
  // rings only give me cards (no duelWrongLoses: a bot's random mistake used to end the
  // game before the reload step, the flaky failures).
  const room = await createRoom(page, 'halli-galli', { wrongRingLockoutMs: 0, flipGuardMs: 400 });
  // Alone in the room: 시작 is disabled, and the page says why.
  assert.ok(await page.locator('#start').isDisabled());
  assert.match(await page.textContent('#start-hint'), /2명부터 시작할 수 있어요/);
  await addBotsAndStart(page, 1, '03-hg-waiting-room');
  await until('playing', async () => (await view(page))?.phase === 'playing', 15000);

  // The bell is the only ring target and big: ≥ 40% of the width (min 120 px).
  const bell = await page.locator('#bell').boundingBox();
  assert.ok(bell.width >= Math.max(120, PHONE.width * 0.4), `bell is ${bell.width}px wide`);
  assert.equal(await page.locator('.hg-seat').count(), 2);
  await boardApartAtBothSizes(page, 'halli-galli', 'the halli galli board', PHONE, '04-hg-board-at');

  // Flip by keyboard (Enter) on my turn, then by clicking on my next turn.
  for (const how of ['key', 'click']) {
    const v0 = await until('my turn', async () => { const v = await view(page); return v?.canFlip && v; }, 15000);
    if (how === 'key') await page.keyboard.press('Enter'); else await page.click('#flip');
    await until(`my ${how} flip to land`, async () => (await view(page)).tableVersion > v0.tableVersion, 5000);
  }
  await shot(page, '04-hg-board');

  // Spectate from a second browser: the lobby lists the running room.
  const spec = await newPage();
  await login(spec, '관전자');
  await spec.click(`#playing-rooms li[data-room="${room}"] button`);
  await spec.waitForSelector('#spectating');
  await spec.waitForSelector('.hg-seat[data-player]');
  assert.equal(await spec.locator('.hg-seat').count(), 2);
  assert.ok(await spec.locator('#bell').isDisabled(), 'a spectator cannot ring');
  assert.equal(await spec.locator('#flip').count(), 0, 'a spectator has no flip button');
  assert.equal(await spec.locator('#hg-keys').count(), 0, 'no keyboard hint for a spectator');
  await shot(spec, '05-hg-spectator');

  // Reload mid-game: the page comes back to the same game and can still act.
  await page.reload();
  await page.waitForSelector('.hg-seat[data-player]');
  const after = await until('view after reload', () => view(page));
  assert.equal(after.phase, 'playing');
  const vt = await until('my turn after reload', async () => { const v = await view(page); return v?.canFlip && v; }, 15000);
  await page.keyboard.press('Enter');
  await until('flip after reload', async () => (await view(page)).tableVersion > vt.tableVersion, 5000);
  await shot(page, '06-hg-after-reload');

  // A wrong ring's penalty card flies from my pile to the bot's (spec §9), at both sizes.
  await catchFlight(page, 'hg-penalty', '25-hg-penalty-flight-390', () => wrongRing(page));
  await page.setViewportSize(DESKTOP);
  await page.waitForTimeout(150);
  await catchFlight(page, 'hg-penalty', '25-hg-penalty-flight-1280', () => wrongRing(page));
  await page.setViewportSize(PHONE);

  // Ring wrongly on purpose (Space, then clicks) until I am knocked out: the game ends.
  let rings = 0;
  await until('the game to end', async () => {
    if (await roomResult(page)) return true;
    const v = await view(page);
    if (!v || v.phase !== 'playing' || fiveOnTable(v) || !(await page.locator('#bell').isEnabled())) return false;
    if (rings++ % 2 === 0) await page.keyboard.press('Space'); else await page.click('#bell', { timeout: 1000 }).catch(() => {});
    await page.waitForTimeout(120);
    return false;
  }, 60000);
  await page.waitForSelector('#result');
  // Knocked out: the result says so; the ranking is numbered once, 1위 then 2위.
  assert.match(await page.textContent('#knocked-out'), /^탈락했어요\. /);
  assert.equal(await page.locator('#ranking li').count(), 2);
  assert.deepEqual(await page.locator('#ranking li .rank').allTextContents(), ['1위', '2위']);
  assert.equal(await page.locator('#result ol').count(), 0, 'the ranking is not numbered twice');
  assert.ok((await page.textContent('#ranking li:last-child')).includes('(나)'));
  assert.match(await page.textContent('#points-help'), /1위 3점/);
  const summary = await page.textContent('#summary');
  assert.ok(summary.length > 0 && !/\b(u|bot)_[0-9a-z_]+/.test(summary), `the summary names players: ${summary}`);
  await page.waitForTimeout(200);
  await shot(page, '07-hg-result');
  // The spectator sees the end too, without a replay button (replays are the players').
  await spec.waitForSelector('#result');
  assert.equal(await spec.locator('#to-replay').count(), 0);
  assert.ok(await spec.locator('#replay-note').isVisible());
  // Halli Galli has no hands: the note gives the spectator no reason about hands.
  assert.doesNotMatch(await spec.textContent('#replay-note'), /손패|hand/i);
  await shot(spec, '07b-hg-result-spectator');

  // Replay: first / previous / next / last, slider and keys.
  await page.click('#to-replay');
  await page.waitForSelector('#rp-label');
  const label = () => page.textContent('#rp-label');
  assert.match(await label(), /^1번째 \/ 전체 \d+번$/);
  const total = Number((await label()).match(/전체 (\d+)번/)[1]);
  assert.ok(total > 5, `the replay has ${total} scenes`);
  await page.keyboard.press('End');
  assert.equal(await label(), `${total}번째 / 전체 ${total}번`);
  await page.keyboard.press('ArrowLeft');
  assert.equal(await label(), `${total - 1}번째 / 전체 ${total}번`);
  await page.keyboard.press('Home');
  await page.click('#rp-next');
  await page.click('#rp-next');
  assert.equal(await label(), `3번째 / 전체 ${total}번`);
  await page.click('#rp-prev');
  assert.equal(await label(), `2번째 / 전체 ${total}번`);
  await page.click('#rp-last');
  assert.equal(await label(), `${total}번째 / 전체 ${total}번`);
  await page.locator('#rp-slider').fill(String(Math.floor(total / 2)));
  assert.equal(await label(), `${Math.floor(total / 2) + 1}번째 / 전체 ${total}번`);
  await page.click('#rp-first');
  await page.click('#rp-play');
  await until('playback to advance', async () => (await label()).startsWith('3번째'), 5000);
  await page.click('#rp-play');
  await page.keyboard.press('End');
  assert.equal(await page.locator('.hg-seat').count(), 2);
  assert.ok(!(await page.textContent('#board')).includes('null'), 'no stray null on the board');
  // Read-only: no bell to ring, no flip, no keyboard hint; Space and Enter do nothing.
  assert.ok(await page.locator('#bell').isDisabled());
  assert.equal(await page.locator('#flip').count(), 0);
  assert.equal(await page.locator('#hg-keys').count(), 0);
  await page.keyboard.press('Space');
  await page.keyboard.press('Enter');
  assert.doesNotMatch(await page.textContent('#rp-step'), /서버|null|undefined/);
  await shot(page, '08-hg-replay');
  // The finished game is listed in the lobby.
  await page.click('#to-lobby');
  await page.waitForSelector('#my-games li[data-game-pk]');
  await shot(page, '09-lobby-history');
  state.host = page;
}

/**
 * A late ring is judged late, not wrong (issue #24): on a six-seat table of quick bots,
 * when a bot has just collected a five, I press Space a moment later (as a person does
 * who saw the same five). The ring must come back as "늦었어요" and cost nothing.
 */
async function halliGalliLateRing() {
  const page = await newPage(DESKTOP);
  await login(page, '하은');
  await createRoom(page, 'halli-galli', { botLevel: 'hard', flipGuardMs: 400 });
  await addBotsAndStart(page, 5);
  await until('playing', async () => (await view(page))?.phase === 'playing', 15000);
  await boardApartAtBothSizes(page, 'halli-galli', 'a six-seat halli galli board', DESKTOP);
  await shot(page, '19-hg-six-seats-desktop');
  const myId = await me(page);
  // A press that lands while my bell is disabled (my view not yet ringable) sends
  // nothing and shows nothing: that attempt is void, and the next five is tried (three
  // at most). A ring that was sent and judged anything but late fails at once.
  for (let attempt = 1; ; attempt++) {
    const outcome = await lateRingAttempt(page, myId);
    if (outcome === 'late') break;
    if (attempt === 3) throw new Error(`three presses after a bot's five sent no ring: ${outcome}`);
  }
}

/** One press just after a bot collected a five: 'late' when it was judged so, or why it sent nothing. */
async function lateRingAttempt(page, myId) {
  // Wait in the page for a bot's correct ring on a table at five, and press Space there
  // and then. The press is a keydown on the window, which is what the board listens to;
  // sending it from here instead (a CDP round trip, then another for the key) took more
  // than REACTION_MS on a loaded 2-core CI machine, and a ring that late is aimed at the
  // new table and is rightly judged wrong.
  const seen = await page.evaluate((myId) => new Promise((resolve, reject) => {
    const five = (v) => {
      const t = {};
      for (const p of Object.values(v.players)) if (p.top && p.active) t[p.top.fruit] = (t[p.top.fruit] || 0) + p.top.count;
      return Object.values(t).includes(5);
    };
    const end = Date.now() + 90000;
    let prev = null;
    const step = () => {
      const v = window.__roomd.screen?.view;
      if (v && prev && v.tableVersion !== prev.tableVersion && five(prev) && !five(v)
        && v.lastBell?.correct && v.lastBell.player !== myId) {
        const before = v.players[myId];
        const bellDisabled = document.querySelector('#bell')?.disabled ?? null;
        window.dispatchEvent(new KeyboardEvent('keydown', { key: ' ', code: 'Space', bubbles: true }));
        return resolve({ from: prev.tableVersion, to: v.tableVersion, before, bellDisabled });
      }
      if (v) prev = v;
      if (Date.now() > end) return reject(new Error('no bot collected a five in 90 s'));
      setTimeout(step, 2);
    };
    step();
  }), myId);
  const { before } = seen;
  const judged = await page.waitForFunction(() => document.querySelector('#hg-feedback')?.textContent.includes('늦었어요'), null, { timeout: 3000 })
    .then(() => true, () => false);
  if (judged) {
    await shot(page, '20-hg-late-ring');
    // "늦었어요" stays at least 1.5 s: another player's wrong bell right after it (a
    // frame as the server sends it) must not replace it.
    const texts = await page.evaluate(async (myId) => {
      const s = window.__roomd.screen;
      const other = s.view.order.find((id) => id !== myId);
      s.onMsg({ t: 'update', room: s.room, view: s.view, events: [{ type: 'bell', player: other, correct: false }] });
      const out = [];
      const t0 = performance.now();
      while (performance.now() - t0 < 1300) {
        out.push(document.querySelector('#hg-feedback').textContent);
        await new Promise((r) => setTimeout(r, 100));
      }
      return out;
    }, myId);
    assert.ok(texts.every((t) => t.includes('늦었어요')), `the late message was replaced within 1.3 s: ${JSON.stringify(texts)}`);
  }
  const after = (await view(page)).players[myId];
  assert.equal(after.wrong, 0, 'a late ring is not a wrong ring');
  // A penalty would take a card from my deck for each of the 5 others; a flip takes one.
  assert.ok(after.deck >= before.deck - 1, `no penalty: ${JSON.stringify({ before, after })}`);
  if (judged) return 'late';
  const fb = await page.textContent('#hg-feedback');
  if (fb) throw new Error(`a ring on table ${seen.from} once it became ${seen.to} was answered ${JSON.stringify(fb)}, not "늦었어요"`);
  return `nothing after a press on table ${seen.from} once it became ${seen.to} (bell disabled at the press: ${seen.bellDisabled})`;
}

/** One Cockroach Poker move of mine, quickly (a card to the first opponent, or a call). */
async function quickCockroachMove(page, v, myId) {
  if (v.starter === myId && !v.holder) {
    await page.click('#hand .cp-kind >> nth=0');
    await page.click('#opponents .cp-opp:not([disabled]) >> nth=0');
    await page.click('#claims [data-claim="bat"]');
    await page.click('#confirm');
  } else if (v.holder === myId && !v.peeked) {
    await page.click('#call-true');
  } else return false;
  await until('my move to land', async () => (await roomResult(page)) || (await view(page)).holder !== v.holder || (await view(page)).starter !== v.starter, 5000);
  return true;
}

async function cockroachPoker() {
  const page = await newPage();
  await login(page, '서연');
  // Three of a kind loses ("짧은 게임"): bots think 0.9-2.7 s a move, so a longer game
  // would take minutes to play to the end.
  await createRoom(page, 'cockroach-poker', { loseCount: 3 });
  // The host can take a bot out again.
  await addBotsAndStart(page, 3, null, false);
  await page.click('#seats li:last-child .remove-bot');
  await page.waitForFunction(() => document.querySelectorAll('#seats li').length === 3);
  await addBotsAndStart(page, 0, '10-cp-waiting-room');
  await page.waitForSelector('#opponents');
  await boardApartAtBothSizes(page, 'cockroach-poker', 'the cockroach poker board', PHONE, '11-cp-board-at');
  await shot(page, '11-cp-board');
  const myId = await me(page);
  const done = { offer: 0, pass: 0, call: 0, greyed: false, games: 1 };
  let reloaded = false;
  let dropped = false;
  await until('an offer, a peek+pass, a call, a reload and a dropped socket', async () => {
    // Done once every move was tried and the page survived a reload and a dropped socket
    // (quick bots can leave no gap for the drop before the three moves are done).
    if (done.offer && done.pass && done.call && dropped && reloaded) return true;
    if (await roomResult(page)) {
      // A game can end before every move came my way (the bots play on their own): the
      // host plays another with the same options and bots.
      assert.ok(done.games < 4, `four games ended before every move was tried: ${JSON.stringify(done)}`);
      await page.click('#rematch');
      await page.waitForSelector('#seats');
      await page.waitForFunction(() => document.querySelectorAll('#seats li').length === 3);
      await page.click('#start');
      await page.waitForSelector('#opponents');
      done.games++;
      return false;
    }
    const v = await view(page);
    if (!v || !v.hand) return false;
    if (v.starter === myId && !v.holder) {
      // Offer: card kind → target → claim → 확인. Whose turn it is reads as mine.
      assert.match(await page.textContent('#cp-turn'), /^내 차례예요/);
      await page.click('#hand .cp-kind >> nth=0');
      assert.ok(await page.locator('#opponents .cp-opp.can-take').count() >= 1, 'who can take the card is highlighted');
      await page.click('#opponents .cp-opp:not([disabled]) >> nth=0');
      // The rat is a shipped drawing, not an emoji that needs a colour emoji font.
      assert.equal(await page.locator('#claims [data-claim="rat"] .kind-art svg').count(), 1, 'the rat is drawn');
      await page.click('#claims [data-claim="rat"]');
      if (!done.offer) await shot(page, '12-cp-offer');
      await page.click('#confirm');
      await until('the offer to land', async () => (await roomResult(page)) || (await view(page)).holder !== null, 5000);
      done.offer++;
    } else if (v.holder === myId && !v.peeked) {
      if (!reloaded) {
        // Reload while the card waits for me: the choice is still mine after it.
        reloaded = true;
        await page.reload();
        await page.waitForSelector('#call-true');
        return false;
      }
      if (!done.pass && v.passTargets.length > 0) {
        await shot(page, '13-cp-holder');
        await page.click('#peek');
        await page.waitForSelector('#cp-card.face');
        // Only players who have not seen the card can take it: the others are greyed.
        const disabled = await page.locator('#opponents .cp-opp[disabled]').count();
        done.greyed = disabled >= 1;
        await page.click('#opponents .cp-opp:not([disabled]) >> nth=0');
        await page.click('#claims [data-claim="spider"]');
        // The pass is confirmed with what is said, as an offer is.
        assert.match(await page.textContent('#confirm'), /^확인: .+님에게 넘기며 "이건 거미야!"$/);
        await shot(page, '14-cp-pass');
        await page.click('#confirm');
        await until('the pass to land', async () => (await view(page)).holder !== myId, 5000);
        done.pass++;
      } else {
        if (v.passTargets.length === 0) {
          assert.ok(await page.locator('#peek').isDisabled(), 'peek is disabled when nobody is left');
          assert.ok(await page.locator('#peek-reason').isVisible());
        }
        await page.click(done.call % 2 ? '#call-false' : '#call-true');
        // The reveal shows, unless this call ended the game (then the result does).
        await until('the reveal', async () => (await roomResult(page))
          || ((await view(page)).lastReveal !== null && (await view(page)).holder !== myId), 5000);
        await page.waitForSelector('#reveal, #result');
        if (!done.call && await page.locator('#reveal').count()) await shot(page, '15-cp-reveal');
        done.call++;
      }
    } else if (!dropped && done.offer) {
      // Drop the socket: the client reconnects by itself and subscribes again.
      dropped = true;
      const before = await page.evaluate(() => window.__roomd.sock.reconnects);
      await page.evaluate(() => window.__roomd.sock.drop());
      await until('the reconnect', () => page.evaluate((b) => window.__roomd.sock.reconnects > b
        && document.querySelector('#net').dataset.state === 'open', before), 5000);
    }
    return false;
  }, 120000);
  assert.ok(done.greyed, 'unavailable pass targets are greyed out');
  assert.ok(dropped && reloaded);

  // Play on quickly to the end: the result screen, then the replay.
  await until('the cockroach poker game to end', async () => {
    if (await roomResult(page)) return true;
    const v = await view(page);
    // The last update (with a loser) comes before the result frame: no move in between.
    if (v?.hand && !v.loser) await quickCockroachMove(page, v, myId);
    return false;
  }, 120000);
  await page.waitForSelector('#result');
  // One loser, everyone else won: two lines, 승리 and 패배, never 1위/2위 among winners.
  assert.deepEqual(await page.locator('#ranking li .rank').allTextContents(), ['승리', '패배']);
  assert.match(await page.textContent('#points-help'), /이긴 사람 1점/);
  await shot(page, '21-cp-result');
  await page.click('#to-replay');
  await page.waitForSelector('#rp-label');
  // Read-only: no controls; the hand and the opponents cannot be used.
  for (const at of ['Home', 'ArrowRight', 'ArrowRight', 'End']) {
    await page.keyboard.press(at);
    assert.equal(await page.locator('#confirm, #call-true, #call-false, #peek, #claims').count(), 0, `controls in the replay after ${at}`);
    assert.equal(await page.locator('#board button:not([disabled])').count(), 0, `an enabled board button in the replay after ${at}`);
  }
  await page.locator('#board .cp-opp >> nth=0').click({ force: true });
  await page.keyboard.press('Home');
  await page.locator('#board .cp-opp >> nth=0').click({ force: true });
  await shot(page, '22-cp-replay');
}

/**
 * Cockroach Poker, one on one with a bot (issue #59): the handed card and the revealed
 * card fly at both sizes; a spectator sees no stray "null"; the last round's reveal is
 * marked stale once a new card is on offer; one of my turns runs out; and the replay
 * labels the bot's own moves as the bot's and the timeout as a timeout.
 */
async function cockroachFlightsAndReplayLabels() {
  const page = await newPage(PHONE);
  await hookFlights(page);
  await login(page, '민준');
  // Five of a kind loses: the flights below take up to three reveals, and the stale-reveal
  // check needs the game still running after them (with three, a seed whose first three
  // reveals give one player the same kind ended it first, and the check timed out).
  const room = await createRoom(page, 'cockroach-poker', { loseCount: 5, turnSeconds: 15 });
  await addBotsAndStart(page, 1);
  await page.waitForSelector('#opponents');
  const myId = await me(page);
  const move = async () => { const v = await view(page); if (v?.hand && !v.loser && !(await roomResult(page))) await quickCockroachMove(page, v, myId); };

  // A spectator: "관전 중이에요…" and no literal null under it.
  const spec = await newPage(PHONE);
  await login(spec, '구경꾼');
  await spec.goto(`${base}/#/room/${room}`);
  await spec.waitForSelector('#cp-controls');
  assert.match(await spec.textContent('#cp-controls'), /관전 중이에요/);
  assert.ok(!(await spec.textContent('#board')).includes('null'), `a stray null for the spectator: ${await spec.textContent('#board')}`);
  await shot(spec, '28-cp-spectator');

  // One of my turns runs out (15 s) at the start, before the game can end: the server
  // moves for me.
  await until('my turn', async () => { const v = await view(page); return v && !v.loser && (v.holder || v.starter) === myId; }, 20000);
  await page.waitForSelector('#cp-auto', { timeout: 20000 });

  // The flights, held half-way for the screenshots, at 390×844 then 1280×800.
  for (const size of SIZES) {
    await page.setViewportSize(size);
    await page.waitForTimeout(150);
    await catchFlight(page, 'cp-card', `26-cp-card-flight-${size.width}`, move);
    await catchFlight(page, 'cp-reveal', `27-cp-reveal-flight-${size.width}`, move);
  }
  await page.setViewportSize(PHONE);
  const seen = await flights(page);
  assert.ok(seen.includes('cp-card') && seen.includes('cp-reveal'), `flights: ${seen}`);

  // Once a new card is on offer, the last reveal is marked as the last round's.
  await until('a new offer after a reveal', async () => {
    const s = await page.evaluate(() => {
      const v = window.__roomd.screen?.view;
      const r = document.querySelector('#reveal');
      return v && { offer: !!v.holder && !!v.lastReveal && !v.loser, past: r?.classList.contains('past'), text: r?.textContent || '' };
    });
    if (s?.offer) {
      assert.ok(s.past && s.text.startsWith('지난 판'), `the last reveal during a new offer: ${JSON.stringify(s)}`);
      await shot(page, '29-cp-stale-reveal');
      return true;
    }
    await move();
    return false;
  }, 60000);

  await until('the game to end', async () => { if (await roomResult(page)) return true; await move(); return false; }, 200000);
  await page.waitForSelector('#result');
  await page.click('#to-replay');
  await page.waitForSelector('#rp-label');
  // The last game's flights do not follow onto the replay.
  assert.equal(await page.locator('.flight').count(), 0, 'a card still flies on the replay page');
  const { steps, bots } = await page.evaluate(async () => {
    const pk = decodeURIComponent(location.hash.split('/').pop());
    const token = JSON.parse(localStorage.getItem('roomd.session')).token;
    const rep = await (await fetch(`/api/replays/${encodeURIComponent(pk)}`, { headers: { Authorization: `Bearer ${token}` } })).json();
    const games = await (await fetch('/api/me/games?limit=5', { headers: { Authorization: `Bearer ${token}` } })).json();
    return { steps: rep.steps, bots: games.find((g) => g.gamePk === pk)?.players.filter((id) => id.startsWith('bot')) ?? [] };
  });
  const label = async (i) => { await page.locator('#rp-slider').fill(String(i)); return page.textContent('#rp-step'); };
  const botAt = steps.findIndex((x) => x.kind === 'bot');
  assert.ok(botAt > 0, `no bot step in the replay: ${JSON.stringify(steps.map((x) => x.kind))}`);
  assert.ok(bots.length === 0 || bots.includes(steps[botAt].actor), `the bot step's actor ${steps[botAt].actor} is a bot (${bots})`);
  const botLabel = await label(botAt);
  assert.match(botLabel, /님 \(봇\)/);
  assert.doesNotMatch(botLabel, /시간이 지나/);
  await shot(page, '30-cp-replay-bot-step');
  // Every step by the bot is a bot step; the timeout is mine and labelled as one.
  assert.ok(steps.every((x) => x.actor !== steps[botAt].actor || x.kind === 'bot'), 'a bot move labelled otherwise');
  const timeoutAt = steps.findIndex((x) => x.kind === 'auto' && x.actor === myId);
  assert.ok(timeoutAt > 0, `my turn ran out but the replay has no timeout step: ${JSON.stringify(steps.map((x) => x.kind))}`);
  assert.match(await label(timeoutAt), /님 \(시간이 지나 자동으로\)/);
  await shot(page, '31-cp-replay-timeout-step');
}

/** With reduced motion asked, no card flies (the boards still show where cards went). */
async function reducedMotionNoFlights() {
  const page = await newPage(PHONE);
  await page.emulateMedia({ reducedMotion: 'reduce' });
  await hookFlights(page);
  await login(page, '지아');
  assert.ok(await page.evaluate(() => matchMedia('(prefers-reduced-motion: reduce)').matches));
  const myId = await me(page);
  // Halli Galli: a wrong ring of mine gives the bot a penalty card.
  await createRoom(page, 'halli-galli', { wrongRingLockoutMs: 0, flipGuardMs: 400 });
  await addBotsAndStart(page, 1);
  await until('a penalty of mine', async () => { if ((await view(page))?.players?.[myId]?.wrong > 0) return true; await wrongRing(page); return false; }, 30000);
  await page.waitForTimeout(600);
  // Cockroach Poker: an offer and a reveal.
  await page.goto(base + '/#/');
  await page.waitForSelector('#create');
  await createRoom(page, 'cockroach-poker', { loseCount: 3 });
  await addBotsAndStart(page, 1);
  await until('a reveal', async () => {
    const v = await view(page);
    if ((await roomResult(page)) || v?.lastReveal) return true;
    if (v?.hand && !v.loser) await quickCockroachMove(page, v, myId);
    return false;
  }, 60000);
  await page.waitForTimeout(600);
  assert.deepEqual(await flights(page), [], 'a card flew with reduced motion asked');
  assert.equal(await page.locator('.flight').count(), 0);
}

async function tally() {
  const page = state.host || await newPage();
  if (!state.host) await login(page, '도윤');
  // The page talks to roomd through the SDK (@roomd/client), not a copy of the protocol.
  const loaded = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname));
  assert.ok(loaded.includes('/static/sdk/connection.js'), `the SDK was not loaded: ${loaded.join(' ')}`);
  assert.ok(!loaded.includes('/static/patch.js'));
  // The example game is not offered to players; ?dev lists it.
  await page.goto(base + '/#/');
  await page.waitForSelector('#create');
  assert.equal(await page.locator('#game option[value="tally"]').count(), 0);
  await page.goto(base + '/?dev#/');
  await page.waitForSelector('#create');
  await createRoom(page, 'tally', { target: 10 });
  await page.click('#start');
  await page.waitForSelector('#bump');
  for (let i = 0; i < 10; i++) {
    await page.click('#bump');
    await page.waitForFunction((n) => document.querySelector('#count')?.textContent === String(n) || !!document.querySelector('#result'), i + 1);
  }
  await page.waitForSelector('#result');
  assert.equal(await page.locator('#ranking li').count(), 1);
  await shot(page, '16-tally-result');
}

/**
 * Every visible element matching `sel` lies within the page's width, and no two overlap
 * (an element and one inside it do not count as overlapping).
 */
async function fitsAndApart(page, sel, what) {
  const { width, boxes, pairs } = await page.$$eval(sel, (all) => {
    // Where things rest, not where a short effect (a flip, a bounce) has them for now.
    for (const a of document.getAnimations()) if (!(a instanceof CSSAnimation)) a.finish();
    const els = all.filter((e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden'; });
    const label = (e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}.${[...e.classList].join('.')} "${(e.textContent || '').trim().slice(0, 24)}"`;
    const rect = (e) => { const r = e.getBoundingClientRect(); return { x: r.x, y: r.y, w: r.width, h: r.height, label: label(e) }; };
    const pairs = [];
    for (let i = 0; i < els.length; i++) for (let j = i + 1; j < els.length; j++) {
      if (!els[i].contains(els[j]) && !els[j].contains(els[i])) pairs.push([i, j]);
    }
    return { width: document.documentElement.clientWidth, boxes: els.map(rect), pairs };
  });
  assert.ok(boxes.length > 0, `${what}: nothing matches ${sel}`);
  for (const b of boxes) assert.ok(b.x >= -0.5 && b.x + b.w <= width + 0.5, `${what} at ${width}px: ${b.label} spans ${b.x}..${b.x + b.w} px`);
  for (const [i, j] of pairs) {
    const a = boxes[i]; const b = boxes[j];
    const ox = Math.min(a.x + a.w, b.x + b.w) - Math.max(a.x, b.x);
    const oy = Math.min(a.y + a.h, b.y + b.h) - Math.max(a.y, b.y);
    assert.ok(ox <= 0.5 || oy <= 0.5, `${what} at ${width}px: ${a.label} and ${b.label} overlap (${ox.toFixed(1)}×${oy.toFixed(1)} px)`);
  }
  const scroll = await page.evaluate(() => document.scrollingElement.scrollWidth);
  assert.ok(scroll <= width, `${what}: the page is ${scroll}px wide at ${width}px`);
}

/** The labelled parts of each board: none may overlap another, at either size. */
const BOARD_PARTS = {
  'halli-galli': '.hg-top > *, #hg-feedback, #hg-out, .hg-seat .name, .hg-seat .pile, .hg-seat .stats, .hg-seat .gauge, #bell, #my-deck, #flip, #hg-keys, #hg-notice',
  'cockroach-poker': '.cp-opp, #cp-center > *, #cp-controls, #hand .cp-kind, #board > .cp-help',
};

/** The board's labelled parts are apart at 390×844 and 1280×800; back to `back` after. */
async function boardApartAtBothSizes(page, game, what, back, shotName) {
  for (const size of SIZES) {
    await page.setViewportSize(size);
    await page.waitForTimeout(150); // a frame or two for the layout and the gauges
    await fitsAndApart(page, BOARD_PARTS[game], `${what} (${size.width}×${size.height})`);
    if (shotName) await shot(page, `${shotName}-${size.width}`);
  }
  await page.setViewportSize(back);
}

async function hostileNames() {
  // Names as wide as the server accepts (U+FDFD is one very wide glyph where an Arabic
  // font is installed; fullwidth Ｗ is wide everywhere), 20 characters, and a
  // right-to-left name with digits and Latin in it.
  const wide = '\uFDFD'.repeat(10) + 'Ｗ'.repeat(10);
  const rtl = 'مرحبا abc 123 שלום';
  const host = await newPage();
  await login(host, wide);
  await fitsAndApart(host, '#bar > *', 'the top bar of a wide name');
  // 15-second turns: nobody acts here, so the server acts for whoever it waits for.
  const room = await createRoom(host, 'cockroach-poker', { turnSeconds: 15 });
  await addBotsAndStart(host, 1, null, false);
  const guest = await newPage();
  await login(guest, rtl);
  // A name no guest could choose (300 unbroken characters, as a login service could put
  // in a token): roomd refuses the token; were it accepted, its room is in the lobby too.
  const longName = 'x'.repeat(300);
  const minted = mint({ sub: 'u_e2elongname', name: longName, exp: Math.floor(Date.now() / 1000) + 600 });
  const made = await fetch(base + '/api/rooms', {
    method: 'POST', headers: { authorization: `Bearer ${minted}`, 'content-type': 'application/json' },
    body: JSON.stringify({ game: 'tally' }),
  });
  const longRoom = made.ok ? (await made.json()).roomId : null;
  assert.ok(longRoom || made.status === 401, `a token with a 300-character name: ${made.status}`);
  await guest.waitForSelector(`#open-rooms li[data-room="${room}"]`);
  if (longRoom) {
    await guest.waitForSelector(`#open-rooms li[data-room="${longRoom}"]`);
    await fitsAndApart(guest, `#open-rooms li[data-room="${longRoom}"] > *`, 'a lobby line with a 300-character host name');
  }
  await shot(guest, '17-lobby-hostile-names');
  const line = `#open-rooms li[data-room="${room}"]`;
  assert.equal(await guest.locator(`${line} bdi[dir="auto"]`).count(), 1, 'the host name is isolated');
  await fitsAndApart(guest, `${line} > *`, 'a lobby line with a wide host name');
  assert.ok(await guest.locator(`${line} button`).isVisible());
  // The text after the name keeps its place: the name is isolated, not reordering it.
  const text = await guest.locator(`${line} .grow`).textContent();
  assert.ok(text.endsWith('명'), `lobby line reads ${text}`);
  await guest.click(`${line} button`);
  await guest.waitForSelector('#seats');
  await host.waitForFunction(() => document.querySelectorAll('#seats li').length === 3);
  await fitsAndApart(host, '#seats li', 'the seat list');
  await fitsAndApart(host, '#seats li > *', 'seat lines');
  await fitsAndApart(guest, '#bar > *', 'the top bar of a right-to-left name');
  await host.click('#start');
  for (const p of [host, guest]) {
    await p.waitForSelector('#opponents .cp-opp');
    await fitsAndApart(p, '#opponents .cp-opp', 'the cockroach poker opponents');
  }
  await shot(host, '18-cp-board-hostile-names');
  await boardApartAtBothSizes(host, 'cockroach-poker', 'a cockroach poker board with hostile names', PHONE);

  // Every deadline shows as a countdown, to the one it is for and to the others; when it
  // runs out the server moves for that player and both pages say so.
  const hostId = await me(host);
  const guestId = await me(guest);
  const humanWaited = async () => {
    const v = await view(host);
    const w = v && !v.loser ? (v.holder || v.starter) : null;
    return (w === hostId || w === guestId) && v;
  };
  const v = await until('a person to be waited for', humanWaited, 20000);
  const waited = v.holder || v.starter;
  const [theirs, others] = waited === hostId ? [host, guest] : [guest, host];
  for (const p of [theirs, others]) {
    const t = await p.textContent('#cp-timer');
    const left = Number(t.match(/(\d+)초/)?.[1]);
    assert.ok(left > 0 && left <= 15, `the countdown reads ${t}`);
  }
  assert.match(await theirs.textContent('#cp-turn'), /^내 차례예요/);
  await shot(theirs, '23-cp-countdown');
  await theirs.waitForFunction(() => /⏱ [0-5]초/.test(document.querySelector('#cp-timer')?.textContent || ''), null, { timeout: 17000 });
  for (const p of [theirs, others]) {
    await p.waitForSelector('#cp-auto', { timeout: 8000 });
    assert.match(await p.textContent('#cp-auto'), /시간이 지나서 서버가 (나|.+님) 대신/);
  }
  await shot(others, '24-cp-server-acted');
}

async function staticFiles() {
  for (const [p, type] of [['/', 'text/html'], ['/static/app.js', 'text/javascript'], ['/static/style.css', 'text/css'],
    ['/static/sdk/index.js', 'text/javascript'], ['/static/sdk/connection.js', 'text/javascript']]) {
    const r = await fetch(base + p);
    assert.equal(r.status, 200, p);
    assert.ok(r.headers.get('content-type').startsWith(type), `${p}: ${r.headers.get('content-type')}`);
  }
  assert.equal((await fetch(base + '/static/nope.js')).status, 404);
}

// ---- runner --------------------------------------------------------------------------

const TESTS = [
  ['static files are served with their content types', staticFiles],
  ['halli galli: lobby, bots, flips by key and click, spectate, reload, play to the end, replay', halliGalli],
  ['halli galli: a ring a moment after a bot took the five is judged late, not wrong (1280×800)', halliGalliLateRing],
  ['cockroach poker: offer, peek+pass, call, reload and reconnect mid-game, the end, a read-only replay', cockroachPoker],
  ['cockroach poker: card flights at both sizes, a spectator, a stale reveal, a timeout, bot moves in the replay', cockroachFlightsAndReplayLabels],
  ['reduced motion: no card flies in either game', reducedMotionNoFlights],
  ['tally: the example board plays to its target', tally],
  ['a wide or right-to-left name breaks neither the lobby nor a board; countdowns and a timeout the server acts on', hostileNames],
];

let roomd;
let failed = 0;
let ran = 0;
const t0 = Date.now();
try {
  roomd = await startRoomd();
  base = roomd.base;
  console.log(`e2e: roomd at ${base}`);
  // Playwright gives each launch a fresh temporary --user-data-dir of its own.
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync',
      // Pages fulfilled from disk (E2E_STATIC_FROM_DISK) count as non-local documents.
      ...(process.env.E2E_STATIC_FROM_DISK ? ['--disable-features=LocalNetworkAccessChecks'] : [])],
  });
  // E2E_ONLY=regexp runs the tests whose names match (for working on one of them).
  const only = process.env.E2E_ONLY ? new RegExp(process.env.E2E_ONLY) : null;
  for (const [name, fn] of TESTS) {
    if (only && !only.test(name)) continue;
    ran++;
    const t = Date.now();
    const seen = new Map(pages.map((p) => [p, p.errors.length]));
    try {
      await fn();
      // Any console error or uncaught exception on any page during this test fails it.
      const errors = pages.flatMap((p) => p.errors.slice(seen.get(p) ?? 0));
      assert.ok(errors.length === 0, `browser console errors or page errors: ${errors.slice(0, 3).map((e) => e.slice(0, 300)).join(' | ')}`);
      console.log(`  ok   ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)`);
    } catch (e) {
      failed++;
      console.log(`  FAIL ${name} (${((Date.now() - t) / 1000).toFixed(1)} s)\n       ${e.stack || e}`);
      // What each open page showed when it failed.
      let i = 0;
      for (const c of contexts) for (const p of c.pages()) {
        await p.screenshot({ path: path.join(SHOTS, `FAIL-${TESTS.indexOf(TESTS.find((x) => x[1] === fn))}-${i++}.png`) }).catch(() => {});
        if (p.errors?.length) console.log(`       page errors (${p.errors.length}): ${p.errors.slice(0, 3).map((e) => e.slice(0, 300)).join(' | ')}`);
      }
    }
  }
} catch (e) {
  failed++;
  console.log(`e2e: could not run: ${e.stack || e}`);
} finally {
  for (const c of contexts) await c.close().catch(() => {});
  await browser?.close().catch(() => {});
  await stopRoomd(roomd);
}
console.log(`e2e: ${ran - failed}/${ran} passed in ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshots in ${SHOTS}`);
if (failed && roomd) console.log('--- roomd log (tail) ---\n' + roomd.log().split('\n').slice(-40).join('\n'));
process.exit(failed ? 1 : 0);
