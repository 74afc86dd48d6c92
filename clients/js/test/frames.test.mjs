// Real server frames against the declared protocol. Plays each game on a real roomd
// through the SDK, capturing every server→client frame and HTTP body, then
//  1. validates each frame against docs/asyncapi.yaml (ajv) and checks that every
//     server message the AsyncAPI document lists was actually seen;
//  2. writes the frames as TypeScript object literals, each `satisfies` its SDK type,
//     and type-checks them with tsc: a field renamed (or dropped) on the server is an
//     excess or missing property, so it fails here rather than in a player's browser.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import Ajv from 'ajv';
import YAML from 'yaml';
import { startRoomd, until, here, repo } from './roomd.mjs';
import { RoomdClient, isRoomInfo } from '../dist/index.js';

let node;
before(async () => { node = await startRoomd(); });
after(async () => { await node?.stop(); });

/** Captured: `{type, game, value}`; `type` is the SDK type name the value must satisfy. */
const captured = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A client whose HTTP answers are captured too. */
async function client(name) {
  const c = new RoomdClient({ baseUrl: node.base });
  const s = await c.createSession(name);
  captured.push({ kind: 'http', type: 'Session', value: s });
  const request = c.request.bind(c);
  c.request = async (method, p, body) => {
    const out = await request(method, p, body);
    captured.push({ kind: 'http', type: httpType(method, p), value: out });
    return out;
  };
  return c;
}

function httpType(method, p) {
  if (p.startsWith('/api/games')) return 'CatalogEntry[]';
  if (p.startsWith('/api/me/games')) return 'GameRecord[]';
  if (p.startsWith('/api/replays/')) return 'Replay';
  if (p.endsWith('/start')) return '{ gamePk: string }';
  if (method === 'POST' && p === '/api/rooms') return '{ roomId: string }';
  if (p.startsWith('/api/rooms') && method === 'GET' && !p.match(/^\/api\/rooms\/[^/?]+$/)) return 'RoomInfo[]';
  return 'RoomInfo';
}

function capture(conn, game) {
  conn.on('message', (m) => captured.push({ kind: 'ws', game, value: m }));
}

test('tally: players, a spectator, seat changes, a reject, an error and the result', async () => {
  const host = await client('도윤');
  const guest = await client('서연');
  const watcher = await client('관전자');
  await host.games();
  const { roomId } = await host.createRoom({ game: 'tally', options: { target: 10 } });
  const [hc, gc, wc] = [host.connect(), guest.connect(), watcher.connect()];
  for (const c of [hc, gc, wc]) capture(c, 'tally');
  try {
    const [hr, gr, wr] = [hc.room(roomId), gc.room(roomId), wc.room(roomId)];
    await until('the waiting sync', () => hr.info && wr.info);
    await guest.sit(roomId);
    await until('the seat change', () => hr.info.seats.length === 2);
    await host.listRooms({ status: 'waiting' });
    await host.room(roomId);
    await host.start(roomId);
    await until('the views', () => hr.view && gr.view && wr.view);
    await assert.rejects(wr.act({ type: 'bump' }), (e) => e.code === 'not_seated');
    wc.raw({ t: 'dance' });
    for (let i = 0; i < 10; i++) await (i % 2 ? gr : hr).act({ type: 'bump' }).catch(() => {});
    await until('the result', () => hr.result && wr.result);
    const games = await until('the record', async () => (await host.myGames()).filter((g) => g.roomId === roomId));
    await host.replay(games[0].gamePk);
  } finally { for (const c of [hc, gc, wc]) c.close(); }
});

test('halli-galli: a player against a bot, and a spectator', async () => {
  const host = await client('도윤');
  const watcher = await client('관전자');
  const { roomId } = await host.createRoom({ game: 'halli-galli', options: { showRtt: true } });
  await host.addBot(roomId);
  const [hc, wc] = [host.connect(), watcher.connect()];
  capture(hc, 'halli-galli');
  capture(wc, 'halli-galli');
  try {
    const hr = hc.room(roomId);
    wc.room(roomId);
    await until('the waiting sync', () => hr.info);
    await host.start(roomId);
    const end = Date.now() + 9000;
    let rang = 0;
    while (Date.now() < end && !hr.result) {
      const v = hr.view;
      if (v?.canFlip) await hr.act({ type: 'flip' }).catch(() => {});
      else if (v?.phase === 'playing' && v.canRing && rang < 2 && Object.values(v.players).some((p) => p.top)) {
        rang++;
        await hr.act({ type: 'ring', version: v.tableVersion }).catch(() => {});
      }
      await sleep(100);
    }
    assert.ok(hr.view && hr.view.phase !== 'countdown', 'the game got going');
  } finally { hc.close(); wc.close(); }
});

