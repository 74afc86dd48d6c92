// The HTTP API (docs/protocol.md, /api/openapi.json) with nothing but the platform's fetch.

import { applyPatch } from './patch.js';
import type {
  CatalogEntry,
  CreateRoom,
  GameRecord,
  GameView,
  Replay,
  RoomInfo,
  RoomStatus,
  Session,
} from './types.js';
import { Connection, type ConnectOptions } from './connection.js';

/** An HTTP call that failed: the server's `code` and Korean `reason`, or `network`. */
export class RoomdError extends Error {
  readonly status: number;
  readonly code: string;
  readonly reason: string;
  /** Seconds to wait, from `Retry-After` on a 429 or 503. */
  readonly retryAfter: number | null;

  constructor(status: number, code: string, reason: string, retryAfter: number | null = null) {
    super(reason);
    this.name = 'RoomdError';
    this.status = status;
    this.code = code;
    this.reason = reason;
    this.retryAfter = retryAfter;
  }
}

export interface ClientOptions {
  /** `http(s)://host:port`; in a browser defaults to the page's origin. */
  baseUrl?: string;
  /** A bearer token (from [`RoomdClient.createSession`] or minted by your own login). */
  token?: string | null;
  /** A fetch implementation; defaults to the platform's. */
  fetch?: typeof fetch;
}

export interface ListRoomsQuery {
  game?: string;
  status?: RoomStatus;
  limit?: number;
  cursor?: string;
}

/** A page of rooms; `next` is the cursor of the following page when the server gave one. */
export interface RoomPage {
  rooms: RoomInfo[];
  next: string | null;
}

function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** The `cursor` of a `Link: <…>; rel="next"` header, if any. */
export function nextCursor(link: string | null): string | null {
  if (!link) return null;
  for (const part of link.split(',')) {
    const m = part.match(/<([^>]*)>\s*;\s*rel="?next"?/);
    if (!m || m[1] === undefined) continue;
    const url = new URL(m[1], 'http://x');
    return url.searchParams.get('cursor');
  }
  return null;
}

/** Every scene of a replay: `first`, then each patch applied to the scene before it. */
export function replayScenes<V>(replay: Replay<V>): V[] {
  const scenes: V[] = [replay.first];
  for (const p of replay.patches) scenes.push(applyPatch(scenes[scenes.length - 1] as V, p));
  return scenes;
}

/** The HTTP API of one roomd node (or cluster address). */
export class RoomdClient {
  readonly baseUrl: string;
  token: string | null;
  /** The user of [`token`], once known. */
  userId: string | null = null;
  private readonly fetchImpl: typeof fetch;

  constructor(opts: ClientOptions = {}) {
    const origin = typeof location !== 'undefined' ? location.origin : undefined;
    const base = opts.baseUrl ?? origin;
    if (!base) throw new Error('RoomdClient needs a baseUrl outside a browser');
    this.baseUrl = base.replace(/\/+$/, '');
    this.token = opts.token ?? null;
    this.fetchImpl = opts.fetch ?? ((input, init) => fetch(input, init));
  }

  /** One call: JSON in, JSON out; a non-2xx answer throws [`RoomdError`]. */
  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await this.requestRaw<T>(method, path, body)).data;
  }

  private async requestRaw<T>(method: string, path: string, body?: unknown): Promise<{ data: T; headers: Headers }> {
    const headers: Record<string, string> = {};
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let res: Response;
    try {
      res = await this.fetchImpl(this.baseUrl + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch {
      throw new RoomdError(0, 'network', '서버에 연결할 수 없어요');
    }
    const text = await res.text();
    let data: unknown = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!res.ok) {
      const err = (data ?? {}) as { code?: string; reason?: string };
      const retry = Number(res.headers.get('retry-after'));
      throw new RoomdError(
        res.status,
        err.code || `http_${res.status}`,
        err.reason || `요청이 실패했어요 (${res.status})`,
        Number.isFinite(retry) && res.headers.has('retry-after') ? retry : null,
      );
    }
    return { data: data as T, headers: res.headers };
  }

  /** `POST /api/session`: a guest session; the client uses its token from now on. */
  async createSession(name: string): Promise<Session> {
    const s = await this.request<Session>('POST', '/api/session', { name });
    this.token = s.token;
    this.userId = s.userId;
    return s;
  }

  /** `GET /api/games`: the catalog with Korean option labels. */
  games(): Promise<CatalogEntry[]> {
    return this.request('GET', '/api/games');
  }

  /** `POST /api/rooms`: the caller hosts and takes the first seat. */
  createRoom(body: CreateRoom): Promise<{ roomId: string }> {
    return this.request('POST', '/api/rooms', body);
  }

  /** `GET /api/rooms`: open rooms, newest first. */
  async listRooms(q: ListRoomsQuery = {}): Promise<RoomPage> {
    const { data, headers } = await this.requestRaw<RoomInfo[]>('GET', `/api/rooms${query({ ...q })}`);
    return { rooms: data, next: nextCursor(headers.get('link')) };
  }

  /** `GET /api/rooms/{roomId}`. */
  room(roomId: string): Promise<RoomInfo> {
    return this.request('GET', `/api/rooms/${encodeURIComponent(roomId)}`);
  }

  /** `POST /api/rooms/{roomId}/seats`: sit yourself. */
  sit(roomId: string): Promise<RoomInfo> {
    return this.request('POST', `/api/rooms/${encodeURIComponent(roomId)}/seats`, {});
  }

  /** `POST /api/rooms/{roomId}/seats` with `{"bot":true}` (host only). */
  addBot(roomId: string): Promise<RoomInfo> {
    return this.request('POST', `/api/rooms/${encodeURIComponent(roomId)}/seats`, { bot: true });
  }

  /** `DELETE /api/rooms/{roomId}/seats/me`. */
  leave(roomId: string): Promise<RoomInfo> {
    return this.request('DELETE', `/api/rooms/${encodeURIComponent(roomId)}/seats/me`);
  }

  /** `POST /api/rooms/{roomId}/start` (host only). */
  start(roomId: string): Promise<{ gamePk: string }> {
    return this.request('POST', `/api/rooms/${encodeURIComponent(roomId)}/start`);
  }

  /** `GET /api/me/games`: my finished games, newest first. */
  myGames(q: { before?: number; limit?: number } = {}): Promise<GameRecord[]> {
    return this.request('GET', `/api/me/games${query(q)}`);
  }

  /** `GET /api/replays/{gamePk}` (participants only). See [`replayScenes`]. */
  replay<V = GameView>(gamePk: string): Promise<Replay<V>> {
    return this.request('GET', `/api/replays/${encodeURIComponent(gamePk)}`);
  }

  /** The WebSocket URL for this client's token. */
  /** The WebSocket URL at `base` (default: this client's `baseUrl`), path prefix kept. */
  socketUrl(base: string = this.baseUrl): string {
    const u = new URL(base);
    u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    u.pathname = u.pathname.replace(/\/+$/, '') + '/ws';
    u.search = query({ token: this.token });
    return u.toString();
  }

  /** Opens the WebSocket connection (it reconnects by itself until closed). */
  connect(opts: ConnectOptions = {}): Connection {
    if (!this.token) throw new Error('connect needs a token: createSession first');
    return new Connection(this, opts);
  }
}
