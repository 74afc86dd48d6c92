// The WebSocket half of the protocol: one socket for many rooms, `act` with automatic
// `cs`, acks/rejects as promises, typed room channels, and reconnection that resumes
// every subscription and resends each unacknowledged action with its ORIGINAL `cs` (the
// server deduplicates, so a resend is never applied twice).
import { isRoomInfo } from './types.js';
/** A `reject`: the action was definitely not applied. `code` is stable, `reason` Korean. */
export class ActionRejected extends Error {
    room;
    cs;
    code;
    reason;
    constructor(msg) {
        super(msg.reason);
        this.name = 'ActionRejected';
        this.room = msg.room;
        this.cs = msg.cs;
        this.code = msg.code;
        this.reason = msg.reason;
    }
}
/** `cs` = milliseconds since the epoch, kept increasing per room (in memory). */
export class ClockCs {
    last = new Map();
    next(room) {
        const cs = Math.max((this.last.get(room) ?? 0) + 1, Date.now());
        this.last.set(room, cs);
        return cs;
    }
}
class Emitter {
    listeners = new Map();
    on(event, fn) {
        let set = this.listeners.get(event);
        if (!set)
            this.listeners.set(event, (set = new Set()));
        set.add(fn);
        return () => set?.delete(fn);
    }
    emit(event, value) {
        for (const fn of this.listeners.get(event) ?? [])
            fn(value);
    }
}
const RTT_ALPHA = 0.2;
/** One WebSocket to roomd for all of a user's rooms. Made by [`RoomdClient.connect`]. */
export class Connection extends Emitter {
    client;
    status = 'connecting';
    /** Reconnections so far. */
    reconnects = 0;
    /** Round-trip time of actions (send → ack), an EMA with alpha 0.2; `null` until one. */
    rtt = null;
    token;
    ws = null;
    opened = false;
    retry = 0;
    closed = false;
    timer;
    rooms = new Map();
    pending = new Map();
    Ws;
    cs;
    opts;
    nodeUrl;
    toNode = true;
    constructor(client, opts = {}) {
        super();
        this.client = client;
        const Ws = opts.WebSocket ?? globalThis.WebSocket;
        if (!Ws)
            throw new Error('no WebSocket: pass ConnectOptions.WebSocket (Node 20: --experimental-websocket)');
        this.Ws = Ws;
        this.cs = opts.cs ?? new ClockCs();
        this.opts = { backoffMs: opts.backoffMs ?? 250, maxBackoffMs: opts.maxBackoffMs ?? 5000, resendMs: opts.resendMs ?? 500 };
        this.token = client.token ?? '';
        this.nodeUrl = opts.nodeUrl?.replace(/\/+$/, '');
        this.connect();
    }
    /** Subscribes to a room (as its player if seated, else as spectator) and returns its channel. */
    room(roomId) {
        let ch = this.rooms.get(roomId);
        if (!ch) {
            ch = new RoomChannel(this, roomId);
            this.rooms.set(roomId, ch);
            this.raw({ t: 'sub', room: roomId });
        }
        return ch;
    }
    /** Stops watching a room; its unacknowledged actions fail with `unsubscribed`. */
    unsub(roomId) {
        if (!this.rooms.delete(roomId))
            return;
        this.failPending(roomId, 'unsubscribed', '방에서 나갔어요');
        this.raw({ t: 'unsub', room: roomId });
    }
    /**
     * Sends an action with a fresh `cs`. Resolves with the `ack`; rejects with
     * [`ActionRejected`] on a `reject`. Kept (and resent after reconnects) until one arrives.
     */
    act(roomId, a) {
        const cs = this.cs.next(roomId);
        let p;
        const promise = new Promise((resolve, reject) => {
            p = { room: roomId, a, sentAt: Date.now(), resolve, reject };
        });
        promise.cs = cs;
        if (this.closed) {
            p.reject(new ActionRejected({ room: roomId, cs, code: 'closed', reason: '연결을 닫았어요' }));
            return promise;
        }
        this.pending.set(key(roomId, cs), p);
        this.raw({ t: 'act', room: roomId, cs, a });
        return promise;
    }
    /**
     * Sends a quick-chat phrase (a `key` of the game's `chatPhrases`) to a room you sit in.
     * Fire and forget: it comes back as a `chat` event to every watcher, or as an `error`
     * event (`chat_off`, `rate_limited`: one per 2 s, `not_seated`). `false` when the socket
     * is not open (a phrase is of the moment: it is not resent after a reconnect).
     */
    chat(roomId, phrase) {
        return this.raw({ t: 'chat', room: roomId, phrase });
    }
    /** Actions sent and not yet acknowledged or rejected: `[room, cs]`. */
    unacknowledged() {
        return [...this.pending.keys()].map(unkey);
    }
    /** Drops the socket as a network failure would (it reconnects). */
    drop() {
        this.ws?.close();
    }
    /** Closes for good; unacknowledged actions fail with `closed`. */
    close() {
        this.closed = true;
        clearTimeout(this.timer);
        for (const room of [...new Set([...this.pending.values()].map((p) => p.room))]) {
            this.failPending(room, 'closed', '연결을 닫았어요');
        }
        this.ws?.close();
        this.setStatus('closed');
    }
    /** Sends one message if the socket is open; `false` otherwise (it is resent on reconnect). */
    raw(msg) {
        if (this.ws && this.ws.readyState === 1) {
            this.ws.send(JSON.stringify(msg));
            return true;
        }
        return false;
    }
    setStatus(s) {
        this.status = s;
        this.emit('status', s);
    }
    connect() {
        if (this.closed)
            return;
        const ws = new this.Ws(this.client.socketUrl(this.nodeUrl && this.toNode ? this.nodeUrl : undefined));
        this.ws = ws;
        this.setStatus('connecting');
        ws.onopen = () => {
            this.opened = true;
            this.retry = 0;
            this.setStatus('open');
            for (const room of this.rooms.keys())
                this.raw({ t: 'sub', room });
            this.resend(() => true);
        };
        ws.onmessage = (ev) => {
            let msg;
            try {
                msg = JSON.parse(String(ev.data));
            }
            catch {
                return;
            }
            this.onMessage(msg);
        };
        const lost = (code) => {
            if (this.ws !== ws)
                return;
            this.ws = null;
            if (this.closed)
                return;
            if (this.nodeUrl)
                this.toNode = !this.toNode;
            this.setStatus('closed');
            void this.reconnectAfter(code);
        };
        ws.onclose = (ev) => lost(ev.code);
        // Some platforms (Node's undici) fire only `error` when the upgrade is refused.
        ws.onerror = () => {
            if (ws.readyState !== 1)
                lost(1006);
        };
    }
    async reconnectAfter(code) {
        if (code === 1008 || !this.opened) {
            // Refused before the upgrade (bad token) or by policy: check the token once.
            try {
                await this.client.request('GET', '/api/me/games?limit=1');
            }
            catch (e) {
                if (e.status === 401) {
                    this.closed = true;
                    this.emit('unauthorized', undefined);
                    return;
                }
            }
        }
        if (this.closed)
            return;
        this.opened = false;
        // 1012: the node drains; come back at once (to any node). Otherwise back off.
        const base = Math.min(this.opts.maxBackoffMs, this.opts.backoffMs * 2 ** this.retry++);
        const delay = code === 1012 ? 100 : base / 2 + Math.random() * (base / 2);
        this.reconnects++;
        this.timer = setTimeout(() => this.connect(), delay);
    }
    resend(which) {
        for (const [k, p] of this.pending) {
            if (!which(p))
                continue;
            p.sentAt = Date.now();
            this.raw({ t: 'act', room: p.room, cs: unkey(k)[1], a: p.a });
        }
    }
    failPending(room, code, reason) {
        for (const [k, p] of this.pending) {
            if (p.room !== room)
                continue;
            this.pending.delete(k);
            p.reject(new ActionRejected({ room, cs: unkey(k)[1], code, reason }));
        }
    }
    onMessage(msg) {
        this.emit('message', msg);
        if (msg.t === 'ack' || msg.t === 'reject') {
            const k = key(msg.room, msg.cs);
            const p = this.pending.get(k);
            if (p) {
                this.pending.delete(k);
                if (msg.t === 'ack') {
                    const sample = Date.now() - p.sentAt;
                    this.rtt = this.rtt === null ? sample : RTT_ALPHA * sample + (1 - RTT_ALPHA) * this.rtt;
                    p.resolve(msg);
                }
                else {
                    p.reject(new ActionRejected(msg));
                }
            }
        }
        else if (msg.t === 'error') {
            if (msg.code === 'room_unavailable' && msg.room !== undefined && msg.cs !== undefined) {
                // The action's fate is unknown: send the same cs again (dedupe makes it safe).
                const room = msg.room;
                const k = key(room, msg.cs);
                setTimeout(() => this.resend((p) => this.pending.get(k) === p), this.opts.resendMs);
            }
            else if (msg.code === 'room_moved' && msg.room !== undefined) {
                // The room lives elsewhere now: subscribe again (the server finds it) and resend.
                const room = msg.room;
                setTimeout(() => {
                    if (this.rooms.has(room))
                        this.raw({ t: 'sub', room });
                    this.resend((p) => p.room === room);
                }, this.opts.resendMs);
            }
            else if (msg.room === undefined) {
                this.emit('error', msg);
            }
        }
        const room = 'room' in msg && msg.room !== undefined ? this.rooms.get(msg.room) : undefined;
        room?.deliver(msg);
    }
}
function key(room, cs) {
    return `${cs} ${room}`;
}
function unkey(k) {
    const i = k.indexOf(' ');
    return [k.slice(i + 1), Number(k.slice(0, i))];
}
/** One subscribed room, typed by its game: `conn.room<'tally'>(id)`. */
export class RoomChannel extends Emitter {
    conn;
    roomId;
    /** The latest game view (null before the game starts or the first sync). */
    view = null;
    /** The room's info, when the server sent it (before the start, and on seat changes). */
    info = null;
    seq = 0;
    result = null;
    constructor(conn, roomId) {
        super();
        this.conn = conn;
        this.roomId = roomId;
    }
    /** Whether this user watches without a seat (known once the room's info arrived). */
    spectating(userId) {
        if (!this.info)
            return null;
        return !this.info.seats.some((s) => s.userId === userId);
    }
    /** Sends a game action; see [`Connection.act`]. */
    act(a) {
        return this.conn.act(this.roomId, a);
    }
    /** Sends a quick-chat phrase; see [`Connection.chat`]. */
    chat(phrase) {
        return this.conn.chat(this.roomId, phrase);
    }
    /** Stops watching. */
    leave() {
        this.conn.unsub(this.roomId);
    }
    /** @internal */
    deliver(msg) {
        switch (msg.t) {
            case 'sync':
                this.seq = msg.seq;
                if (isRoomInfo(msg.view))
                    this.info = msg.view;
                else {
                    this.view = msg.view;
                    this.emit('view', this.view);
                }
                this.emit('sync', msg);
                break;
            case 'update':
                this.seq = msg.seq;
                this.view = msg.view;
                this.emit('update', msg);
                this.emit('view', this.view);
                break;
            case 'room':
                this.info = { ...this.info, ...msg.info };
                this.emit('room', msg);
                break;
            case 'result':
                this.result = msg;
                this.emit('result', msg);
                break;
            case 'ack':
                this.emit('ack', msg);
                break;
            case 'reject':
                this.emit('reject', msg);
                break;
            case 'error':
                this.emit('error', msg);
                break;
            case 'chat':
                this.emit('chat', msg);
                break;
        }
    }
}
