// The SDK's room connection against a real roomd: acks and rejects as promises, typed
// events, spectating, RTT, and reconnection that resends unacknowledged actions with
// their original cs (the server deduplicates).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startRoomd, until, next } from './roomd.mjs';
import { RoomdClient, ActionRejected } from '../dist/index.js';

let node;
before(async () => { node = await startRoomd(); });
after(async () => { await node?.stop(); });

const client = async (name) => {
  const c = new RoomdClient({ baseUrl: node.base });
  await c.createSession(name);
  return c;
};

/**
 * A platform WebSocket whose incoming frames a test may hold back or rewrite, and whose
 * close it may fake: `Tap.filter = (msg) => msg | null` (null drops it).
 */
class Tap {
  static filter = (m) => m;
  static sent = [];
  static last = null;
  static urls = [];
  constructor(url) {
    Tap.urls.push(url);
    this.inner = new WebSocket(url);
    Tap.last = this;
    this.inner.onopen = (ev) => this.onopen?.(ev);
    this.inner.onerror = (ev) => this.onerror?.(ev);
    this.inner.onclose = (ev) => { if (!this.faked) this.onclose?.(ev); };
    this.inner.onmessage = (ev) => {
      const m = Tap.filter(JSON.parse(ev.data));
      if (m) this.onmessage?.({ data: JSON.stringify(m) });
    };
  }
  get readyState() { return this.faked ? 3 : this.inner.readyState; }
  send(text) { Tap.sent.push(JSON.parse(text)); this.inner.send(text); }
  close() { this.inner.close(); }
  /** As if the server had closed with `code` (e.g. 1012 when a node drains). */
  fakeClose(code) { this.faked = true; this.inner.close(); this.onclose?.({ code }); }
}

async function tallyRoom(host, target = 1000) {
  const { roomId } = await host.createRoom({ game: 'tally', options: { target } });
  return roomId;
}

test('sub answers with the room info, then the game view after the start', async () => {
  const host = await client('도윤');
  const roomId = await tallyRoom(host);
  const conn = host.connect();
  try {
    const room = conn.room(roomId);
    const sync = await next(room, 'sync');
    assert.equal(sync.view.roomId, roomId);
    assert.equal(room.info.status, 'waiting');
    assert.equal(room.spectating(host.userId), false);
    const started = next(room, 'view');
    await host.start(roomId);
    const view = await started;
    assert.equal(view.count, 0);
    assert.deepEqual(view.order, [host.userId]);
  } finally { conn.close(); }
});

test('act resolves with its ack; every subscriber gets the update', async () => {
  const host = await client('도윤');
  const watcher = await client('관전자');
  const roomId = await tallyRoom(host);
  await host.start(roomId);
  const conn = host.connect();
  const wconn = watcher.connect();
  try {
    const room = conn.room(roomId);
    const wroom = wconn.room(roomId);
    await until('both views', () => room.view && wroom.view);
    const seen = next(wroom, 'update', (u) => u.view.count === 1);
    const p = room.act({ type: 'bump' });
    const ack = await p;
    assert.equal(ack.cs, p.cs);
    assert.equal(ack.room, roomId);
    assert.ok(ack.seq > 0);
    const upd = await seen;
    assert.equal(upd.view.last, host.userId);
    assert.deepEqual(upd.events, [{ type: 'bumped', by: host.userId, count: 1 }]);
    assert.equal(typeof conn.rtt, 'number');
    assert.deepEqual(conn.unacknowledged(), []);
  } finally { conn.close(); wconn.close(); }
});

test('a spectator watches, and its actions are rejected with a code and a Korean reason', async () => {
  const host = await client('도윤');
  const watcher = await client('관전자');
  const roomId = await tallyRoom(host);
  await host.start(roomId);
  const wconn = watcher.connect();
  try {
    const room = wconn.room(roomId);
    await until('the view', () => room.view);
    const err = await room.act({ type: 'bump' }).catch((e) => e);
    assert.ok(err instanceof ActionRejected, String(err));
    assert.equal(err.code, 'not_seated');
    assert.match(err.reason, /[가-힣]/);
    assert.equal(room.view.count, 0);
  } finally { wconn.close(); }
});

test('an action whose ack was lost is resent with its original cs after a reconnect and applied once', async () => {
  const host = await client('도윤');
  const roomId = await tallyRoom(host);
  await host.start(roomId);
  Tap.sent = [];
  Tap.filter = (m) => m;
  const conn = host.connect({ WebSocket: Tap, backoffMs: 50 });
  try {
    const room = conn.room(roomId);
    await until('the view', () => room.view);
    Tap.filter = (m) => (m.t === 'ack' ? null : m); // the server applies it; we never hear
    const p = room.act({ type: 'bump' });
    await until('the update', () => room.view.count === 1);
    assert.deepEqual(conn.unacknowledged(), [[roomId, p.cs]]);
    Tap.filter = (m) => m;
    const before = conn.reconnects;
    conn.drop();
    const ack = await p;
    assert.equal(ack.cs, p.cs);
    assert.ok(conn.reconnects > before);
    const acts = Tap.sent.filter((m) => m.t === 'act');
    assert.deepEqual(acts.map((m) => m.cs), [p.cs, p.cs], 'resent with the same cs');
    await room.act({ type: 'bump' });
    assert.equal(room.view.count, 2, 'the resend was not applied twice');
  } finally { conn.close(); }
});

