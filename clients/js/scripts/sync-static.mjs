// Copies the built SDK (dist/*.js) into gateway/static/sdk/, which roomd embeds in its
// binary (cargo must not need node). test/static.test.mjs checks that a fresh build from
// src/ yields exactly these files.
import { readdirSync, copyFileSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, '..', 'dist');
const out = path.join(here, '..', '..', '..', 'gateway', 'static', 'sdk');
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
for (const f of readdirSync(dist).filter((f) => f.endsWith('.js')).sort()) {
  copyFileSync(path.join(dist, f), path.join(out, f));
  console.log(`gateway/static/sdk/${f}`);
}