test('cockroach-poker: a player and two bots, and a spectator', async () => {
  const host = await client('도윤');
  const watcher = await client('관전자');
  const { roomId } = await host.createRoom({ game: 'cockroach-poker' });
  await host.addBot(roomId);
  await host.addBot(roomId);
  const [hc, wc] = [host.connect(), watcher.connect()];
  capture(hc, 'cockroach-poker');
  capture(wc, 'cockroach-poker');
  try {
    const hr = hc.room(roomId);
    wc.room(roomId);
    await until('the waiting sync', () => hr.info);
    await host.start(roomId);
    // Quick chat: the phrase reaches the player and the spectator; a second one within
    // 2 s is refused (an error about the room).
    const heard = [];
    const refused = [];
    wc.room(roomId).on('chat', (m) => heard.push(m));
    hr.on('error', (m) => refused.push(m));
    assert.equal(hr.chat('really'), true);
    await until('the phrase reaches the spectator', () => heard.length === 1);
    assert.deepEqual(heard[0], { t: 'chat', room: roomId, from: host.userId, phrase: 'really' });
    hr.chat('doubt');
    await until('the second phrase is refused', () => refused.some((m) => m.code === 'rate_limited'));
    const me = host.userId;
    const end = Date.now() + 9000;
    let moves = 0;
    while (Date.now() < end && moves < 6 && !hr.result) {
      const v = hr.view;
      if (v && v.holder === null && v.starter === me && v.hand?.length) {
        const to = v.order.find((p) => p !== me);
        await hr.act({ type: 'offer', cardId: v.hand[0].id, to, claim: 'rat' }).then(() => moves++, () => {});
      } else if (v && v.holder === me) {
        await hr.act({ type: 'call', call: moves % 2 ? 'true' : 'false' }).then(() => moves++, () => {});
      }
      await sleep(100);
    }
    assert.ok(hr.view, 'the game view arrived');
  } finally { hc.close(); wc.close(); }
});

test('every frame validates against docs/asyncapi.yaml, and every message it lists was seen', () => {
  const doc = YAML.parse(readFileSync(path.join(repo, 'docs/asyncapi.yaml'), 'utf8'));
  const ajv = new Ajv({ strict: false, allErrors: true });
  ajv.addSchema({ $id: 'asyncapi', components: { schemas: doc.components.schemas } });
  const byType = {};
  for (const ref of doc.operations.serverSends.messages) {
    const name = ref.$ref.split('/').pop();
    const schemaRef = doc.components.messages[name].payload.$ref;
    byType[name] = ajv.getSchema(`asyncapi${schemaRef}`);
    assert.ok(byType[name], `no schema for ${name}`);
  }
  const seen = new Set();
  const frames = captured.filter((c) => c.kind === 'ws');
  assert.ok(frames.length > 50, `only ${frames.length} frames captured`);
  for (const { value } of frames) {
    const validate = byType[value.t];
    assert.ok(validate, `the server sent a message the AsyncAPI document does not list: ${value.t}`);
    assert.ok(validate(value), `${value.t} does not match docs/asyncapi.yaml: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(value).slice(0, 600)}`);
    seen.add(value.t);
  }
  assert.deepEqual([...seen].sort(), Object.keys(byType).sort(), 'every listed server message is sent');
});

/** A structural signature, so each distinct shape is type-checked once. */
function shape(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return `[${[...new Set(v.map(shape))].sort().join('|')}]`;
  if (typeof v === 'object') return `{${Object.keys(v).sort().map((k) => `${k}:${shape(v[k])}`).join(',')}}`;
  return typeof v;
}

function tsType({ kind, type, game, value }) {
  if (kind === 'http') return type === 'Replay' ? 'Replay<TallyView>' : type;
  const g = `Games['${game}']`;
  switch (value.t) {
    case 'sync': return isRoomInfo(value.view) ? 'SyncMessage<never>' : `SyncMessage<${g}['view']> & { view: ${g}['view'] }`;
    case 'update': return `UpdateMessage<${g}['view'], ${g}['event']>`;
    case 'ack': return 'AckMessage';
    case 'reject': return 'RejectMessage';
    case 'result': return 'ResultMessage';
    case 'error': return 'ErrorMessage';
    case 'room': return 'RoomMessage';
    case 'chat': return 'ChatMessage';
    default: return 'never';
  }
}

test('every captured frame and HTTP body type-checks against the SDK types (tsc)', () => {
  const seen = new Set();
  const lines = [
    '// Generated by test/frames.test.mjs from a real roomd: do not edit.',
    "import type { AckMessage, CatalogEntry, ChatMessage, ErrorMessage, GameRecord, Games, RejectMessage, Replay, ResultMessage, RoomInfo, RoomMessage, Session, SyncMessage, TallyView, UpdateMessage } from '../src/index.js';",
  ];
  let n = 0;
  for (const c of captured) {
    const t = tsType(c);
    const sig = `${t} ${shape(c.value)}`;
    if (seen.has(sig)) continue;
    seen.add(sig);
    lines.push(`export const f${n++} = ${JSON.stringify(c.value)} satisfies ${t};`);
  }
  assert.ok(n > 20, `only ${n} distinct shapes`);
  const dir = path.join(here, '..', 'test-out');
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'frames.check.ts');
  writeFileSync(file, lines.join('\n') + '\n');
  const tsc = path.join(here, '..', 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'ES2022', '--module', 'NodeNext',
    '--moduleResolution', 'NodeNext', '--skipLibCheck', file], { encoding: 'utf8' });
  assert.equal(r.status, 0, `the server's frames do not match the SDK types (${file}):\n${(r.stdout + r.stderr).slice(0, 4000)}`);
});
