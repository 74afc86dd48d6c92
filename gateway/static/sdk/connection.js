// The WebSocket half of the protocol: one socket per node the user's rooms live on (each
// room's socket at its owner, `nodeUrl` in room info, followed when the room moves, with
// the client's `baseUrl` as the fallback), `act` with automatic `cs`, acks/rejects as
// promises, typed room channels, and reconnection that resumes every subscription and
// resends each unacknowledged action with its ORIGINAL `cs` (the server deduplicates, so
// a resend is never applied twice, whichever node it reaches).
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
/**
 * Lookups of a room that moved before it stays where it is: room info may still name the
 * old owner for a moment (a drained room is claimed on its next request; a dead owner is
 * found gone in ~0.3–1.5 s). Spaced by the reconnect backoff (250 ms doubling: ~8 s in all).
 */
const SETTLE_TRIES = 5;
/**
 * How long a node that could not be reached, or that drains, is not tried again for a
 * room: its rooms use `baseUrl` meanwhile (any node serves every room, through a hop).
 * Doubled for each failure in a row (an address this client can never reach, such as
 * one the page's Content-Security-Policy forbids), up to `AVOID_MAX_MS`.
 */
const AVOID_MS = 30_000;
const AVOID_MAX_MS = 600_000;
/** The least time between two lookups of a room for `room_unavailable` (not a sure move). */
const UNSURE_LOOKUP_MS = 2000;
const STATUS_RANK = { open: 0, connecting: 1, closed: 2 };
/** A base URL in one spelling (origin + path, no trailing slash), so equal nodes share a socket. */
function nodeKey(url) {
    try {
        const u = new URL(url);
        return u.origin + u.pathname.replace(/\/+$/, '');
    }
    catch {
        return url.replace(/\/+$/, '');
    }
}
/**
 * A user's WebSockets to roomd, one per node the user's rooms need (not one per room).
 * Made by [`RoomdClient.connect`].
 *
 * Each room is looked up (`GET /api/rooms/{id}`) and its socket opened at its owner when
 * the info names one (`nodeUrl`): rooms on the same node share that node's socket. When
 * the room moves (`room_moved`, `room_unavailable`, or its node's socket closing with 1012
 * as the node drains) it is looked up again and follows its new owner; when the owner
 * cannot be reached the room falls back to the socket at the client's `baseUrl` (any
 * node serves every room). Actions keep their `cs` wherever they are resent.
 */
