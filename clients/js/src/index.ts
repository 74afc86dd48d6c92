// @roomd/client: a typed client for roomd (docs/protocol.md). No runtime dependencies
// beyond the platform's fetch and WebSocket.

export * from './types.js';
export { applyPatch, PatchError } from './patch.js';
export { RoomdClient, RoomdError, nextCursor, replayScenes } from './http.js';
export type { ClientOptions, ListRoomsQuery, RoomPage } from './http.js';
export { Connection, RoomChannel, ActionRejected, ClockCs } from './connection.js';
export type { ConnectOptions, ConnectionEvents, ConnectionStatus, CsSource, NodeSocketInfo, RoomEvents, WebSocketCtor } from './connection.js';
