// The roomd client protocol (docs/protocol.md) as TypeScript types. Field names are the
// wire names. They are checked against real server frames by test/frames.test.mjs (a tsc
// type-check of every captured frame, with excess-property checks), so a field renamed
// on the server fails the suite.
/** Whether a `sync` view is the room's info (the game has not started). */
export function isRoomInfo(view) {
    return typeof view === 'object' && view !== null && 'roomId' in view && Array.isArray(view.seats);
}
