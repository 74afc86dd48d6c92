// The roomd client protocol (docs/protocol.md) as TypeScript types. Field names are the
// wire names. They are checked against real server frames by test/frames.test.mjs (a tsc
// type-check of every captured frame, with excess-property checks), so a field renamed
// on the server fails the suite.

/** A user id (`u_…`); player ids in games are user ids. */
export type UserId = string;

// ---- HTTP --------------------------------------------------------------------------

/** `POST /api/session`. */
export interface Session {
  userId: UserId;
  token: string;
  name: string;
}

/** An option value: booleans for on/off, `null` for "없음", `"auto"` where it depends. */
export type OptionValue = string | number | boolean | null;

export interface OptionChoice {
  value: OptionValue;
  label: string;
}

export interface GameOption {
  key: string;
  title: string;
  choices: OptionChoice[];
  default: OptionValue;
}

/** One entry of `GET /api/games`. */
export interface CatalogEntry {
  id: string;
  nameKo: string;
  minPlayers: number;
  maxPlayers: number;
  stateVersion: number;
  defaultOptions: Record<string, OptionValue>;
  options: GameOption[];
  /** Quick-chat phrases, on games that have quick chat (send a `key` with `chat`). */
  chatPhrases?: ChatPhrase[];
}

/** A quick-chat phrase: the `key` to send and the Korean `label` to show. */
export interface ChatPhrase {
  key: string;
  label: string;
}

export interface Seat {
  userId: UserId;
  name: string;
  bot: boolean;
}

export type RoomStatus = 'waiting' | 'playing' | 'ended';

/** `GET /api/rooms/{roomId}`, and the view of a room that has not started. */
export interface RoomInfo {
  roomId: string;
  game: string;
  options: Record<string, OptionValue>;
  host: UserId;
  seats: Seat[];
  status: RoomStatus;
  gamePk?: string;
  node?: string;
  /** The owner node's public base URL when it has one: `{nodeUrl}/ws` skips a hop. */
  nodeUrl?: string;
  graceSec: number;
  minPlayers: number;
  maxPlayers: number;
  createdAt: number;
  /** Whether the room is in the players' lobby (`GET /api/rooms`). */
  listed?: boolean;
}

/** `POST /api/rooms` body. `seed` (32 hex) only on servers with `dev.allow_fixed_seed`. */
export interface CreateRoom {
  game: string;
  options?: Record<string, OptionValue>;
  graceSec?: number;
  seed?: string;
  /** In the players' lobby? Default: true for player games, false for `tally`. */
  listed?: boolean;
}

export type ResultReason = 'normal' | 'resign' | 'timeout' | 'abandoned' | 'draw-agreed';

/** The end of a game (the `result` message and game records). */
export interface GameResult {
  ranking: UserId[][];
  scores: Record<UserId, number> | null;
  summary: string;
  reason: ResultReason;
  details: Record<string, unknown>;
}

/** One entry of `GET /api/me/games`. */
export interface GameRecord {
  gamePk: string;
  game: string;
  roomId: string;
  players: UserId[];
  names: string[];
  startedAt: number;
  endedAt: number;
  result: GameResult;
}

/** One RFC 6902 operation. */
export type PatchOp =
  | { op: 'add' | 'replace' | 'test'; path: string; value: unknown }
  | { op: 'remove'; path: string }
  | { op: 'move' | 'copy'; from: string; path: string };

export interface ReplayStep {
  seq: number;
  at: number;
  actor: UserId | null;
  /** `bot`: a bot's own move; `auto`: the server's (a timeout, a tick, the time limit). */
  kind: 'start' | 'player' | 'bot' | 'auto';
}

/** `GET /api/replays/{gamePk}`: scene 0 is `first`; `patches[k]` turns scene k into k + 1. */
export interface Replay<V = GameView> {
  gamePk: string;
  game: string;
  scenes: number;
  first: V;
  patches: PatchOp[][];
  steps: ReplayStep[];
}

/** Every HTTP error: stable English `code`, Korean `reason`. */
export interface ErrorBody {
  code: string;
  reason: string;
}

