// The SDK copy that roomd embeds (gateway/static/sdk/) is exactly what src/ builds to.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { here, repo } from './roomd.mjs';

test('gateway/static/sdk is the build of clients/js/src (run `npm run build && npm run sync-static`)', () => {
  const out = mkdtempSync(path.join(tmpdir(), 'roomd-sdk-'));
  try {
    const tsc = path.join(here, '..', 'node_modules', 'typescript', 'bin', 'tsc');
    const r = spawnSync(process.execPath, [tsc, '-p', path.join(here, '..', 'tsconfig.json'), '--outDir', out], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    const built = readdirSync(out).filter((f) => f.endsWith('.js')).sort();
    const embedded = path.join(repo, 'gateway', 'static', 'sdk');
    assert.deepEqual(readdirSync(embedded).sort(), built, 'the same files');
    for (const f of built) {
      assert.equal(readFileSync(path.join(embedded, f), 'utf8'), readFileSync(path.join(out, f), 'utf8'), `gateway/static/sdk/${f} is stale`);
    }
  } finally { rmSync(out, { recursive: true, force: true }); }
});
