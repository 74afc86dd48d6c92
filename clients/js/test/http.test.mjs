// The SDK's HTTP half against a real roomd.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startRoomd, until } from './roomd.mjs';
import { RoomdClient, RoomdError, replayScenes, applyPatch, PatchError, nextCursor } from '../dist/index.js';

let node;
before(async () => { node = await startRoomd(); });
after(async () => { await node?.stop(); });

const client = async (name) => {
  const c = new RoomdClient({ baseUrl: node.base });
  await c.createSession(name);
  return c;
};

test('a session gives a token the client then uses', async () => {
  const c = new RoomdClient({ baseUrl: node.base });
  const s = await c.createSession('도윤');
  assert.match(s.userId, /^u_/);
  assert.equal(s.name, '도윤');
  assert.equal(c.token, s.token);
  assert.equal(c.userId, s.userId);
  assert.deepEqual(await c.myGames(), []);
});

test('the catalog lists the three games with Korean labels', async () => {
  const games = await new RoomdClient({ baseUrl: node.base }).games();
  assert.deepEqual(games.map((g) => g.id).sort(), ['cockroach-poker', 'halli-galli', 'tally']);
  const tally = games.find((g) => g.id === 'tally');
  assert.equal(tally.options[0].key, 'target');
  assert.ok(tally.options[0].choices.some((c) => c.value === null));
});

test('errors carry the status, the code and the Korean reason', async () => {
  const anon = new RoomdClient({ baseUrl: node.base });
  await assert.rejects(anon.listRooms(), (e) => e instanceof RoomdError && e.status === 401 && e.code === 'unauthorized' && /로그인/.test(e.reason));
  const c = await client('하린');
  await assert.rejects(c.createRoom({ game: 'chess' }), (e) => e.status === 400 && e.code === 'unknown_game' && e.reason.includes('없는 게임'));
  await assert.rejects(c.room('r_nope'), (e) => e.status === 404 && e.code === 'unknown_room');
  await assert.rejects(new RoomdClient({ baseUrl: 'http://127.0.0.1:1' }).games(), (e) => e.code === 'network' && e.status === 0);
});

test('rooms: create, list, seat, bot, leave, start', async () => {
  const host = await client('도윤');
  const guest = await client('서연');
  const { roomId } = await host.createRoom({ game: 'tally', options: { target: 10 } });
  const page = await guest.listRooms({ game: 'tally', status: 'waiting' });
  assert.ok(page.rooms.some((r) => r.roomId === roomId));
  assert.equal(page.next, null);
  let info = await guest.sit(roomId);
  assert.deepEqual(info.seats.map((s) => s.userId), [host.userId, guest.userId]);
  info = await host.addBot(roomId);
  assert.equal(info.seats.filter((s) => s.bot).length, 1);
  info = await guest.leave(roomId);
  assert.ok(!info.seats.some((s) => s.userId === guest.userId));
  await assert.rejects(guest.start(roomId), (e) => e.status === 403 || e.status === 409);
  const { gamePk } = await host.start(roomId);
  assert.equal(typeof gamePk, 'string');
  assert.equal((await host.room(roomId)).status, 'playing');
});

test('records and replays: every scene rebuilt from the patches', async () => {
  const host = await client('도윤');
  const { roomId } = await host.createRoom({ game: 'tally', options: { target: 10 } });
  await host.start(roomId);
  const conn = host.connect();
  try {
    const room = conn.room(roomId);
    await until('the game view', () => room.view);
    for (let i = 0; i < 10; i++) await room.act({ type: 'bump' });
    await until('the result', () => room.result);
  } finally { conn.close(); }
  const [rec] = await until('the record', async () => (await host.myGames()).filter((g) => g.roomId === roomId));
  assert.equal(rec.game, 'tally');
  assert.equal(rec.result.details.count, 10);
  const replay = await host.replay(rec.gamePk);
  const scenes = replayScenes(replay);
  assert.equal(scenes.length, replay.scenes);
  assert.deepEqual(scenes.map((v) => v.count), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  const stranger = await client('민준');
  await assert.rejects(stranger.replay(rec.gamePk), (e) => e.status === 403 && e.code === 'not_participant');
});

test('applyPatch follows RFC 6902 and leaves its input alone', () => {
  const doc = { a: [1, 2], b: { c: 1 } };
  const out = applyPatch(doc, [
    { op: 'add', path: '/a/1', value: 9 },
    { op: 'remove', path: '/b/c' },
    { op: 'replace', path: '/a/0', value: 0 },
    { op: 'add', path: '/a/-', value: 3 },
    { op: 'copy', from: '/a/0', path: '/d' },
    { op: 'move', from: '/d', path: '/b/e~1f' },
    { op: 'test', path: '/a/1', value: 9 },
  ]);
  assert.deepEqual(out, { a: [0, 9, 2, 3], b: { 'e/f': 0 } });
  assert.deepEqual(doc, { a: [1, 2], b: { c: 1 } });
  assert.throws(() => applyPatch(doc, [{ op: 'remove', path: '/x' }]), PatchError);
  assert.throws(() => applyPatch(doc, [{ op: 'replace', path: '/a/5', value: 1 }]), PatchError);
});

test('a Link header names the next page', () => {
  assert.equal(nextCursor('</api/rooms?cursor=abc&limit=2>; rel="next"'), 'abc');
  assert.equal(nextCursor(null), null);
});
