// The WebSocket half of the protocol: one socket for many rooms, `act` with automatic
// `cs`, acks/rejects as promises, typed room channels, and reconnection that resumes
// every subscription and resends each unacknowledged action with its ORIGINAL `cs` (the
// server deduplicates, so a resend is never applied twice).

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
   * Connect to this node first: a room's `nodeUrl` (its owner's public base URL), which
   * skips the hop from another node to the owner. Once a socket to it fails or closes,
   * the next try goes to the client's `baseUrl` (any node serves every room), and the
   * tries alternate from then on until one opens.
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

const RTT_ALPHA = 0.2;

/** One WebSocket to roomd for all of a user's rooms. Made by [`RoomdClient.connect`]. */
export class Connection extends Emitter<ConnectionEvents> {
  status: ConnectionStatus = 'connecting';
  /** Reconnections so far. */
  reconnects = 0;
  /** Round-trip time of actions (send → ack), an EMA with alpha 0.2; `null` until one. */
  rtt: number | null = null;
  readonly token: string;
  private ws: WebSocket | null = null;
  private opened = false;
  private retry = 0;
  private closed = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly rooms = new Map<string, RoomChannel<GameId>>();
  private readonly pending = new Map<string, Pending>();
  private readonly Ws: WebSocketCtor;
  private readonly cs: CsSource;
  private readonly opts: Required<Pick<ConnectOptions, 'backoffMs' | 'maxBackoffMs' | 'resendMs'>>;
  private readonly nodeUrl: string | undefined;
  private toNode = true;