// ---- games -------------------------------------------------------------------------

export interface TallyView {
  count: number;
  last: UserId | null;
  target: number | null;
  order: UserId[];
  now: number;
}
export type TallyAction = { type: 'bump' };
export type TallyEvent = { type: 'bumped'; by: UserId; count: number };

export type Fruit = 'strawberry' | 'banana' | 'lime' | 'plum';
export interface Face {
  fruit: Fruit;
  count: number;
}
export interface HalliPlayerView {
  deck: number;
  faceUpCount: number;
  top: Face | null;
  active: boolean;
  lockedUntil: number | null;
  locked: boolean;
  rtt: number | null;
  rttBand: 'green' | 'yellow' | 'red' | null;
  correct: number;
  wrong: number;
}
export interface LastBell {
  player: UserId;
  correct: boolean;
  fruit?: Fruit;
  at: number;
}
export type HalliEndReason = 'lastStanding' | 'official' | 'timeLimit';
export interface HalliGalliOptions {
  endMode: 'lastStanding' | 'official';
  timeLimitMin: number | null;
  flipSeconds: number;
  autoFlip: boolean;
  flipGuardMs: number;
  wrongRingLockoutMs: number;
  leftoverCards: 'pot' | 'remove';
  latencyComp: 'off' | 'light';
  showRtt: boolean;
  kidMode: boolean;
  duelWrongLoses: boolean;
  strikeOut: boolean;
  penaltyEscalation: boolean;
  wrongToPot: boolean;
  /** How quickly the bots ring. */
  botLevel: 'easy' | 'normal' | 'hard';
}
export interface HalliGalliView {
  phase: 'countdown' | 'playing' | 'ended';
  now: number;
  order: UserId[];
  turn: UserId | null;
  turnDeadline: number | null;
  tableVersion: number;
  players: Record<UserId, HalliPlayerView>;
  pot: number;
  removed: number;
  countdownEndsAt: number;
  endsAt: number | null;
  flipAllowedAt: number;
  flipReserved: boolean;
  lastBell: LastBell | null;
  eliminated: UserId[];
  ringWindow: { closesAt: number; rang: UserId[] } | null;
  flipMs: number;
  options: HalliGalliOptions;
  canFlip: boolean;
  canRing: boolean;
  slowNotice: string | null;
  endReason: HalliEndReason | null;
}
export type HalliGalliAction = { type: 'flip' } | { type: 'ring'; version: number };
/** Halli Galli's events (their fields keep the engine's snake_case names). */
export type HalliGalliEvent =
  | { type: 'started'; turn: UserId }
  | { type: 'flipped'; player: UserId; fruit: Fruit; count: number; table_version: number; auto: boolean }
  | { type: 'flipReserved'; player: UserId; at: number }
  | { type: 'ringQueued'; player: UserId; closes_at: number }
  | { type: 'bell'; player: UserId; correct: boolean; fruit: Fruit | null }
  | { type: 'collected'; player: UserId; taken: number; table_version: number }
  | { type: 'penalty'; player: UserId; to: UserId[]; to_pot: number }
  | { type: 'locked'; player: UserId; until: number }
  | { type: 'forfeited'; player: UserId; to_pot: number }
  | { type: 'eliminated'; player: UserId; reason: 'emptyDeck' | 'couldNotPay' | 'duelWrongRing' | 'strikeOut' }
  | { type: 'turn'; player: UserId; deadline: number }
  | { type: 'ended'; reason: HalliEndReason };

