// `npm pack` gives an installable package, as the README's Install section promises: a
// copy of this folder as a fresh checkout has it (no dist/) is packed, the tarball is
// installed into a new project offline with an empty npm cache (so the SDK must have no
// runtime dependencies), and the project imports `@roomd/client` and type-checks against
// it. Everything happens in a temp dir; this folder's dist/ and node_modules/ are only read.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { here } from './roomd.mjs';

const root = path.join(here, '..');
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
const tarball = `roomd-client-${pkg.version}.tgz`;
let tmp;

function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: 120000 });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')} (in ${cwd}) failed:\n${r.stdout}\n${r.stderr}${r.error ?? ''}`);
  return r.stdout;
}

/** A copy of the package as a checkout has it: sources and config, no dist/. */
function checkout(dir) {
  mkdirSync(dir, { recursive: true });
  for (const f of ['package.json', 'package-lock.json', 'README.md', 'tsconfig.json', 'src']) {
    cpSync(path.join(root, f), path.join(dir, f), { recursive: true });
  }
  // The dev dependencies (tsc) that `npm ci` would install, borrowed read-only.
  symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
}

/** A new project with the tarball installed, offline, from an empty cache. */
function install(tgz, dir) {
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'sdk-consumer', private: true, type: 'module' }));
  run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', '--cache', path.join(tmp, 'cache'), tgz], dir);
  return dir;
}

/** The exported names as `import('@roomd/client')` sees them from `dir`. */
function importedNames(dir) {
  const code = "const m = await import('@roomd/client'); console.log(JSON.stringify(Object.keys(m).sort()));";
  return JSON.parse(run(process.execPath, ['--input-type=module', '-e', code], dir));
}

before(() => {
  tmp = mkdtempSync(path.join(tmpdir(), 'roomd-sdk-pack-'));
});
after(() => rmSync(tmp, { recursive: true, force: true }));

test(`npm pack builds ${tarball}, which installs offline and imports as @roomd/client`, async () => {
  assert.deepEqual(pkg.dependencies ?? {}, {}, 'the SDK has no runtime dependencies');
  const src = path.join(tmp, 'pkg');
  checkout(src);
  const out = path.join(tmp, 'out');
  mkdirSync(out);
  run('npm', ['pack', '--loglevel=error', '--pack-destination', out], src);
  assert.deepEqual(readdirSync(out), [tarball], 'the file name the README gives');
  assert.ok(readFileSync(path.join(root, 'README.md'), 'utf8').includes(tarball), `the README names ${tarball}`);

  const app = install(path.join(out, tarball), path.join(tmp, 'app'));
  const installed = path.join(app, 'node_modules', '@roomd', 'client');
  assert.ok(!lstatSync(installed).isSymbolicLink(), 'a copy, not a link to the folder');
  const modules = readdirSync(path.join(root, 'src')).filter((f) => f.endsWith('.ts')).map((f) => f.slice(0, -3)).sort();
  assert.ok(existsSync(path.join(installed, 'dist')), 'the tarball has dist/ (built by the `prepare` script)');
  const dist = readdirSync(path.join(installed, 'dist')).sort();
  assert.deepEqual(dist, modules.flatMap((m) => [`${m}.d.ts`, `${m}.js`]).sort(), 'dist/ has a .js and a .d.ts per module');
  assert.ok(existsSync(path.join(installed, 'README.md')));

  // The same runtime exports as this folder's build, and they work.
  const names = importedNames(app);
  assert.deepEqual(names, Object.keys(await import('../dist/index.js')).sort());
  for (const n of ['RoomdClient', 'Connection', 'RoomChannel', 'RoomdError', 'ActionRejected', 'ClockCs', 'applyPatch', 'replayScenes']) {
    assert.ok(names.includes(n), `${n} is exported`);
  }
  const smoke = `import { RoomdClient, applyPatch } from '@roomd/client';
    const c = new RoomdClient({ baseUrl: 'http://127.0.0.1:1/' });
    if (c.baseUrl !== 'http://127.0.0.1:1' || typeof c.sit !== 'function') process.exit(2);
    if (applyPatch({ a: 1 }, [{ op: 'replace', path: '/a', value: 2 }]).a !== 2) process.exit(3);`;
  run(process.execPath, ['--input-type=module', '-e', smoke], app);

  // The declarations resolve through package.json `exports` for a TypeScript user.
  writeFileSync(path.join(app, 'check.ts'), `import { RoomdClient, type RoomInfo, type RoomPage } from '@roomd/client';
const client = new RoomdClient({ baseUrl: 'http://127.0.0.1:1' });
export const seat: Promise<RoomInfo> = client.sit('r');
export const page: Promise<RoomPage> = client.listRooms({ game: 'tally' });
`);
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  run(process.execPath, [tsc, '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--lib', 'es2022,dom', 'check.ts'], app);
});
