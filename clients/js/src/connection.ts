// The WebSocket half of the protocol: one socket per node the user's rooms live on (each
// room's socket at its owner, `nodeUrl` in room info, followed when the room moves, with
// the client's `baseUrl` as the fallback), `act` with automatic `cs`, acks/rejects as
// promises, typed room channels, and reconnection that resumes every subscription and
// resends each unacknowledged action with its ORIGINAL `cs` (the server deduplicates, so
// a resend is never applied twice, whichever node it reaches).

import type {
  AckMessage,
  ChatMessage,
  ErrorMessage,
  GameId,
  Games,
  RejectMessage,
  ResultMessage,
  RoomInfo,
  RoomMessage,
  ServerMessage,
  SyncMessage,
  UpdateMessage,
} from './types.js';
import { isRoomInfo } from './types.js';
import type { RoomdClient } from './http.js';

/** A `reject`: the action was definitely not applied. `code` is stable, `reason` Korean. */
export class ActionRejected extends Error {
  readonly room: string;
  readonly cs: number;
  readonly code: string;
  readonly reason: string;

  constructor(msg: { room: string; cs: number; code: string; reason: string }) {
    super(msg.reason);
    this.name = 'ActionRejected';
    this.room = msg.room;
    this.cs = msg.cs;
    this.code = msg.code;
    this.reason = msg.reason;
  }
}

/** Where `cs` numbers come from. They must never repeat for a room, even across reloads. */
export interface CsSource {
  next(room: string): number;
}

/** `cs` = milliseconds since the epoch, kept increasing per room (in memory). */
export class ClockCs implements CsSource {
  private readonly last = new Map<string, number>();
  next(room: string): number {
    const cs = Math.max((this.last.get(room) ?? 0) + 1, Date.now());
    this.last.set(room, cs);
    return cs;
  }
}

/** The platform WebSocket's constructor (browsers, Node 22+, or `--experimental-websocket`). */
export type WebSocketCtor = new (url: string) => WebSocket;

export interface ConnectOptions {
  WebSocket?: WebSocketCtor;
  cs?: CsSource;
  /** First reconnect delay (doubles per failed try, with jitter). Default 250 ms. */
  backoffMs?: number;
  /** Longest reconnect delay. Default 5000 ms. */
  maxBackoffMs?: number;
  /** Delay before resending an action the server could not place (`room_unavailable`). */
  resendMs?: number;
  /**
   * Connect each room's socket straight to the room's owner when its info names one
   * (`nodeUrl`), one socket per node; default true. `false`: every room on the one
   * socket at `baseUrl` (any node serves every room, through a hop to the owner).
   */
  direct?: boolean;
  /**
   * How long a socket that no room needs any more stays open, in case a room comes
   * back to its node (a player going from room to lobby to room). Default 5000 ms.
   */
  idleMs?: number;
  /**
   * The node the socket at `baseUrl` tries first (older option: rooms now find their
   * owners by themselves). Once a socket to it fails or closes, the next try goes to
   * `baseUrl`, and the tries alternate from then on until one opens.
   */
  nodeUrl?: string;
}

export type ConnectionStatus = 'connecting' | 'open' | 'closed';

export interface ConnectionEvents {
  /** Every server message, before the typed events. */
  message: ServerMessage;
  status: ConnectionStatus;
  /** The token was refused (401): the connection stops retrying. */
  unauthorized: void;
  /** A socket-level `error` (not about one action). */
  error: ErrorMessage;
}

/** One of a connection's sockets, as [`Connection.sockets`] lists it. */
export interface NodeSocketInfo {
  /** The node's base URL (`http(s)://…`): a room owner's `nodeUrl`, or the client's `baseUrl`. */
  url: string;
  status: ConnectionStatus;
  /** The rooms it carries (none while it idles before closing). */
  rooms: string[];
}

type Listener<T> = (value: T) => void;

class Emitter<E> {
  private readonly listeners = new Map<keyof E, Set<Listener<never>>>();
  on<K extends keyof E>(event: K, fn: Listener<E[K]>): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(fn as Listener<never>);
    return () => set?.delete(fn as Listener<never>);
  }
  protected emit<K extends keyof E>(event: K, value: E[K]): void {
    for (const fn of this.listeners.get(event) ?? []) (fn as Listener<E[K]>)(value);
  }
}

