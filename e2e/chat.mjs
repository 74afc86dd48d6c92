// Browser test of quick chat (issue 59): a seated Cockroach Poker player's phrase buttons,
// and the speech bubble by the sender's seat on the player's own page (390×844) and on a
// spectator's (1280×800); no buttons for spectators, in a room with quickChat off, or in
// Halli Galli. Usage: node chat.mjs /path/to/roomd
import assert from 'node:assert/strict';
import path from 'node:path';
import { Browser, DESKTOP, PHONE, SHOTS, call, login, run } from './harness.mjs';

const browser = new Browser();

/** A screen that leaves out a part (no phrase buttons) shows nothing in its place. */
async function noNull(page) {
  const text = await page.textContent('#app');
  assert.ok(!/\bnull\b/.test(text), `"null" on the page: ${text.slice(0, 300)}`);
}

async function openRoom(base, page, roomId) {
  await page.goto(`${base}/#/room/${roomId}`);
}

/** The bubble from `from` on `page`: its text and where it sits against `from`'s seat box. */
async function bubbleBy(page, from) {
  await page.waitForSelector(`.chat-bubble[data-from="${from}"]`);
  return page.evaluate((from) => {
    const b = document.querySelector(`.chat-bubble[data-from="${from}"]`).getBoundingClientRect();
    const seat = document.querySelector(`#app [data-player="${from}"]`)?.getBoundingClientRect();
    return { text: document.querySelector(`.chat-bubble[data-from="${from}"]`).textContent,
      x: b.left + b.width / 2, bottom: b.bottom, seat: seat && { left: seat.left, right: seat.right, top: seat.top } };
  }, from);
}

async function phrasesAndBubbles(base) {
  const host = await browser.page(PHONE);
  const watcher = await browser.page(DESKTOP);
  const hostId = await login(base, host, '도윤');
  await login(base, watcher, '관전자');
  const { roomId } = await call(host, 'POST', '/api/rooms', { game: 'cockroach-poker' });
  await call(host, 'POST', `/api/rooms/${roomId}/seats`, { bot: true });
  await openRoom(base, host, roomId);
  // A seated player may talk in the waiting room already.
  await host.waitForSelector('#chat-bar .chat-phrase[data-phrase="really"]');
  const labels = await host.$$eval('#chat-bar .chat-phrase', (bs) => bs.map((b) => b.textContent));
  assert.ok(labels.includes('정말이야!') && labels.includes('의심스러운데?'), `phrases: ${labels}`);
  await call(host, 'POST', `/api/rooms/${roomId}/start`);
  await host.waitForSelector('#board #chat-bar, #chat-bar');
  await host.waitForSelector('#board .cp-opp');
  await openRoom(base, watcher, roomId);
  await watcher.waitForSelector(`#board [data-player="${hostId}"]`);
  assert.equal(await watcher.$('#chat-bar'), null, 'a spectator has no phrase buttons');
  await noNull(watcher);

  await host.click('#chat-bar .chat-phrase[data-phrase="really"]');
  // The buttons rest for the server's 2 s.
  assert.ok(await host.$eval('#chat-bar .chat-phrase[data-phrase="doubt"]', (b) => b.disabled), 'buttons rest after a phrase');
  const mine = await bubbleBy(host, hostId);
  assert.match(mine.text, /^나 정말이야!$/);
  const seen = await bubbleBy(watcher, hostId);
  assert.match(seen.text, /정말이야!$/);
  assert.ok(seen.seat, 'the spectator sees the sender\'s seat');
  assert.ok(seen.x >= seen.seat.left && seen.x <= seen.seat.right, `the bubble is by the seat: ${JSON.stringify(seen)}`);
  assert.ok(seen.bottom <= seen.seat.top + 2, `the bubble is above the seat: ${JSON.stringify(seen)}`);
  await host.screenshot({ path: path.join(SHOTS, 'chat-bubble-390.png') });
  await watcher.screenshot({ path: path.join(SHOTS, 'chat-bubble-1280.png') });
  await host.waitForFunction(() => !document.querySelector('#chat-bar .chat-phrase').disabled, null, { timeout: 5000 });
  await host.click('#chat-bar .chat-phrase[data-phrase="doubt"]');
  assert.match((await bubbleBy(watcher, hostId)).text, /의심스러운데\?$/);
}

async function noChatWhereItIsOff(base) {
  const host = await browser.page(PHONE);
  await login(base, host, '서연');
  const off = await call(host, 'POST', '/api/rooms', { game: 'cockroach-poker', options: { quickChat: false } });
  const halli = await call(host, 'POST', '/api/rooms', { game: 'halli-galli' });
  for (const { roomId } of [off, halli]) {
    await call(host, 'POST', `/api/rooms/${roomId}/seats`, { bot: true });
    await openRoom(base, host, roomId);
    await host.waitForSelector('#seats');
    assert.equal(await host.$('#chat-bar'), null, `no phrase buttons in ${roomId}`);
    await noNull(host);
    await call(host, 'POST', `/api/rooms/${roomId}/start`);
    await host.waitForSelector('#board');
    assert.equal(await host.$('#chat-bar'), null, `no phrase buttons on the board of ${roomId}`);
    await noNull(host);
  }
}

const TESTS = [
  ['quick chat: phrase buttons for a seated player, a bubble by the seat for everyone (390 and 1280)', phrasesAndBubbles],
  ['quick chat: no buttons where the option is off or the game has none', noChatWhereItIsOff],
];

await run('chat', process.argv[2], TESTS, browser);