export class Connection extends Emitter {
    client;
    status = 'connecting';
    /** Reconnections so far. */
    reconnects = 0;
    /** Round-trip time of actions (send → ack), an EMA with alpha 0.2; `null` until one. */
    rtt = null;
    token;
    closed = false;
    byNode = new Map();
    rooms = new Map();
    routes = new Map();
    /** Nodes not to use for rooms `until` a time (ms since the epoch), and their failures in a row. */
    avoid = new Map();
    pending = new Map();
    Ws;
    cs;
    opts;
    nodeUrl;
    homeKey;
    constructor(client, opts = {}) {
        super();
        this.client = client;
        const Ws = opts.WebSocket ?? globalThis.WebSocket;
        if (!Ws)
            throw new Error('no WebSocket: pass ConnectOptions.WebSocket (Node 20: --experimental-websocket)');
        this.Ws = Ws;
        this.cs = opts.cs ?? new ClockCs();
        this.opts = {
            backoffMs: opts.backoffMs ?? 250,
            maxBackoffMs: opts.maxBackoffMs ?? 5000,
            resendMs: opts.resendMs ?? 500,
            idleMs: opts.idleMs ?? 5000,
            direct: opts.direct ?? true,
        };
        this.token = client.token ?? '';
        this.nodeUrl = opts.nodeUrl?.replace(/\/+$/, '');
        this.homeKey = nodeKey(client.baseUrl);
        // With no room yet, the connection holds the socket at `baseUrl` (status, token check).
        this.tidy();
    }
    /**
     * Subscribes to a room (as its player if seated, else as spectator) and returns its
     * channel. The room's socket goes to its owner: `info` (from `client.room`, `sit`, …)
     * says where, or the room is looked up first.
     */
    room(roomId, info) {
        let ch = this.rooms.get(roomId);
        if (!ch) {
            ch = new RoomChannel(this, roomId);
            this.rooms.set(roomId, ch);
            const route = { node: null, next: null, gen: 0, busy: false, lookedAt: 0, resub: false };
            this.routes.set(roomId, route);
            if (!this.opts.direct)
                this.place(roomId, this.homeKey);
            else if (info)
                this.place(roomId, this.target(info.nodeUrl));
            else
                this.locate(roomId, null);
            this.updateStatus();
        }
        return ch;
    }
    /** Stops watching a room; its unacknowledged actions fail with `unsubscribed`. */
    unsub(roomId) {
        if (!this.rooms.delete(roomId))
            return;
        this.failPending(roomId, 'unsubscribed', '방에서 나갔어요');
        const route = this.routes.get(roomId);
        this.routes.delete(roomId);
        if (route) {
            clearTimeout(route.timer);
            if (route.node !== null)
                this.sendOn(route.node, { t: 'unsub', room: roomId });
        }
        this.tidy();
        this.updateStatus();
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
        // A room not watched goes through `baseUrl`, whose socket this may need to open.
        if (!this.routes.has(roomId))
            this.tidy();
        this.send(roomId, { t: 'act', room: roomId, cs, a });
        return promise;
    }
    /**
     * Sends a quick-chat phrase (a `key` of the game's `chatPhrases`) to a room you sit in.
     * Fire and forget: it comes back as a `chat` event to every watcher, or as an `error`
     * event (`chat_off`, `rate_limited`: one per 2 s, `not_seated`). `false` when the room's
     * socket is not open (a phrase is of the moment: it is not resent after a reconnect).
     */
    chat(roomId, phrase) {
        return this.send(roomId, { t: 'chat', room: roomId, phrase });
    }
    /** Actions sent and not yet acknowledged or rejected: `[room, cs]`. */
    unacknowledged() {
        return [...this.pending.keys()].map(unkey);
    }
    /** The sockets open (or opening, or idling before they close): one per node. */
    sockets() {
        return [...this.byNode.values()].map((s) => ({ url: s.url, status: s.status, rooms: this.roomsOn(s.key) }));
    }
    /** Drops every socket as a network failure would (each reconnects). */
    drop() {
        for (const s of this.byNode.values())
            s.ws?.close();
    }
    /** Closes for good; unacknowledged actions fail with `closed`. */
    close() {
        this.shutDown();
        for (const room of [...new Set([...this.pending.values()].map((p) => p.room))]) {
            this.failPending(room, 'closed', '연결을 닫았어요');
        }
        this.setStatus('closed');
    }
    /**
     * Sends one message now if its socket is open (the socket of its `room`, else the one
     * at `baseUrl`); `false` otherwise (subscriptions and actions are resent on reconnect).
     */
    raw(msg) {
        const room = msg?.room;
        if (typeof room === 'string')
            return this.send(room, msg);
        if (this.sendOn(this.homeKey, msg))
            return true;
        for (const s of this.byNode.values())
            if (this.sendOn(s.key, msg))
                return true;
        return false;
    }
    /** @internal The base URL of the node whose socket carries `roomId`; null while it is looked up. */
    nodeOf(roomId) {
        const node = this.routes.get(roomId)?.node ?? null;
        if (node === null)
            return null;
        return this.byNode.get(node)?.url ?? node;
    }
    // ---- routing: which node's socket carries each room --------------------------------
    /** The socket for a room whose info names `nodeUrl` (absent: the cluster names none). */
    target(nodeUrl) {
        if (!nodeUrl)
            return this.homeKey;
        const k = nodeKey(nodeUrl);
        return this.avoided(k) ? this.homeKey : k;
    }
    avoided(k) {
        return k !== this.homeKey && Date.now() < (this.avoid.get(k)?.until ?? 0);
    }
    /** Node `k` failed (could not be reached, or drains): leave it alone for a while. */
    strike(k) {
        const strikes = (this.avoid.get(k)?.strikes ?? 0) + 1;
        this.avoid.set(k, { until: Date.now() + Math.min(AVOID_MAX_MS, AVOID_MS * 2 ** (strikes - 1)), strikes });
    }
    /**
     * Looks the room's owner up and moves the room to its socket. `settle` (after a move):
     * while the answer has no news (the lookup failed, or it names the node the room just
     * left or one that cannot be used), look again a few times, backing off: the cluster
     * may not have named the new owner yet. The room is served wherever it is meanwhile.
     */
    locate(roomId, settle) {
        const route = this.routes.get(roomId);
        if (!route || this.closed)
            return;
        clearTimeout(route.timer);
        route.timer = undefined;
        route.busy = true;
        route.lookedAt = Date.now();
        const gen = ++route.gen;
        // `undefined`: no answer (network, 5xx, 429); `null`: the room names no owner URL.
        const lookup = this.client.room(roomId).then((info) => info?.nodeUrl ?? null, (e) => (e.status !== undefined && e.status >= 400 && e.status < 500 && e.status !== 429 ? null : undefined));
        void lookup.then((nodeUrl) => {
            if (this.closed || this.routes.get(roomId) !== route || route.gen !== gen)
                return;
            route.busy = false;
            const at = this.target(nodeUrl);
            this.place(roomId, at);
            if (!settle || settle.tries >= SETTLE_TRIES)
                return;
            const named = nodeUrl ? nodeKey(nodeUrl) : null;
            const noNews = nodeUrl === undefined || (named !== null && (named === settle.from || named !== at));
            if (!noNews)
                return;
            const delay = Math.min(this.opts.maxBackoffMs, this.opts.backoffMs * 2 ** settle.tries);
            route.timer = setTimeout(() => this.locate(roomId, { from: settle.from, tries: settle.tries + 1 }), delay);
        });
    }
    /**
     * Looks the room up again after `resendMs`. `moved` (`room_moved`): the room left its
     * node, so look even if a lookup is under way (its answer may predate the move), and
     * until the cluster names the new owner. Otherwise (`room_unavailable`: it may be
     * moving, or its store is slow) one lookup, at most one per `UNSURE_LOOKUP_MS`.
     */
    relocateSoon(roomId, moved) {
        const route = this.routes.get(roomId);
        if (!route || !this.opts.direct)
            return;
        if (!moved && (route.busy || route.timer !== undefined || Date.now() - route.lookedAt < UNSURE_LOOKUP_MS))
            return;
        clearTimeout(route.timer);
        const settle = moved ? { from: route.node ?? this.homeKey, tries: 0 } : null;
        route.timer = setTimeout(() => this.locate(roomId, settle), this.opts.resendMs);
    }
    /**
     * Puts the room on node `at`'s socket: at once if that socket is open (or the room has
     * no socket now), else once it opens, the room staying where it is until then.
     */
    place(roomId, at) {
        const route = this.routes.get(roomId);
        if (!route || this.closed)
            return;
        const resub = route.resub;
        route.resub = false;
        if (route.node === at) {
            route.next = null;
            // Already there; after `room_moved` the server dropped the subscription: again.
            // (A socket not open yet subscribes every room it carries when it opens.)
            if (resub && this.sendOn(at, { t: 'sub', room: roomId }))
                this.resendRoom(roomId);
        }
        else if (route.node === null || this.isOpen(at)) {
            this.moveNow(roomId, route, at);
        }
        else {
            route.next = at;
            this.tidy(); // opens `at`'s socket; `open` moves the room when it does
            // The server dropped the subscription where the room is: take it up again meanwhile.
            if (resub && this.sendOn(route.node, { t: 'sub', room: roomId }))
                this.resendRoom(roomId);
        }
        this.updateStatus();
    }
    /** `unsub` where the room was, `sub` on node `at`'s socket (now or when it opens), actions resent there. */
    moveNow(roomId, route, at) {
        const from = route.node;
        route.node = at;
        route.next = null;
        if (from !== null && from !== at)
            this.sendOn(from, { t: 'unsub', room: roomId });
        this.tidy(); // opens `at`'s socket if need be; the old one idles if nothing else needs it
        if (this.sendOn(at, { t: 'sub', room: roomId }))
            this.resendRoom(roomId);
    }
    /** A room's info in a `sync` or `room` frame names its owner: follow it if it is elsewhere. */
    hint(roomId, nodeUrl) {
        const route = this.routes.get(roomId);
        if (!nodeUrl || !route || route.busy || !this.opts.direct)
            return;
        const at = this.target(nodeUrl);
        if (at !== this.homeKey && at !== route.node && at !== route.next)
            this.place(roomId, at);
    }
    /** The rooms node `k`'s socket carries. */
    roomsOn(k) {
        return [...this.routes].filter(([, r]) => r.node === k).map(([room]) => room);
    }
    isOpen(k) {
        return this.byNode.get(k)?.ws?.readyState === 1;
    }
    /**
     * The nodes whose sockets are needed now: where rooms are, and (`andNext`) where they
     * are going.
     */
    needed(andNext = true) {
        const need = new Set();
        for (const r of this.routes.values()) {
            if (r.node !== null)
                need.add(r.node);
            if (andNext && r.next !== null)
                need.add(r.next);
        }
        // With no room, the socket at `baseUrl` stays (status, token check, socket-level
        // errors), and it carries actions for rooms not watched.
        if (this.routes.size === 0 || [...this.pending.values()].some((p) => !this.routes.has(p.room)))
            need.add(this.homeKey);
        return need;
    }
    /** Opens the sockets needed, and lets the others idle out after `idleMs`. */
    tidy() {
        if (this.closed)
            return;
        const need = this.needed();
        for (const k of need) {
            let s = this.byNode.get(k);
            if (!s) {
                s = { key: k, home: k === this.homeKey, ws: null, url: k, status: 'connecting', opened: false, everOpened: false, retry: 0, toNode: true };
                this.byNode.set(k, s);
                this.open(s);
            }
            clearTimeout(s.idle);
            s.idle = undefined;
        }
        for (const s of this.byNode.values()) {
            if (need.has(s.key) || s.idle !== undefined)
                continue;
            s.idle = setTimeout(() => {
                s.idle = undefined;
                if (!this.needed().has(s.key))
                    this.dispose(s);
            }, this.opts.idleMs);
        }
    }
    /** Forgets a socket and closes it (its late events are ignored: `s.ws` is no longer it). */
    dispose(s) {
        clearTimeout(s.timer);
        clearTimeout(s.idle);
        if (this.byNode.get(s.key) === s)
            this.byNode.delete(s.key);
        const ws = s.ws;
        s.ws = null;
        ws?.close();
        this.updateStatus();
    }
    // ---- sockets ---------------------------------------------------------------------
    open(s) {
        if (this.closed)
            return;
        s.url = s.home && this.nodeUrl && s.toNode ? this.nodeUrl : s.key;
        s.opened = false;
        this.setSocketStatus(s, 'connecting');
        let ws;
        try {
            ws = new this.Ws(this.client.socketUrl(s.url));
        }
        catch {
            // A URL the platform will not connect to (malformed, or refused by the page's
            // Content-Security-Policy): as a socket that could not open.
            s.ws = null;
            setTimeout(() => {
                if (this.byNode.get(s.key) === s && s.ws === null && s.timer === undefined)
                    this.lost(s, 1006);
            }, 0);
            return;
        }
        s.ws = ws;
        ws.onopen = () => {
            if (s.ws !== ws)
                return;
            s.opened = true;
            s.everOpened = true;
            s.retry = 0;
            if (!s.home)
                this.avoid.delete(s.key);
            for (const room of this.roomsOn(s.key))
                this.sendOn(s.key, { t: 'sub', room });
            this.resend((p) => this.socketOf(p.room) === s.key);
            // Rooms waiting for this socket to move here (see `place`).
            for (const [room, route] of this.routes)
                if (route.next === s.key)
                    this.moveNow(room, route, s.key);
            this.setSocketStatus(s, 'open');
        };
        ws.onmessage = (ev) => {
            if (s.ws !== ws)
                return;
            let msg;
            try {
                msg = JSON.parse(String(ev.data));
            }
            catch {
                return;
            }
            this.onMessage(s, msg);
        };
        const lost = (code) => {
            if (s.ws !== ws)
                return;
            s.ws = null;
            this.lost(s, code);
        };
        ws.onclose = (ev) => lost(ev.code);
        // Some platforms (Node's undici) fire only `error` when the upgrade is refused.
        ws.onerror = () => {
            if (ws.readyState !== 1)
                lost(1006);
        };
    }
    lost(s, code) {
        const wasOpen = s.opened;
        s.opened = false;
        if (this.closed || this.byNode.get(s.key) !== s)
            return;
        this.setSocketStatus(s, 'closed');
        if (s.home) {
            if (this.nodeUrl)
                s.toNode = !s.toNode;
            void this.reconnectAfter(s, code, wasOpen);
        }
        else if (code === 1012 || !wasOpen) {
            // The owner drains (1012), or cannot be reached: leave it alone for a while and
            // look its rooms up again; they follow their new owner, or use `baseUrl` meanwhile.
            // A node that was there before may have lost its rooms (a drain, a failover), so
            // its rooms look again until the cluster names their new owner. Rooms that were
            // only going to move here stay where they are.
            this.strike(s.key);
            const rooms = this.roomsOn(s.key);
            for (const route of this.routes.values())
                if (route.next === s.key)
                    route.next = null;
            this.dispose(s);
            if (wasOpen)
                this.reconnects++;
            for (const room of rooms) {
                const route = this.routes.get(room);
                if (route)
                    route.node = null;
                this.locate(room, s.everOpened ? { from: s.key, tries: 0 } : null);
            }
            this.tidy();
            this.updateStatus();
            if (code === 1008)
                void this.checkToken();
        }
        else {
            // Lost after it opened (network, restart): the same node again, backing off; if it
            // does not open, its rooms fall back as above.
            void this.reconnectAfter(s, code, wasOpen);
        }
    }
    async reconnectAfter(s, code, wasOpen) {
        // Refused before the upgrade (bad token?) or closed by policy: check the token once.
        if ((code === 1008 || (s.home && !wasOpen)) && (await this.checkToken()))
            return;
        if (this.closed || this.byNode.get(s.key) !== s)
            return;
        // 1012: the node drains; come back at once (to any node). Otherwise back off.
        const base = Math.min(this.opts.maxBackoffMs, this.opts.backoffMs * 2 ** s.retry++);
        const delay = code === 1012 ? 100 : base / 2 + Math.random() * (base / 2);
        this.reconnects++;
        s.timer = setTimeout(() => {
            s.timer = undefined;
            this.open(s);
        }, delay);
    }
    /** `true` when the token was refused (401): the connection stops and says `unauthorized`. */
    async checkToken() {
        try {
            await this.client.request('GET', '/api/me/games?limit=1');
        }
        catch (e) {
            if (e.status === 401 && !this.closed) {
                this.shutDown();
                this.setStatus('closed');
                this.emit('unauthorized', undefined);
                return true;
            }
        }
        return this.closed;
    }
    /** Stops every socket and timer for good. */
    shutDown() {
        this.closed = true;
        for (const r of this.routes.values())
            clearTimeout(r.timer);
        for (const s of [...this.byNode.values()]) {
            clearTimeout(s.timer);
            clearTimeout(s.idle);
            const ws = s.ws;
            s.ws = null;
            ws?.close();
        }
        this.byNode.clear();
    }
    setSocketStatus(s, status) {
        s.status = status;
        this.updateStatus();
    }
    /**
     * The connection's status: the worst of the sockets that carry its rooms (a room being
     * looked up: connecting; a socket a room will move to once it opens does not count).
     */
    updateStatus() {
        if (this.closed)
            return;
        let worst = 'open';
        const worse = (st) => {
            if (STATUS_RANK[st] > STATUS_RANK[worst])
                worst = st;
        };
        for (const k of this.needed(false))
            worse(this.byNode.get(k)?.status ?? 'connecting');
        for (const r of this.routes.values())
            if (r.node === null)
                worse('connecting');
        if (worst !== this.status)
            this.setStatus(worst);
    }
    setStatus(s) {
        this.status = s;
        this.emit('status', s);
    }
    // ---- messages --------------------------------------------------------------------
    /** The node whose socket carries messages about `roomId` (null: none now). */
    socketOf(roomId) {
        const route = this.routes.get(roomId);
        return route ? route.node : this.homeKey;
    }
    send(roomId, msg) {
        const at = this.socketOf(roomId);
        return at !== null && this.sendOn(at, msg);
    }
    sendOn(at, msg) {
        const ws = this.byNode.get(at)?.ws;
        if (ws && ws.readyState === 1) {
            ws.send(JSON.stringify(msg));
            return true;
        }
        return false;
    }
    resendRoom(roomId) {
        this.resend((p) => p.room === roomId);
    }
    resend(which) {
        for (const [k, p] of this.pending) {
            if (!which(p))
                continue;
            p.sentAt = Date.now();
            this.send(p.room, { t: 'act', room: p.room, cs: unkey(k)[1], a: p.a });
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
    onMessage(s, msg) {
        const roomId = 'room' in msg ? msg.room : undefined;
        if (roomId !== undefined && this.socketOf(roomId) !== s.key) {
            // A socket the room has left (it follows its owner elsewhere now): only answers to
            // actions count (an ack is an ack wherever it comes from); its views, chat and
            // errors would race the room's socket, which sends its own `sync`.
            if (msg.t !== 'ack' && msg.t !== 'reject' && !(msg.t === 'error' && msg.code === 'room_unavailable' && msg.cs !== undefined))
                return;
        }
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
            if (msg.code === 'room_unavailable' && msg.room !== undefined) {
                // The room is between owners, or the action's fate is unknown: send the same cs
                // again (dedupe makes it safe), and see whether the room has a new owner.
                const room = msg.room;
                if (msg.cs !== undefined) {
                    const k = key(room, msg.cs);
                    setTimeout(() => this.resend((p) => this.pending.get(k) === p), this.opts.resendMs);
                }
                this.relocateSoon(room, false);
            }
            else if (msg.code === 'room_moved' && msg.room !== undefined) {
                // The room lives elsewhere now: find its owner (or stay: the server finds it),
                // subscribe again there and resend its actions.
                const room = msg.room;
                const route = this.routes.get(room);
                if (route) {
                    route.resub = true;
                    if (this.opts.direct)
                        this.relocateSoon(room, true);
                    else
                        setTimeout(() => this.place(room, this.homeKey), this.opts.resendMs);
                }
                else {
                    setTimeout(() => this.resendRoom(room), this.opts.resendMs);
                }
            }
            else if (msg.room === undefined) {
                this.emit('error', msg);
            }
        }
        else if (msg.t === 'room') {
            this.hint(msg.room, msg.info.nodeUrl);
        }
        else if (msg.t === 'sync' && isRoomInfo(msg.view)) {
            this.hint(msg.room, msg.view.nodeUrl);
        }
        const room = roomId !== undefined ? this.rooms.get(roomId) : undefined;
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
    /**
     * The base URL of the node whose socket carries this room: its owner's `nodeUrl`, or
     * the client's `baseUrl` when the room names no owner or its owner cannot be reached;
     * `null` while the room is being looked up.
     */
    get nodeUrl() {
        return this.conn.nodeOf(this.roomId);
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