export type Kind = 'cockroach' | 'bat' | 'fly' | 'toad' | 'rat' | 'scorpion' | 'spider' | 'stinkbug';
export interface CardFace {
  id: number;
  kind: Kind;
}
export interface ClaimEntry {
  from: UserId;
  to: UserId;
  claim: Kind;
}
export interface Reveal {
  card: number;
  kind: Kind;
  claim: Kind;
  call: 'true' | 'false';
  caller: UserId;
  correct: boolean;
  takenBy: UserId;
}
export type LossReason = 'four' | 'emptyHand' | 'eightKinds';
export interface CockroachView {
  order: UserId[];
  hand: CardFace[] | null;
  handCounts: Record<UserId, number>;
  fronts: Record<UserId, Record<Kind, number>>;
  starter: UserId;
  holder: UserId | null;
  lastPasser: UserId | null;
  claim: Kind | null;
  seen: UserId[];
  claims: ClaimEntry[] | null;
  peeked: boolean;
  card: CardFace | null;
  passTargets: UserId[];
  lastReveal: Reveal | null;
  loseCount: number;
  loser: UserId | null;
  lossReason: LossReason | null;
  losingKind: Kind | null;
  removedCount: number;
  removed: CardFace[] | null;
  hands: Record<UserId, CardFace[]> | null;
  quickChat: boolean;
  showSeenBy: boolean;
  deadline: number | null;
  now: number;
}
export type CockroachAction =
  | { type: 'offer'; cardId: number; to: UserId; claim: Kind }
  | { type: 'call'; call: 'true' | 'false' }
  | { type: 'peek' }
  | { type: 'pass'; to: UserId; claim: Kind };
export type CockroachEvent =
  | { type: 'offered'; from: UserId; to: UserId; claim: Kind }
  | { type: 'peeked'; by: UserId }
  | { type: 'passed'; from: UserId; to: UserId; claim: Kind }
  | { type: 'revealed'; caller: UserId; call: 'true' | 'false'; claim: Kind; card: CardFace; correct: boolean; takenBy: UserId }
  | { type: 'timedOut'; player: UserId }
  | { type: 'roundStarted'; starter: UserId }
  | { type: 'gameOver'; loser: UserId; reason: LossReason; losingKind: Kind | null };

/** Per game id: its view, client action and event types. Add a game here (docs/adding-a-game.md). */
export interface Games {
  'halli-galli': { view: HalliGalliView; action: HalliGalliAction; event: HalliGalliEvent };
  'cockroach-poker': { view: CockroachView; action: CockroachAction; event: CockroachEvent };
  tally: { view: TallyView; action: TallyAction; event: TallyEvent };
}
export type GameId = keyof Games;
export type GameView = Games[GameId]['view'];
export type GameAction = Games[GameId]['action'];
export type GameEvent = Games[GameId]['event'];

// ---- WebSocket ---------------------------------------------------------------------

export type ClientMessage =
  | { t: 'sub'; room: string }
  | { t: 'unsub'; room: string }
  | { t: 'act'; room: string; cs: number; a: unknown }
  | { t: 'chat'; room: string; phrase: string };

/** `sync`: the full view (a game view, or the room's info while it waits to start). */
export interface SyncMessage<V = GameView> {
  t: 'sync';
  room: string;
  seq: number;
  view: V | RoomInfo;
}
export interface UpdateMessage<V = GameView, E = GameEvent> {
  t: 'update';
  room: string;
  seq: number;
  view: V;
  events: E[];
}
export interface AckMessage {
  t: 'ack';
  room: string;
  cs: number;
  seq: number;
}
export interface RejectMessage {
  t: 'reject';
  room: string;
  cs: number;
  code: string;
  reason: string;
}
export interface ResultMessage {
  t: 'result';
  room: string;
  gamePk: string;
  result: GameResult;
}
export interface ErrorMessage {
  t: 'error';
  code: string;
  reason: string;
  room?: string;
  cs?: number;
}
/** A quick-chat phrase a seated player sent (to every subscriber; never in the log). */
export interface ChatMessage {
  t: 'chat';
  room: string;
  from: UserId;
  phrase: string;
}
/** The room's seats or status changed (not a game input). */
export interface RoomMessage {
  t: 'room';
  room: string;
  info: RoomInfo;
}
export type ServerMessage =
  | SyncMessage
  | UpdateMessage
  | AckMessage
  | RejectMessage
  | ResultMessage
  | ErrorMessage
  | ChatMessage
  | RoomMessage;

/** Whether a `sync` view is the room's info (the game has not started). */
export function isRoomInfo(view: unknown): view is RoomInfo {
  return typeof view === 'object' && view !== null && 'roomId' in view && Array.isArray((view as RoomInfo).seats);
}
