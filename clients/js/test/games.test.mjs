// Every game in the registry (the live catalog of a real roomd) has every piece that
// docs/adding-a-game.md names, and every path that guide names exists.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import YAML from 'yaml';
import { startRoomd, here, repo } from './roomd.mjs';
import { RoomdClient } from '../dist/index.js';

let node;
let ids;
before(async () => {
  node = await startRoomd();
  ids = (await new RoomdClient({ baseUrl: node.base }).games()).map((g) => g.id);
});
after(async () => { await node?.stop(); });

const read = (p) => readFileSync(path.join(repo, p), 'utf8');

/** `{gameId: module file}` from app.js's `BOARDS` map and its imports. */
function boards() {
  const app = read('gateway/static/app.js');
  const imports = Object.fromEntries([...app.matchAll(/import \* as (\w+) from '\.\/([\w-]+\.js)'/g)].map((m) => [m[1], m[2]]));
  const map = app.match(/const BOARDS = \{([^}]*)\}/);
  assert.ok(map, 'app.js has a BOARDS map');
  const out = {};
  for (const entry of map[1].split(',').map((s) => s.trim()).filter(Boolean)) {
    const [k, v] = entry.includes(':') ? entry.split(':').map((s) => s.trim()) : [entry, entry];
    out[k.replace(/'/g, '')] = imports[v];
  }
  return out;
}

test('the registry has the three games', () => {
  assert.deepEqual([...ids].sort(), ['cockroach-poker', 'halli-galli', 'tally']);
});

test('every game has an SDK view type (the Games map equals the registry, checked by tsc)', () => {
  const dir = path.join(here, '..', 'test-out');
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'games.check.ts');
  writeFileSync(file, [
    "import type { GameId, Games } from '../src/index.js';",
    `const ids = ${JSON.stringify(ids)} as const;`,
    'type Registry = (typeof ids)[number];',
    'export const everyRegistryGameIsTyped: readonly GameId[] = ids;',
    'type Untyped = Exclude<GameId, Registry>;',
    'export const noTypedGameIsMissingFromTheRegistry: [Untyped] extends [never] ? true : Untyped = true;',
    'export type Views = { [K in Registry]: Games[K]["view"] };',
    '',
  ].join('\n'));
  const tsc = path.join(here, '..', 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--module', 'NodeNext', '--moduleResolution', 'NodeNext', '--target', 'ES2022', file], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test('every game is played in the frames test, so its views are checked against AsyncAPI and the SDK types', () => {
  const src = readFileSync(path.join(here, 'frames.test.mjs'), 'utf8');
  const doc = YAML.parse(read('docs/asyncapi.yaml'));
  const views = doc.components.schemas.GameView.oneOf.length;
  assert.equal(views, ids.length, 'one view schema per game in GameView');
  for (const id of ids) assert.ok(src.includes(`test('${id}:`), `frames.test.mjs does not play ${id}`);
});

test('every game has a web board, embedded in the binary, and a browser test', () => {
  const b = boards();
  const web = read('gateway/src/web.rs');
  const e2e = read('e2e/test.mjs');
  for (const id of ids) {
    assert.ok(b[id], `gateway/static/app.js BOARDS has no board for ${id}`);
    assert.ok(existsSync(path.join(repo, 'gateway/static', b[id])), `gateway/static/${b[id]} is missing`);
    assert.ok(web.includes(`include_str!("../static/${b[id]}")`), `gateway/src/web.rs does not embed ${b[id]}`);
    assert.ok(e2e.includes(`createRoom(page, '${id}'`), `e2e/test.mjs does not play ${id}`);
  }
});

test('every game has a fuzz target that scripts/fuzz runs', () => {
  const cargo = read('fuzz/Cargo.toml');
  const script = read('scripts/fuzz');
  assert.ok(script.includes('for f in fuzz/fuzz_targets/*.rs'), 'scripts/fuzz derives its targets from the folder');
  for (const id of ids) {
    const t = id.replace(/-/g, '_');
    assert.ok(existsSync(path.join(repo, `fuzz/fuzz_targets/${t}.rs`)), `no fuzz/fuzz_targets/${t}.rs`);
    assert.ok(cargo.includes(`name = "${t}"`), `fuzz/Cargo.toml has no [[bin]] ${t}`);
    assert.ok(existsSync(path.join(repo, `fuzz/corpus/${t}`)), `no fuzz/corpus/${t}/`);
  }
});

test('every game is in the protocol document', () => {
  const doc = read('docs/protocol.md');
  for (const id of ids) assert.ok(doc.includes(id), `docs/protocol.md does not describe ${id}`);
});

test('every path docs/adding-a-game.md names exists', () => {
  const guide = read('docs/adding-a-game.md');
  const paths = [...guide.matchAll(/`((?:engine|clients|gateway|fuzz|docs|e2e|scripts)\/[^`\s]*)`/g)].map((m) => m[1]);
  assert.ok(paths.length >= 20, `only ${paths.length} paths found`);
  for (const p of paths) assert.ok(existsSync(path.join(repo, p)), `docs/adding-a-game.md names ${p}, which does not exist`);
});

test('the OpenAPI document lists exactly the registry games for POST /api/rooms', () => {
  const doc = JSON.parse(read('docs/openapi.json'));
  const game = doc.paths['/api/rooms'].post.requestBody.content['application/json'].schema.properties.game;
  assert.deepEqual([...game.enum].sort(), [...ids].sort());
});
