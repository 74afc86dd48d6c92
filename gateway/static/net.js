// The page's session (localStorage) and its use of the roomd SDK (@roomd/client, built
// into ./sdk/ from clients/js): the HTTP calls and the reconnecting connection. No
// protocol code lives here: acks, resends with the original cs, 1012 and room_moved
// handling are the SDK's, and so is where each room's socket goes (straight to the
// room's owner when room info names its `nodeUrl`, following the room when it moves,
// through this page's own node when the owner cannot be reached: one socket per node).

import { RoomdClient, RoomdError } from './sdk/index.js';

export { replayScenes } from './sdk/index.js';

const KEY = 'roomd.session';

export const session = {
  get() {
    try { return JSON.parse(localStorage.getItem(KEY) || 'null'); } catch { return null; }
  },
  set(s) { localStorage.setItem(KEY, JSON.stringify(s)); },
  clear() { localStorage.removeItem(KEY); },
};

export const ApiError = RoomdError;

/** One HTTP call with the session's token; throws `ApiError` (status, code, Korean reason). */
export function api(method, path, body) {
  return new RoomdClient({ token: session.get()?.token ?? null }).request(method, path, body);
}

/** `cs` must never repeat for a room, even across reloads: ms time, kept increasing. */
const storedCs = {
  next(room) {
    const key = `roomd.cs.${room}`;
    const last = Number(localStorage.getItem(key) || 0);
    const cs = Math.max(last + 1, Date.now());
    localStorage.setItem(key, String(cs));
    return cs;
  },
};

/** The page's sockets (one per node its rooms live on): the SDK connection, with the app's handlers. */
export class Socket {
  constructor(token, handlers) {
    this.token = token;
    this.conn = new RoomdClient({ token }).connect({ cs: storedCs });
    this.conn.on('message', (m) => handlers.message(m));
    this.conn.on('status', (s) => handlers.status(s));
    this.conn.on('unauthorized', () => handlers.unauthorized());
    handlers.status(this.conn.status);
  }

  get reconnects() { return this.conn.reconnects; }

  /** Watches a room; `info` (its room info, when the page has it) saves the SDK a lookup of its owner. */
  sub(room, info) { this.conn.room(room, info); }

  unsub(room) { this.conn.unsub(room); }

  /** Sends an action; returns its `cs`. Its ack or reject reaches the screen as a message. */
  act(room, a) {
    const p = this.conn.act(room, a);
    p.catch(() => {}); // rejects are shown from the `reject` message
    return p.cs;
  }

  /** Sends a quick-chat phrase (a key of the game's `chatPhrases`); it comes back as `chat`. */
  chat(room, phrase) { return this.conn.chat(room, phrase); }

  /** Drops the connection as a network failure would (tests, the "다시 연결" button). */
  drop() { this.conn.drop(); }

  close() { this.conn.close(); }
}
