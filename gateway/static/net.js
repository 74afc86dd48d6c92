// Session, HTTP API and the WebSocket with automatic reconnects (PROTOCOL.md).

const KEY = 'roomd.session';

export const session = {
  get() {
    try { return JSON.parse(localStorage.getItem(KEY) || 'null'); } catch { return null; }
  },
  set(s) { localStorage.setItem(KEY, JSON.stringify(s)); },
  clear() { localStorage.removeItem(KEY); },
};

export class ApiError extends Error {
  constructor(status, code, reason) { super(reason); this.status = status; this.code = code; }
}

export async function api(method, path, body) {
  const s = session.get();
  const headers = {};
  if (s) headers.Authorization = `Bearer ${s.token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    throw new ApiError(0, 'network', '서버에 연결할 수 없어요');
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) {
    throw new ApiError(res.status, data?.code || 'http_' + res.status, data?.reason || `요청이 실패했어요 (${res.status})`);
  }
  return data;
}

/**
 * One WebSocket for the whole page. Subscriptions and unacknowledged actions survive
 * reconnects: after a drop or a 1012 close the socket comes back, `sub`s every room
 * again and resends each pending `act` with its original `cs` (the server dedupes).
 */
export class Socket {
  constructor(token, handlers) {
    this.token = token;
    this.handlers = handlers; // {message(msg), status(state), unauthorized()}
    this.rooms = new Set();
    this.pending = new Map(); // cs -> {room, a}
    this.ws = null;
    this.opened = false;
    this.retry = 0;
    this.closed = false;
    this.reconnects = 0;
    this.connect();
  }

  connect() {
    if (this.closed) return;
    const proto = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(`${proto}://${location.host}/ws?token=${encodeURIComponent(this.token)}`);
    this.ws = ws;
    this.handlers.status('connecting');
    ws.onopen = () => {
      this.opened = true;
      this.retry = 0;
      this.handlers.status('open');
      for (const room of this.rooms) this.raw({ t: 'sub', room });
      for (const [cs, p] of this.pending) this.raw({ t: 'act', room: p.room, cs, a: p.a });
    };
    ws.onmessage = (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch { return; }
      if (msg.t === 'ack' || msg.t === 'reject') this.pending.delete(msg.cs);
      if (msg.t === 'error' && msg.code === 'room_unavailable' && this.pending.has(msg.cs)) {
        const p = this.pending.get(msg.cs);
        setTimeout(() => this.send({ t: 'act', room: p.room, cs: msg.cs, a: p.a }), 500);
      }
      this.handlers.message(msg);
    };
    ws.onclose = async (ev) => {
      if (this.ws !== ws) return;
      this.handlers.status('closed');
      if (this.closed) return;
      if (ev.code === 1008 || !this.opened) {
        // Refused before the upgrade (bad token) or by policy: check the token once.
        try {
          const r = await fetch('/api/me/games?limit=1', { headers: { Authorization: `Bearer ${this.token}` } });
          if (r.status === 401) { this.handlers.unauthorized(); return; }
        } catch { /* server down: keep retrying */ }
      }
      this.opened = false;
      // 1012: the node drains; come back at once (to any node). Otherwise back off.
      const delay = ev.code === 1012 ? 100 : Math.min(5000, 250 * 2 ** this.retry++);
      this.reconnects++;
      setTimeout(() => this.connect(), delay);
    };
  }

  raw(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) { this.ws.send(JSON.stringify(msg)); return true; }
    return false;
  }

  send(msg) { return this.raw(msg); }

  sub(room) { this.rooms.add(room); this.raw({ t: 'sub', room }); }

  unsub(room) {
    this.rooms.delete(room);
    for (const [cs, p] of this.pending) if (p.room === room) this.pending.delete(cs);
    this.raw({ t: 'unsub', room });
  }

  /** Sends an action; returns its `cs`. Kept until acked or rejected. */
  act(room, a) {
    const cs = nextCs(room);
    this.pending.set(cs, { room, a });
    this.raw({ t: 'act', room, cs, a });
    return cs;
  }

  /** Drops the connection as a network failure would (tests, the "다시 연결" button). */
  drop() { if (this.ws) this.ws.close(); }

  close() { this.closed = true; if (this.ws) this.ws.close(); }
}

/** `cs` must never repeat for a room, even across reloads: ms time, kept increasing. */
function nextCs(room) {
  const key = `roomd.cs.${room}`;
  const last = Number(localStorage.getItem(key) || 0);
  const cs = Math.max(last + 1, Date.now());
  localStorage.setItem(key, String(cs));
  return cs;
}
