// The SDK on a real cluster (roomd nodes sharing the Redis at REDIS_URL, each naming its
// own address as ROOMD__NODE__PUBLIC_URL): a room's socket goes to its owner, one socket
// per node the player needs, follows the room when its owner drains, and falls back to
// the base node when the owner cannot be reached.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { freePort, newCluster, startClusterNode, until, untilAllSee } from './roomd.mjs';
import { RoomdClient } from '../dist/index.js';

/** Every node a test started, stopped at the end whatever happened. */
const started = [];
after(async () => { await Promise.all(started.map((n) => n.stop())); });

async function startNodes(cluster, specs) {
  const nodes = await Promise.all(specs.map(([id, opts]) => startClusterNode(cluster, id, opts)));
  started.push(...nodes);
  await untilAllSee(nodes);
  return nodes;
}

/** A started tally room of `host` (seated), and the id of the node that owns it. */
async function tallyRoom(host) {
  const { roomId } = await host.createRoom({ game: 'tally', options: { target: null } });
  await host.start(roomId);
  const info = await host.room(roomId);
  assert.ok(info.node, `room info names its owner: ${JSON.stringify(info)}`);
  return { roomId, owner: info.node };
}

/** A WebSocket that records the URL of every socket the SDK opens. */
function recordingWebSocket() {
  const urls = [];
  class Recording extends WebSocket {
    constructor(url) {
      super(url);
      urls.push(url);
    }
  }
  return { Recording, urls };
}

/** A WebSocket that hides the server's `room_moved` frames from the SDK (as if lost). */
class WithoutRoomMoved extends WebSocket {
  set onmessage(fn) {
    super.onmessage = (ev) => {
      if (JSON.parse(ev.data).code !== 'room_moved') fn(ev);
    };
  }
}