interface Pending {
  room: string;
  a: unknown;
  sentAt: number;
  resolve: (ack: AckMessage) => void;
  reject: (err: Error) => void;
}

type Timer = ReturnType<typeof setTimeout>;

/** One WebSocket to one node, carrying the rooms routed to it. */
interface NodeSocket {
  /** The node's base URL, normalised ([`nodeKey`]): its key in `Connection.byNode`. */
  readonly key: string;
  /** The socket at the client's `baseUrl`: the fallback of every room; never given up. */
  readonly home: boolean;
  ws: WebSocket | null;
  /** The base URL of the current (or last) try: `key`, or `ConnectOptions.nodeUrl` for home. */
  url: string;
  status: ConnectionStatus;
  /** The current WebSocket opened (a failure before this is "cannot be reached"). */
  opened: boolean;
  /** Some WebSocket to this node opened once: the node was there, so its rooms may have moved. */
  everOpened: boolean;
  retry: number;
  /** Home with `ConnectOptions.nodeUrl`: the next try goes there (alternating with `baseUrl`). */
  toNode: boolean;
  /** The next reconnect. */
  timer?: Timer;
  /** Closes the socket once no room has needed it for `idleMs`. */
  idle?: Timer;
}

/** Where a watched room's socket is, and its owner lookups. */
interface Route {
  /**
   * The `NodeSocket.key` carrying the room (subscribed there; its frames are taken from
   * there only); null while it is looked up (its socket was lost, or it is new).
   */
  node: string | null;
  /**
   * The node the room moves to once that node's socket opens (until then it stays
   * subscribed on `node`, so a move costs no gap, and an owner that cannot be reached
   * costs nothing).
   */
  next: string | null;
  /** Bumped by every lookup, so that an answer overtaken by a newer lookup is ignored. */
  gen: number;
  /** A lookup is in flight. */
  busy: boolean;
  /** When the last lookup started (ms since the epoch). */
  lookedAt: number;
  /** The server dropped the room's subscription (`room_moved`): `sub` again, even on the same node. */
  resub: boolean;
  /** The next lookup. */
  timer?: Timer;
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
const STATUS_RANK: Record<ConnectionStatus, number> = { open: 0, connecting: 1, closed: 2 };

/** A base URL in one spelling (origin + path, no trailing slash), so equal nodes share a socket. */
function nodeKey(url: string): string {
  try {
    const u = new URL(url);
    return u.origin + u.pathname.replace(/\/+$/, '');
  } catch {
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
export class Connection extends Emitter<ConnectionEvents> {
  status: ConnectionStatus = 'connecting';
  /** Reconnections so far. */
  reconnects = 0;
  /** Round-trip time of actions (send → ack), an EMA with alpha 0.2; `null` until one. */
  rtt: number | null = null;
  readonly token: string;
  private closed = false;
  private readonly byNode = new Map<string, NodeSocket>();
  private readonly rooms = new Map<string, RoomChannel<GameId>>();
  private readonly routes = new Map<string, Route>();
  /** Nodes not to use for rooms `until` a time (ms since the epoch), and their failures in a row. */
  private readonly avoid = new Map<string, { until: number; strikes: number }>();
  private readonly pending = new Map<string, Pending>();
  private readonly Ws: WebSocketCtor;
  private readonly cs: CsSource;
  private readonly opts: Required<Pick<ConnectOptions, 'backoffMs' | 'maxBackoffMs' | 'resendMs' | 'idleMs' | 'direct'>>;
  private readonly nodeUrl: string | undefined;
  private readonly homeKey: string;

  constructor(
    private readonly client: RoomdClient,
    opts: ConnectOptions = {},
  ) {
    super();
    const Ws = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketCtor }).WebSocket;
    if (!Ws) throw new Error('no WebSocket: pass ConnectOptions.WebSocket (Node 20: --experimental-websocket)');
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
  room<G extends GameId = GameId>(roomId: string, info?: Pick<RoomInfo, 'nodeUrl'>): RoomChannel<G> {
    let ch = this.rooms.get(roomId);
    if (!ch) {
      ch = new RoomChannel<GameId>(this, roomId);
      this.rooms.set(roomId, ch);
      const route: Route = { node: null, next: null, gen: 0, busy: false, lookedAt: 0, resub: false };
      this.routes.set(roomId, route);
      if (!this.opts.direct) this.place(roomId, this.homeKey);
      else if (info) this.place(roomId, this.target(info.nodeUrl));
      else this.locate(roomId, null);
      this.updateStatus();
    }
    return ch as unknown as RoomChannel<G>;
  }

  /** Stops watching a room; its unacknowledged actions fail with `unsubscribed`. */
  unsub(roomId: string): void {
    if (!this.rooms.delete(roomId)) return;
    this.failPending(roomId, 'unsubscribed', '방에서 나갔어요');
    const route = this.routes.get(roomId);
    this.routes.delete(roomId);
    if (route) {
      clearTimeout(route.timer);
      if (route.node !== null) this.sendOn(route.node, { t: 'unsub', room: roomId });
    }
    this.tidy();
    this.updateStatus();
  }

  /**
   * Sends an action with a fresh `cs`. Resolves with the `ack`; rejects with
   * [`ActionRejected`] on a `reject`. Kept (and resent after reconnects) until one arrives.
   */
  act(roomId: string, a: unknown): Promise<AckMessage> & { cs: number } {
    const cs = this.cs.next(roomId);
    let p!: Pending;
    const promise = new Promise<AckMessage>((resolve, reject) => {
      p = { room: roomId, a, sentAt: Date.now(), resolve, reject };
    }) as Promise<AckMessage> & { cs: number };
    promise.cs = cs;
    if (this.closed) {
      p.reject(new ActionRejected({ room: roomId, cs, code: 'closed', reason: '연결을 닫았어요' }));
      return promise;
    }
    this.pending.set(key(roomId, cs), p);
    // A room not watched goes through `baseUrl`, whose socket this may need to open.
    if (!this.routes.has(roomId)) this.tidy();
    this.send(roomId, { t: 'act', room: roomId, cs, a });
    return promise;
  }

  /**
   * Sends a quick-chat phrase (a `key` of the game's `chatPhrases`) to a room you sit in.
   * Fire and forget: it comes back as a `chat` event to every watcher, or as an `error`
   * event (`chat_off`, `rate_limited`: one per 2 s, `not_seated`). `false` when the room's
   * socket is not open (a phrase is of the moment: it is not resent after a reconnect).
   */
  chat(roomId: string, phrase: string): boolean {
    return this.send(roomId, { t: 'chat', room: roomId, phrase });
  }

  /** Actions sent and not yet acknowledged or rejected: `[room, cs]`. */
  unacknowledged(): Array<[string, number]> {
    return [...this.pending.keys()].map(unkey);
  }

  /** The sockets open (or opening, or idling before they close): one per node. */
  sockets(): NodeSocketInfo[] {
    return [...this.byNode.values()].map((s) => ({ url: s.url, status: s.status, rooms: this.roomsOn(s.key) }));
  }

  /** Drops every socket as a network failure would (each reconnects). */
  drop(): void {
    for (const s of this.byNode.values()) s.ws?.close();
  }

  /** Closes for good; unacknowledged actions fail with `closed`. */
  close(): void {
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
  raw(msg: unknown): boolean {
    const room = (msg as { room?: unknown } | null)?.room;
    if (typeof room === 'string') return this.send(room, msg);
    if (this.sendOn(this.homeKey, msg)) return true;
    for (const s of this.byNode.values()) if (this.sendOn(s.key, msg)) return true;
    return false;
  }

  /** @internal The base URL of the node whose socket carries `roomId`; null while it is looked up. */
  nodeOf(roomId: string): string | null {
    const node = this.routes.get(roomId)?.node ?? null;
    if (node === null) return null;
    return this.byNode.get(node)?.url ?? node;
  }

  // ---- routing: which node's socket carries each room --------------------------------

  /** The socket for a room whose info names `nodeUrl` (absent: the cluster names none). */
  private target(nodeUrl: string | null | undefined): string {
    if (!nodeUrl) return this.homeKey;
    const k = nodeKey(nodeUrl);
    return this.avoided(k) ? this.homeKey : k;
  }

  private avoided(k: string): boolean {
    return k !== this.homeKey && Date.now() < (this.avoid.get(k)?.until ?? 0);
  }

  /** Node `k` failed (could not be reached, or drains): leave it alone for a while. */
  private strike(k: string): void {
    const strikes = (this.avoid.get(k)?.strikes ?? 0) + 1;
    this.avoid.set(k, { until: Date.now() + Math.min(AVOID_MAX_MS, AVOID_MS * 2 ** (strikes - 1)), strikes });
  }

  /**
   * Looks the room's owner up and moves the room to its socket. `settle` (after a move):
   * while the answer has no news (the lookup failed, or it names the node the room just
   * left or one that cannot be used), look again a few times, backing off: the cluster
   * may not have named the new owner yet. The room is served wherever it is meanwhile.
   */
  private locate(roomId: string, settle: { from: string; tries: number } | null): void {
    const route = this.routes.get(roomId);
    if (!route || this.closed) return;
    clearTimeout(route.timer);
    route.timer = undefined;
    route.busy = true;
    route.lookedAt = Date.now();
    const gen = ++route.gen;
    // `undefined`: no answer (network, 5xx, 429); `null`: the room names no owner URL.
    const lookup: Promise<string | null | undefined> = this.client.room(roomId).then(
      (info) => info?.nodeUrl ?? null,
      (e: { status?: number }) => (e.status !== undefined && e.status >= 400 && e.status < 500 && e.status !== 429 ? null : undefined),
    );
    void lookup.then((nodeUrl) => {
      if (this.closed || this.routes.get(roomId) !== route || route.gen !== gen) return;
      route.busy = false;
      const at = this.target(nodeUrl);
      this.place(roomId, at);
      if (!settle || settle.tries >= SETTLE_TRIES) return;
      const named = nodeUrl ? nodeKey(nodeUrl) : null;
      const noNews = nodeUrl === undefined || (named !== null && (named === settle.from || named !== at));
      if (!noNews) return;
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
  private relocateSoon(roomId: string, moved: boolean): void {
    const route = this.routes.get(roomId);
    if (!route || !this.opts.direct) return;
    if (!moved && (route.busy || route.timer !== undefined || Date.now() - route.lookedAt < UNSURE_LOOKUP_MS)) return;
    clearTimeout(route.timer);
    const settle = moved ? { from: route.node ?? this.homeKey, tries: 0 } : null;
    route.timer = setTimeout(() => this.locate(roomId, settle), this.opts.resendMs);
  }

  /**
   * Puts the room on node `at`'s socket: at once if that socket is open (or the room has
   * no socket now), else once it opens, the room staying where it is until then.
   */
  private place(roomId: string, at: string): void {
    const route = this.routes.get(roomId);
    if (!route || this.closed) return;
    const resub = route.resub;
    route.resub = false;
    if (route.node === at) {
      route.next = null;
      // Already there; after `room_moved` the server dropped the subscription: again.
      // (A socket not open yet subscribes every room it carries when it opens.)
      if (resub && this.sendOn(at, { t: 'sub', room: roomId })) this.resendRoom(roomId);
    } else if (route.node === null || this.isOpen(at)) {
      this.moveNow(roomId, route, at);
    } else {
      route.next = at;
      this.tidy(); // opens `at`'s socket; `open` moves the room when it does
      // The server dropped the subscription where the room is: take it up again meanwhile.
      if (resub && this.sendOn(route.node, { t: 'sub', room: roomId })) this.resendRoom(roomId);
    }
    this.updateStatus();
  }

  /** `unsub` where the room was, `sub` on node `at`'s socket (now or when it opens), actions resent there. */
  private moveNow(roomId: string, route: Route, at: string): void {
    const from = route.node;
    route.node = at;
    route.next = null;
    if (from !== null && from !== at) this.sendOn(from, { t: 'unsub', room: roomId });
    this.tidy(); // opens `at`'s socket if need be; the old one idles if nothing else needs it
    if (this.sendOn(at, { t: 'sub', room: roomId })) this.resendRoom(roomId);
  }

  /** A room's info in a `sync` or `room` frame names its owner: follow it if it is elsewhere. */
  private hint(roomId: string, nodeUrl: string | undefined): void {
    const route = this.routes.get(roomId);
    if (!nodeUrl || !route || route.busy || !this.opts.direct) return;
    const at = this.target(nodeUrl);
    if (at !== this.homeKey && at !== route.node && at !== route.next) this.place(roomId, at);
  }

  /** The rooms node `k`'s socket carries. */
  private roomsOn(k: string): string[] {
    return [...this.routes].filter(([, r]) => r.node === k).map(([room]) => room);
  }

  private isOpen(k: string): boolean {
    return this.byNode.get(k)?.ws?.readyState === 1;
  }

  /**
   * The nodes whose sockets are needed now: where rooms are, and (`andNext`) where they
   * are going.
   */
  private needed(andNext = true): Set<string> {
    const need = new Set<string>();
    for (const r of this.routes.values()) {
      if (r.node !== null) need.add(r.node);
      if (andNext && r.next !== null) need.add(r.next);
    }
    // With no room, the socket at `baseUrl` stays (status, token check, socket-level
    // errors), and it carries actions for rooms not watched.
    if (this.routes.size === 0 || [...this.pending.values()].some((p) => !this.routes.has(p.room))) need.add(this.homeKey);
    return need;
  }

  /** Opens the sockets needed, and lets the others idle out after `idleMs`. */
  private tidy(): void {
    if (this.closed) return;
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
      if (need.has(s.key) || s.idle !== undefined) continue;
      s.idle = setTimeout(() => {
        s.idle = undefined;
        if (!this.needed().has(s.key)) this.dispose(s);
      }, this.opts.idleMs);
    }
  }

  /** Forgets a socket and closes it (its late events are ignored: `s.ws` is no longer it). */
  private dispose(s: NodeSocket): void {
    clearTimeout(s.timer);
    clearTimeout(s.idle);
    if (this.byNode.get(s.key) === s) this.byNode.delete(s.key);
    const ws = s.ws;
    s.ws = null;
    ws?.close();
    this.updateStatus();
  }

  // ---- sockets ---------------------------------------------------------------------

  private open(s: NodeSocket): void {
    if (this.closed) return;
    s.url = s.home && this.nodeUrl && s.toNode ? this.nodeUrl : s.key;
    s.opened = false;
    this.setSocketStatus(s, 'connecting');
    let ws: WebSocket;
    try {
      ws = new this.Ws(this.client.socketUrl(s.url));
    } catch {
      // A URL the platform will not connect to (malformed, or refused by the page's
      // Content-Security-Policy): as a socket that could not open.
      s.ws = null;
      setTimeout(() => {
        if (this.byNode.get(s.key) === s && s.ws === null && s.timer === undefined) this.lost(s, 1006);
      }, 0);
      return;
    }
    s.ws = ws;
    ws.onopen = () => {
      if (s.ws !== ws) return;
      s.opened = true;
      s.everOpened = true;
      s.retry = 0;
      if (!s.home) this.avoid.delete(s.key);
      for (const room of this.roomsOn(s.key)) this.sendOn(s.key, { t: 'sub', room });
      this.resend((p) => this.socketOf(p.room) === s.key);
      // Rooms waiting for this socket to move here (see `place`).
      for (const [room, route] of this.routes) if (route.next === s.key) this.moveNow(room, route, s.key);
      this.setSocketStatus(s, 'open');
    };
    ws.onmessage = (ev: MessageEvent) => {
      if (s.ws !== ws) return;
      let msg: ServerMessage;
      try {
        msg = JSON.parse(String(ev.data)) as ServerMessage;
      } catch {
        return;
      }
      this.onMessage(s, msg);
    };
    const lost = (code: number) => {
      if (s.ws !== ws) return;
      s.ws = null;
      this.lost(s, code);
    };
    ws.onclose = (ev: CloseEvent) => lost(ev.code);
    // Some platforms (Node's undici) fire only `error` when the upgrade is refused.
    ws.onerror = () => {
      if (ws.readyState !== 1) lost(1006);
    };
  }

  private lost(s: NodeSocket, code: number): void {
    const wasOpen = s.opened;
    s.opened = false;
    if (this.closed || this.byNode.get(s.key) !== s) return;
    this.setSocketStatus(s, 'closed');
    if (s.home) {
      if (this.nodeUrl) s.toNode = !s.toNode;
      void this.reconnectAfter(s, code, wasOpen);
    } else if (code === 1012 || !wasOpen) {
      // The owner drains (1012), or cannot be reached: leave it alone for a while and
      // look its rooms up again; they follow their new owner, or use `baseUrl` meanwhile.
      // A node that was there before may have lost its rooms (a drain, a failover), so
      // its rooms look again until the cluster names their new owner. Rooms that were
      // only going to move here stay where they are.
      this.strike(s.key);
      const rooms = this.roomsOn(s.key);
      for (const route of this.routes.values()) if (route.next === s.key) route.next = null;
      this.dispose(s);
      if (wasOpen) this.reconnects++;
      for (const room of rooms) {
        const route = this.routes.get(room);
        if (route) route.node = null;
        this.locate(room, s.everOpened ? { from: s.key, tries: 0 } : null);
      }
      this.tidy();
      this.updateStatus();
      if (code === 1008) void this.checkToken();
    } else {
      // Lost after it opened (network, restart): the same node again, backing off; if it
      // does not open, its rooms fall back as above.
      void this.reconnectAfter(s, code, wasOpen);
    }
  }

  private async reconnectAfter(s: NodeSocket, code: number, wasOpen: boolean): Promise<void> {
    // Refused before the upgrade (bad token?) or closed by policy: check the token once.
    if ((code === 1008 || (s.home && !wasOpen)) && (await this.checkToken())) return;
    if (this.closed || this.byNode.get(s.key) !== s) return;
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
  private async checkToken(): Promise<boolean> {
    try {
      await this.client.request('GET', '/api/me/games?limit=1');
    } catch (e) {
      if ((e as { status?: number }).status === 401 && !this.closed) {
        this.shutDown();
        this.setStatus('closed');
        this.emit('unauthorized', undefined);
        return true;
      }
    }
    return this.closed;
  }

  /** Stops every socket and timer for good. */
  private shutDown(): void {
    this.closed = true;
    for (const r of this.routes.values()) clearTimeout(r.timer);
    for (const s of [...this.byNode.values()]) {
      clearTimeout(s.timer);
      clearTimeout(s.idle);
      const ws = s.ws;
      s.ws = null;
      ws?.close();
    }
    this.byNode.clear();
  }

  private setSocketStatus(s: NodeSocket, status: ConnectionStatus): void {
    s.status = status;
    this.updateStatus();
  }

  /**
   * The connection's status: the worst of the sockets that carry its rooms (a room being
   * looked up: connecting; a socket a room will move to once it opens does not count).
   */
  private updateStatus(): void {
    if (this.closed) return;
    let worst: ConnectionStatus = 'open';
    const worse = (st: ConnectionStatus) => {
      if (STATUS_RANK[st] > STATUS_RANK[worst]) worst = st;
    };
    for (const k of this.needed(false)) worse(this.byNode.get(k)?.status ?? 'connecting');
    for (const r of this.routes.values()) if (r.node === null) worse('connecting');
    if (worst !== this.status) this.setStatus(worst);
  }

  private setStatus(s: ConnectionStatus): void {
    this.status = s;
    this.emit('status', s);
  }

  // ---- messages --------------------------------------------------------------------

  /** The node whose socket carries messages about `roomId` (null: none now). */
  private socketOf(roomId: string): string | null {
    const route = this.routes.get(roomId);
    return route ? route.node : this.homeKey;
  }

  private send(roomId: string, msg: unknown): boolean {
    const at = this.socketOf(roomId);
    return at !== null && this.sendOn(at, msg);
  }

  private sendOn(at: string, msg: unknown): boolean {
    const ws = this.byNode.get(at)?.ws;
    if (ws && ws.readyState === 1) {
      ws.send(JSON.stringify(msg));
      return true;
    }
    return false;
  }

  private resendRoom(roomId: string): void {
    this.resend((p) => p.room === roomId);
  }

  private resend(which: (p: Pending) => boolean): void {
    for (const [k, p] of this.pending) {
      if (!which(p)) continue;
      p.sentAt = Date.now();
      this.send(p.room, { t: 'act', room: p.room, cs: unkey(k)[1], a: p.a });
    }
  }

  private failPending(room: string, code: string, reason: string): void {
    for (const [k, p] of this.pending) {
      if (p.room !== room) continue;
      this.pending.delete(k);
      p.reject(new ActionRejected({ room, cs: unkey(k)[1], code, reason }));
    }
  }

  private onMessage(s: NodeSocket, msg: ServerMessage): void {
    const roomId = 'room' in msg ? msg.room : undefined;
    if (roomId !== undefined && this.socketOf(roomId) !== s.key) {
      // A socket the room has left (it follows its owner elsewhere now): only answers to
      // actions count (an ack is an ack wherever it comes from); its views, chat and
      // errors would race the room's socket, which sends its own `sync`.
      if (msg.t !== 'ack' && msg.t !== 'reject' && !(msg.t === 'error' && msg.code === 'room_unavailable' && msg.cs !== undefined)) return;
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
        } else {
          p.reject(new ActionRejected(msg));
        }
      }
    } else if (msg.t === 'error') {
      if (msg.code === 'room_unavailable' && msg.room !== undefined) {
        // The room is between owners, or the action's fate is unknown: send the same cs
        // again (dedupe makes it safe), and see whether the room has a new owner.
        const room = msg.room;
        if (msg.cs !== undefined) {
          const k = key(room, msg.cs);
          setTimeout(() => this.resend((p) => this.pending.get(k) === p), this.opts.resendMs);
        }
        this.relocateSoon(room, false);
      } else if (msg.code === 'room_moved' && msg.room !== undefined) {
        // The room lives elsewhere now: find its owner (or stay: the server finds it),
        // subscribe again there and resend its actions.
        const room = msg.room;
        const route = this.routes.get(room);
        if (route) {
          route.resub = true;
          if (this.opts.direct) this.relocateSoon(room, true);
          else setTimeout(() => this.place(room, this.homeKey), this.opts.resendMs);
        } else {
          setTimeout(() => this.resendRoom(room), this.opts.resendMs);
        }
      } else if (msg.room === undefined) {
        this.emit('error', msg);
      }
    } else if (msg.t === 'room') {
      this.hint(msg.room, msg.info.nodeUrl);
    } else if (msg.t === 'sync' && isRoomInfo(msg.view)) {
      this.hint(msg.room, msg.view.nodeUrl);
    }
    const room = roomId !== undefined ? this.rooms.get(roomId) : undefined;
    room?.deliver(msg);
  }
}

function key(room: string, cs: number): string {
  return `${cs} ${room}`;
}

function unkey(k: string): [string, number] {
  const i = k.indexOf(' ');
  return [k.slice(i + 1), Number(k.slice(0, i))];
}

export interface RoomEvents<G extends GameId> {
  /** The full view: the game's, or the room's info while it waits to start. */
  sync: SyncMessage<Games[G]['view']>;
  update: UpdateMessage<Games[G]['view'], Games[G]['event']>;
  ack: AckMessage;
  reject: RejectMessage;
  result: ResultMessage;
  /** Seats or status changed. */
  room: RoomMessage;
  /** A quick-chat phrase from a seated player (`from`). */
  chat: ChatMessage;
  error: ErrorMessage;
  /** The latest game view, from `sync` or `update`. */
  view: Games[G]['view'];
}

/** One subscribed room, typed by its game: `conn.room<'tally'>(id)`. */
export class RoomChannel<G extends GameId> extends Emitter<RoomEvents<G>> {
  /** The latest game view (null before the game starts or the first sync). */
  view: Games[G]['view'] | null = null;
  /** The room's info, when the server sent it (before the start, and on seat changes). */
  info: RoomInfo | null = null;
  seq = 0;
  result: ResultMessage | null = null;

  constructor(
    private readonly conn: Connection,
    readonly roomId: string,
  ) {
    super();
  }

  /**
   * The base URL of the node whose socket carries this room: its owner's `nodeUrl`, or
   * the client's `baseUrl` when the room names no owner or its owner cannot be reached;
   * `null` while the room is being looked up.
   */
  get nodeUrl(): string | null {
    return this.conn.nodeOf(this.roomId);
  }

  /** Whether this user watches without a seat (known once the room's info arrived). */
  spectating(userId: string): boolean | null {
    if (!this.info) return null;
    return !this.info.seats.some((s) => s.userId === userId);
  }

  /** Sends a game action; see [`Connection.act`]. */
  act(a: Games[G]['action']): Promise<AckMessage> & { cs: number } {
    return this.conn.act(this.roomId, a);
  }

  /** Sends a quick-chat phrase; see [`Connection.chat`]. */
  chat(phrase: string): boolean {
    return this.conn.chat(this.roomId, phrase);
  }

  /** Stops watching. */
  leave(): void {
    this.conn.unsub(this.roomId);
  }

  /** @internal */
  deliver(msg: ServerMessage): void {
    switch (msg.t) {
      case 'sync':
        this.seq = msg.seq;
        if (isRoomInfo(msg.view)) this.info = msg.view;
        else {
          this.view = msg.view as Games[G]['view'];
          this.emit('view', this.view);
        }
        this.emit('sync', msg as SyncMessage<Games[G]['view']>);
        break;
      case 'update':
        this.seq = msg.seq;
        this.view = msg.view as Games[G]['view'];
        this.emit('update', msg as UpdateMessage<Games[G]['view'], Games[G]['event']>);
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