  constructor(
    private readonly client: RoomdClient,
    opts: ConnectOptions = {},
  ) {
    super();
    const Ws = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketCtor }).WebSocket;
    if (!Ws) throw new Error('no WebSocket: pass ConnectOptions.WebSocket (Node 20: --experimental-websocket)');
    this.Ws = Ws;
    this.cs = opts.cs ?? new ClockCs();
    this.opts = { backoffMs: opts.backoffMs ?? 250, maxBackoffMs: opts.maxBackoffMs ?? 5000, resendMs: opts.resendMs ?? 500 };
    this.token = client.token ?? '';
    this.nodeUrl = opts.nodeUrl?.replace(/\/+$/, '');
    this.connect();
  }

  /** Subscribes to a room (as its player if seated, else as spectator) and returns its channel. */
  room<G extends GameId = GameId>(roomId: string): RoomChannel<G> {
    let ch = this.rooms.get(roomId);
    if (!ch) {
      ch = new RoomChannel<GameId>(this, roomId);
      this.rooms.set(roomId, ch);
      this.raw({ t: 'sub', room: roomId });
    }
    return ch as unknown as RoomChannel<G>;
  }

  /** Stops watching a room; its unacknowledged actions fail with `unsubscribed`. */
  unsub(roomId: string): void {
    if (!this.rooms.delete(roomId)) return;
    this.failPending(roomId, 'unsubscribed', '방에서 나갔어요');
    this.raw({ t: 'unsub', room: roomId });
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
    this.raw({ t: 'act', room: roomId, cs, a });
    return promise;
  }

  /**
   * Sends a quick-chat phrase (a `key` of the game's `chatPhrases`) to a room you sit in.
   * Fire and forget: it comes back as a `chat` event to every watcher, or as an `error`
   * event (`chat_off`, `rate_limited`: one per 2 s, `not_seated`). `false` when the socket
   * is not open (a phrase is of the moment: it is not resent after a reconnect).
   */
  chat(roomId: string, phrase: string): boolean {
    return this.raw({ t: 'chat', room: roomId, phrase });
  }

  /** Actions sent and not yet acknowledged or rejected: `[room, cs]`. */
  unacknowledged(): Array<[string, number]> {
    return [...this.pending.keys()].map(unkey);
  }

  /** Drops the socket as a network failure would (it reconnects). */
  drop(): void {
    this.ws?.close();
  }

  /** Closes for good; unacknowledged actions fail with `closed`. */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    for (const room of [...new Set([...this.pending.values()].map((p) => p.room))]) {
      this.failPending(room, 'closed', '연결을 닫았어요');
    }
    this.ws?.close();
    this.setStatus('closed');
  }

  /** Sends one message if the socket is open; `false` otherwise (it is resent on reconnect). */
  raw(msg: unknown): boolean {
    if (this.ws && this.ws.readyState === 1) {
      this.ws.send(JSON.stringify(msg));
      return true;
    }
    return false;
  }

  private setStatus(s: ConnectionStatus): void {
    this.status = s;
    this.emit('status', s);
  }

  private connect(): void {
    if (this.closed) return;
    const ws = new this.Ws(this.client.socketUrl(this.nodeUrl && this.toNode ? this.nodeUrl : undefined));
    this.ws = ws;
    this.setStatus('connecting');
    ws.onopen = () => {
      this.opened = true;
      this.retry = 0;
      this.setStatus('open');
      for (const room of this.rooms.keys()) this.raw({ t: 'sub', room });
      this.resend(() => true);
    };
    ws.onmessage = (ev: MessageEvent) => {
      let msg: ServerMessage;
      try {
        msg = JSON.parse(String(ev.data)) as ServerMessage;
      } catch {
        return;
      }
      this.onMessage(msg);
    };
    const lost = (code: number) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closed) return;
      if (this.nodeUrl) this.toNode = !this.toNode;
      this.setStatus('closed');
      void this.reconnectAfter(code);
    };
    ws.onclose = (ev: CloseEvent) => lost(ev.code);
    // Some platforms (Node's undici) fire only `error` when the upgrade is refused.
    ws.onerror = () => {
      if (ws.readyState !== 1) lost(1006);
    };
  }

  private async reconnectAfter(code: number): Promise<void> {
    if (code === 1008 || !this.opened) {
      // Refused before the upgrade (bad token) or by policy: check the token once.
      try {
        await this.client.request('GET', '/api/me/games?limit=1');
      } catch (e) {
        if ((e as { status?: number }).status === 401) {
          this.closed = true;
          this.emit('unauthorized', undefined);
          return;
        }
      }
    }
    if (this.closed) return;
    this.opened = false;
    // 1012: the node drains; come back at once (to any node). Otherwise back off.
    const base = Math.min(this.opts.maxBackoffMs, this.opts.backoffMs * 2 ** this.retry++);
    const delay = code === 1012 ? 100 : base / 2 + Math.random() * (base / 2);
    this.reconnects++;
    this.timer = setTimeout(() => this.connect(), delay);
  }

  private resend(which: (p: Pending) => boolean): void {
    for (const [k, p] of this.pending) {
      if (!which(p)) continue;
      p.sentAt = Date.now();
      this.raw({ t: 'act', room: p.room, cs: unkey(k)[1], a: p.a });
    }
  }

  private failPending(room: string, code: string, reason: string): void {
    for (const [k, p] of this.pending) {
      if (p.room !== room) continue;
      this.pending.delete(k);
      p.reject(new ActionRejected({ room, cs: unkey(k)[1], code, reason }));
    }
  }

  private onMessage(msg: ServerMessage): void {
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
      if (msg.code === 'room_unavailable' && msg.room !== undefined && msg.cs !== undefined) {
        // The action's fate is unknown: send the same cs again (dedupe makes it safe).
        const room = msg.room;
        const k = key(room, msg.cs);
        setTimeout(() => this.resend((p) => this.pending.get(k) === p), this.opts.resendMs);
      } else if (msg.code === 'room_moved' && msg.room !== undefined) {
        // The room lives elsewhere now: subscribe again (the server finds it) and resend.
        const room = msg.room;
        setTimeout(() => {
          if (this.rooms.has(room)) this.raw({ t: 'sub', room });
          this.resend((p) => p.room === room);
        }, this.opts.resendMs);
      } else if (msg.room === undefined) {
        this.emit('error', msg);
      }
    }
    const room = 'room' in msg && msg.room !== undefined ? this.rooms.get(msg.room) : undefined;
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