/** The value of the unlabelled sample `name` on `node`'s `/metrics`. */
async function metric(node, name) {
  const text = await (await fetch(`${node.base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? null : Number(line.split(' ')[1]);
}

/** Bumps once and checks the ack and the count it brought. */
async function bump(room) {
  const before = room.view.count;
  const ack = await room.act({ type: 'bump' });
  assert.equal(ack.room, room.roomId);
  await until(`count ${before + 1} in ${room.roomId}`, () => room.view.count >= before + 1);
  assert.equal(room.view.count, before + 1, 'applied once');
  return ack;
}

/** The connection's sockets that carry rooms: `{url: [rooms…]}`; asserts one socket per node. */
function socketsByNode(conn) {
  const carrying = conn.sockets().filter((s) => s.rooms.length > 0);
  const urls = carrying.map((s) => s.url);
  assert.equal(new Set(urls).size, urls.length, `one socket per node: ${JSON.stringify(conn.sockets())}`);
  return Object.fromEntries(carrying.map((s) => [s.url, [...s.rooms].sort()]));
}

test('rooms connect to their owners, one socket per node, and follow a room when its owner drains', async () => {
  const cluster = newCluster();
  const nodes = await startNodes(cluster, [['sa'], ['sb'], ['sc']]);
  const byId = Object.fromEntries(nodes.map((n) => [n.id, n]));
  const base = nodes[0];
  const host = new RoomdClient({ baseUrl: base.base });
  await host.createSession('도윤');

  // Rooms until two share an owner other than the base node (x) and one is on the third
  // node (y): placement is uniform, so 40 rooms miss such a spread about once in 10^6.
  const rooms = [];
  let x;
  let y;
  for (let i = 0; i < 40 && !(x && y); i++) {
    rooms.push(await tallyRoom(host));
    const count = (id) => rooms.filter((r) => r.owner === id).length;
    x = ['sb', 'sc'].find((id) => count(id) >= 2);
    y = x && ['sb', 'sc'].find((id) => id !== x && count(id) >= 1);
  }
  assert.ok(x && y, `no spread of rooms over the nodes in 40: ${JSON.stringify(rooms)}`);
  const [x1, x2] = rooms.filter((r) => r.owner === x).map((r) => r.roomId);
  const y1 = rooms.find((r) => r.owner === y).roomId;
  const X = byId[x];
  const Y = byId[y];

  const { Recording, urls } = recordingWebSocket();
  const conn = host.connect({ WebSocket: Recording, idleMs: 100 });
  try {
    const chans = [x1, x2, y1].map((id) => conn.room(id));
    await until('every view', () => chans.every((c) => c.view));
    const [cx1, cx2, cy1] = chans;
    assert.equal(cx1.nodeUrl, X.publicUrl, 'the room is carried by its owner');
    assert.equal(cx2.nodeUrl, X.publicUrl);
    assert.equal(cy1.nodeUrl, Y.publicUrl);
    for (const c of chans) await bump(c);

    // Two rooms on one node share its socket; the base node's socket, needed by no room,
    // has closed: the server sees one socket of this user on each owner and none elsewhere.
    await until('the base socket to idle out', () => conn.sockets().length === 2);
    assert.deepEqual(socketsByNode(conn), { [X.publicUrl]: [x1, x2].sort(), [Y.publicUrl]: [y1] });
    await until('one session on each owner, none on the base node', async () =>
      (await metric(X, 'roomd_sessions')) === 1 && (await metric(Y, 'roomd_sessions')) === 1 && (await metric(base, 'roomd_sessions')) === 0);
    assert.equal(urls.filter((u) => u.startsWith(X.base.replace('http:', 'ws:'))).length, 1, `one socket opened to ${x}: ${urls}`);

    // The owner of x1 and x2 drains (SIGTERM). An action sent as it starts is acknowledged
    // once, and both rooms follow their new owners (whoever placement picks).
    X.signal('SIGTERM');
    const during = await bump(cx1);
    await until('both rooms to leave the drained node', async () => {
      for (const c of [cx1, cx2]) {
        if (c.nodeUrl === null || c.nodeUrl === X.publicUrl) return false;
        const info = await host.room(c.roomId);
        if (info.node === x || c.nodeUrl !== info.nodeUrl) return false;
      }
      return true;
    }, 30000);
    for (const c of [cx1, cx2]) {
      const info = await host.room(c.roomId);
      assert.notEqual(info.node, x);
      assert.equal(c.nodeUrl, info.nodeUrl, `${c.roomId}'s socket is at its new owner ${info.node}`);
      assert.ok(urls.some((u) => u.startsWith(c.nodeUrl.replace('http:', 'ws:') + '/ws?')), `a socket was opened at the new owner: ${urls}`);
    }
    // The game goes on after the move: acknowledged in order, each applied once.
    const after1 = await bump(cx1);
    assert.ok(after1.seq > during.seq, 'seqs go on from the log');
    await bump(cx2);
    await bump(cy1);
    assert.equal(cy1.nodeUrl, Y.publicUrl, 'a room on another node stays where it is');
    socketsByNode(conn);
    // The drained node's socket, needed by no room, closes (idle, or the node's 1012).
    await until('no socket left at the drained node', () => !conn.sockets().some((s) => s.url === X.publicUrl));
    assert.equal(await X.exited, 0, 'the drained node exits by itself');
  } finally {
    conn.close();
  }
});