test('an action sent while disconnected goes out on reconnect; the room is subscribed again', async () => {
  const host = await client('도윤');
  const roomId = await tallyRoom(host);
  await host.start(roomId);
  Tap.filter = (m) => m;
  const conn = host.connect({ WebSocket: Tap, backoffMs: 50 });
  try {
    const room = conn.room(roomId);
    await until('the view', () => room.view);
    const statuses = [];
    conn.on('status', (s) => statuses.push(s));
    Tap.last.fakeClose(1006);
    const p = room.act({ type: 'bump' });
    const resync = next(room, 'sync');
    await p;
    await resync;
    assert.deepEqual(statuses.slice(0, 3), ['closed', 'connecting', 'open']);
    await until('the count', () => room.view.count === 1);
  } finally { conn.close(); }
});

test('a 1012 close (node draining) reconnects at once and resumes', async () => {
  const host = await client('도윤');
  const roomId = await tallyRoom(host);
  await host.start(roomId);
  Tap.filter = (m) => m;
  const conn = host.connect({ WebSocket: Tap, backoffMs: 5000, maxBackoffMs: 5000 });
  try {
    const room = conn.room(roomId);
    await until('the view', () => room.view);
    const t0 = Date.now();
    Tap.last.fakeClose(1012);
    await next(room, 'sync');
    assert.ok(Date.now() - t0 < 3000, 'not the long backoff');
    await room.act({ type: 'bump' });
  } finally { conn.close(); }
});

test('room_unavailable and room_moved make the client resend the same cs', async () => {
  const host = await client('도윤');
  const roomId = await tallyRoom(host);
  await host.start(roomId);
  Tap.sent = [];
  Tap.filter = (m) => m;
  const conn = host.connect({ WebSocket: Tap, resendMs: 50 });
  try {
    const room = conn.room(roomId);
    await until('the view', () => room.view);
    for (const code of ['room_unavailable', 'room_moved']) {
      Tap.sent = [];
      let swapped = false;
      // The first answer becomes the error a moving room sends.
      Tap.filter = (m) => {
        if (m.t === 'ack' && !swapped) {
          swapped = true;
          return code === 'room_unavailable'
            ? { t: 'error', code, reason: '잠시 후 같은 요청을 다시 보내 주세요', room: roomId, cs: m.cs }
            : { t: 'error', code, reason: '방이 다른 서버로 옮겨졌어요', room: roomId };
        }
        return m;
      };
      const p = room.act({ type: 'bump' });
      const ack = await p;
      assert.equal(ack.cs, p.cs, code);
      const acts = Tap.sent.filter((m) => m.t === 'act').map((m) => m.cs);
      assert.deepEqual(acts, [p.cs, p.cs], code);
      if (code === 'room_moved') assert.ok(Tap.sent.some((m) => m.t === 'sub'), 'subscribed again');
    }
    assert.equal(room.view.count, 2, 'each action applied once');
  } finally { Tap.filter = (m) => m; conn.close(); }
});

test('a refused token stops the connection with an unauthorized event', async () => {
  const c = new RoomdClient({ baseUrl: node.base, token: 'not-a-token' });
  const conn = c.connect({ backoffMs: 50 });
  try {
    await next(conn, 'unauthorized');
    assert.equal(conn.status, 'closed');
  } finally { conn.close(); }
});

test('unsub fails the room\'s pending actions; close fails the rest', async () => {
  const host = await client('도윤');
  const roomId = await tallyRoom(host);
  await host.start(roomId);
  Tap.filter = (m) => (m.t === 'ack' ? null : m);
  const conn = host.connect({ WebSocket: Tap });
  try {
    const room = conn.room(roomId);
    await until('the view', () => room.view);
    const p = room.act({ type: 'bump' });
    room.leave();
    await assert.rejects(p, (e) => e.code === 'unsubscribed');
    const other = conn.room(roomId);
    const q = other.act({ type: 'bump' });
    conn.close();
    await assert.rejects(q, (e) => e.code === 'closed');
    await assert.rejects(other.act({ type: 'bump' }), (e) => e.code === 'closed');
    assert.deepEqual(conn.unacknowledged(), []);
  } finally { Tap.filter = (m) => m; conn.close(); }
});