test('a room whose owner cannot be reached is played through the base node', async () => {
  const cluster = newCluster();
  // Node fb names an address nothing listens on (a closed loopback port) as its own.
  const closed = `http://127.0.0.1:${await freePort()}`;
  const [base, unreachable] = await startNodes(cluster, [['fa'], ['fb', { publicUrl: closed }]]);
  const host = new RoomdClient({ baseUrl: base.base });
  await host.createSession('도윤');
  let roomId;
  // Placement is uniform over two nodes: 30 rooms all miss fb once in 10^9.
  for (let i = 0; i < 30 && !roomId; i++) {
    const r = await tallyRoom(host);
    if (r.owner === unreachable.id) roomId = r.roomId;
  }
  assert.ok(roomId, 'no room landed on fb');
  assert.equal((await host.room(roomId)).nodeUrl, closed, 'room info names the unreachable address');

  const { Recording, urls } = recordingWebSocket();
  const conn = host.connect({ WebSocket: Recording, backoffMs: 20 });
  try {
    const room = conn.room(roomId);
    await until('the view', () => room.view);
    assert.ok(urls.some((u) => u.startsWith(closed.replace('http:', 'ws:') + '/ws?')), `the owner was tried first: ${urls}`);
    assert.equal(room.nodeUrl, base.base, 'the room fell back to the base node');
    for (let i = 0; i < 3; i++) await bump(room);
    assert.deepEqual(socketsByNode(conn), { [base.base]: [roomId] });
    // A second room on that owner falls back at once (the address is avoided), on the same socket.
    let second;
    for (let i = 0; i < 30 && !second; i++) {
      const r = await tallyRoom(host);
      if (r.owner === unreachable.id) second = r.roomId;
    }
    assert.ok(second, 'no second room landed on fb');
    const tries = urls.length;
    const room2 = conn.room(second);
    await until('the second view', () => room2.view);
    await bump(room2);
    assert.equal(urls.length, tries, 'no new socket: the base node\'s carries both rooms');
    assert.deepEqual(socketsByNode(conn), { [base.base]: [roomId, second].sort() });
    assert.equal(conn.status, 'open');
  } finally {
    conn.close();
  }
});

/**
 * Three nodes `ids` and, made through the first (the base node), a tally room another
 * node owns: `{ host, found, owner }`.
 */
async function roomOffTheBaseNode(ids) {
  const nodes = await startNodes(newCluster(), ids.map((id) => [id]));
  const base = nodes[0];
  const host = new RoomdClient({ baseUrl: base.base });
  await host.createSession('도윤');
  let found;
  // A room owned by a node other than the base one: 40 tries miss both once in 10^19.
  for (let i = 0; i < 40 && !found; i++) {
    const r = await tallyRoom(host);
    if (r.owner !== base.id) found = r;
  }
  assert.ok(found, 'no room landed off the base node');
  return { host, found, owner: nodes.find((n) => n.id === found.owner) };
}

test('a room whose owner dies follows it to the node that takes it over', async () => {
  const { host, found, owner: dead } = await roomOffTheBaseNode(['ka', 'kb', 'kc']);
  const conn = host.connect();
  try {
    const room = conn.room(found.roomId);
    await until('the view', () => room.view);
    assert.equal(room.nodeUrl, dead.publicUrl, 'the room is carried by its owner');
    await bump(room);
    await bump(room);
    // The owner dies without a word (SIGKILL): the cluster gives its room to another node,
    // and the socket follows it there; the two acknowledged bumps survive.
    await dead.stop();
    const ack = await bump(room);
    assert.equal(ack.seq, 3, 'the log went on where it stopped');
    await until('the room on its new owner', async () => {
      const info = await host.room(found.roomId);
      return info.node !== dead.id && room.nodeUrl === info.nodeUrl;
    }, 30000);
    assert.notEqual(room.nodeUrl, dead.publicUrl);
    await bump(room);
    socketsByNode(conn);
  } finally {
    conn.close();
  }
});

test('a room follows its owner\'s 1012 alone when the owner drains (no room_moved heard)', async () => {
  const { host, found, owner: drained } = await roomOffTheBaseNode(['da', 'db', 'dc']);
  const heard = [];
  const conn = host.connect({ WebSocket: WithoutRoomMoved });
  conn.on('message', (m) => heard.push(m.code ?? m.t));
  try {
    const room = conn.room(found.roomId);
    await until('the view', () => room.view);
    assert.equal(room.nodeUrl, drained.publicUrl, 'the room is carried by its owner');
    await bump(room);
    drained.signal('SIGTERM');
    // Its socket closes with 1012: the room is looked up again and goes to its new owner.
    await until('the room on its new owner', async () => {
      const info = await host.room(found.roomId);
      return info.node !== drained.id && room.nodeUrl === info.nodeUrl;
    }, 30000);
    assert.ok(!heard.includes('room_moved'), 'the SDK never saw room_moved');
    await bump(room);
    await bump(room);
    assert.equal(room.view.count, 3);
    socketsByNode(conn);
    await drained.exited;
  } finally {
    conn.close();
  }
});