test('a connection given a room\'s nodeUrl tries that node first and falls back to any node', async () => {
  // A node whose public URL nothing listens on (port 9 on loopback), under a path prefix.
  const odd = await startRoomd({ ROOMD__NODE__PUBLIC_URL: 'http://127.0.0.1:9/n/roomd-a/' });
  try {
    const host = new RoomdClient({ baseUrl: odd.base });
    await host.createSession('도윤');
    const { roomId } = await host.createRoom({ game: 'tally', options: { target: 1000 } });
    const info = await host.room(roomId);
    assert.equal(info.nodeUrl, 'http://127.0.0.1:9/n/roomd-a', 'the setting, without its trailing slash');
    await host.start(roomId);
    Tap.urls = [];
    Tap.filter = (m) => m;
    const conn = host.connect({ WebSocket: Tap, nodeUrl: info.nodeUrl, backoffMs: 20 });
    try {
      const room = conn.room(roomId);
      await until('the view', () => room.view);
      await room.act({ type: 'bump' });
      assert.match(Tap.urls[0], /^ws:\/\/127\.0\.0\.1:9\/n\/roomd-a\/ws\?token=/, 'the owner first');
      assert.ok(Tap.urls.slice(1).some((u) => u.startsWith(odd.base.replace('http:', 'ws:') + '/ws?token=')), Tap.urls.join(' '));
    } finally { conn.close(); }
  } finally { await odd.stop(); }
});

test('a room stays on its socket while the owner its info names cannot be reached', async () => {
  // The waiting room's sync names its owner (nodeUrl, a closed port): the SDK tries it
  // without leaving the room's socket, then keeps the room where it is.
  const odd = await startRoomd({ ROOMD__NODE__PUBLIC_URL: 'http://127.0.0.1:9' });
  try {
    const host = new RoomdClient({ baseUrl: odd.base });
    await host.createSession('도윤');
    const { roomId } = await host.createRoom({ game: 'tally', options: { target: 1000 } });
    Tap.urls = [];
    Tap.sent = [];
    Tap.filter = (m) => m;
    const conn = host.connect({ WebSocket: Tap, backoffMs: 20 });
    try {
      const room = conn.room(roomId, {}); // info naming no owner: the base URL's socket
      await until('the room info', () => room.info);
      assert.equal(room.info.nodeUrl, 'http://127.0.0.1:9');
      await until('a try at the owner', () => Tap.urls.some((u) => u.startsWith('ws://127.0.0.1:9/ws?')));
      await host.start(roomId);
      await until('the view', () => room.view);
      await room.act({ type: 'bump' });
      assert.equal(room.nodeUrl, odd.base);
      assert.deepEqual(Tap.sent.filter((m) => m.t === 'unsub' || m.t === 'sub').map((m) => m.t), ['sub'], 'never left its socket');
      assert.deepEqual(conn.sockets().map((s) => s.url), [odd.base]);
    } finally { conn.close(); }
  } finally { await odd.stop(); }
});

test('conn.room looks the owner up unless given the room\'s info; direct: false never does', async () => {
  const odd = await startRoomd({ ROOMD__NODE__PUBLIC_URL: 'http://127.0.0.1:9' });
  try {
    const lookups = [];
    const counting = (input, init) => {
      if (/\/api\/rooms\/r_/.test(String(input))) lookups.push(String(input));
      return fetch(input, init);
    };
    const host = new RoomdClient({ baseUrl: odd.base, fetch: counting });
    await host.createSession('도윤');
    const { roomId } = await host.createRoom({ game: 'tally', options: { target: 1000 } });
    await host.start(roomId);
    const owner = 'ws://127.0.0.1:9/';
    const cases = [
      // [connect options, how to watch, lookups expected, owner tried]
      [{}, (c) => c.room(roomId), true, true],
      [{}, (c) => c.room(roomId, { nodeUrl: undefined }), false, false],
      [{ direct: false }, (c) => c.room(roomId), false, false],
    ];
    for (const [opts, watch, looksUp, triesOwner] of cases) {
      lookups.length = 0;
      Tap.urls = [];
      Tap.filter = (m) => m;
      const conn = host.connect({ WebSocket: Tap, backoffMs: 20, ...opts });
      try {
        const room = watch(conn);
        await until('the view', () => room.view);
        await room.act({ type: 'bump' });
        assert.equal(room.nodeUrl, odd.base);
      } finally { conn.close(); }
      const what = `${JSON.stringify(opts)} ${watch}`;
      assert.equal(lookups.length > 0, looksUp, `${what}: ${lookups}`);
      assert.equal(Tap.urls.some((u) => u.startsWith(owner)), triesOwner, `${what}: ${Tap.urls.join(' ')}`);
    }
  } finally { await odd.stop(); }
});

test('the socket URL keeps the base URL\'s path prefix', () => {
  const c = new RoomdClient({ baseUrl: 'https://rooms.example/games/', token: 't' });
  assert.equal(c.socketUrl(), 'wss://rooms.example/games/ws?token=t');
  assert.equal(c.socketUrl('http://10.0.3.7:8080'), 'ws://10.0.3.7:8080/ws?token=t');
});
