// The README's API list stays true: every exported class and function, and every public
// method of each exported class (inherited ones too, e.g. `on`), has its line there. The
// public surface is read from src/index.ts with the TypeScript compiler (private,
// protected and `@internal` members are not part of it), so a method added without a
// README line fails here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { here } from './roomd.mjs';

const root = path.join(here, '..');

/** `{ classes: Map<name, string[] methods>, functions: string[] }` exported by src/index.ts. */
function publicApi() {
  const srcDir = path.join(root, 'src') + path.sep;
  const entry = path.join(srcDir, 'index.ts');
  const program = ts.createProgram([entry], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'],
    strict: true,
    noEmit: true,
    skipLibCheck: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(entry);
  assert.ok(source, 'src/index.ts is in the program');
  const classes = new Map();
  const functions = [];
  const isPublicMethod = (sym) => {
    // Methods declared in src/ (not those a base like Error brings from the platform's types).
    const decls = (sym.getDeclarations() ?? []).filter(
      (d) => (ts.isMethodDeclaration(d) || ts.isMethodSignature(d)) && d.getSourceFile().fileName.startsWith(srcDir),
    );
    if (decls.length === 0) return false; // a property, not a method
    return decls.some((d) => {
      const flags = ts.getCombinedModifierFlags(d);
      if (flags & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) return false;
      if (d.name && ts.isPrivateIdentifier(d.name)) return false;
      return !ts.getJSDocTags(d).some((t) => t.tagName.text === 'internal');
    });
  };
  for (const exported of checker.getExportsOfModule(checker.getSymbolAtLocation(source))) {
    const sym = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
    if (sym.flags & ts.SymbolFlags.Class) {
      const decl = sym.getDeclarations().find(ts.isClassDeclaration);
      const instance = checker.getDeclaredTypeOfSymbol(sym);
      const statics = checker.getTypeOfSymbolAtLocation(sym, decl);
      const methods = [...checker.getPropertiesOfType(instance), ...checker.getPropertiesOfType(statics)]
        .filter((m) => m.name !== 'prototype' && isPublicMethod(m))
        .map((m) => m.name);
      classes.set(exported.name, [...new Set(methods)].sort());
    } else if (sym.flags & ts.SymbolFlags.Function) {
      functions.push(exported.name);
    }
  }
  return { classes, functions: functions.sort() };
}

/** The README's `###` sections: `{ heading, body }`. */
function sections(readme) {
  const out = [];
  for (const part of readme.split(/^### /m).slice(1)) {
    const nl = part.indexOf('\n');
    out.push({ heading: part.slice(0, nl), body: part.slice(nl + 1).split(/^## /m)[0] });
  }
  return out;
}

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** A line of the list that documents `name(` (or `x.name(`, `name<T>(`). */
const documents = (text, name) => new RegExp(`^\\s*- \`(?:new )?(?:[\\w]+\\.)?${escape(name)}[<(]`, 'm').test(text);

/** What the README lacks, as readable strings (empty when it covers everything). */
function missing(readme, api) {
  const out = [];
  const secs = sections(readme);
  for (const [cls, methods] of api.classes) {
    // The section whose heading names the class (`### \`RoomdClient\`: …`).
    const sec = secs.find((s) => s.heading.includes(`\`${cls}\``));
    if (!sec) {
      out.push(`class ${cls}: no "### \`${cls}\`" section`);
      continue;
    }
    for (const m of methods) if (!documents(sec.body, m)) out.push(`${cls}.${m}: no "- \`${m}(…\`" line in ### ${sec.heading}`);
    // A class without methods of its own (an error type) needs its own list line.
    if (methods.length === 0 && !new RegExp(`^\\s*- \`${escape(cls)}\``, 'm').test(sec.body)) {
      out.push(`class ${cls}: no "- \`${cls}\`" line in ### ${sec.heading}`);
    }
  }
  for (const f of api.functions) if (!documents(readme, f)) out.push(`function ${f}: no "- \`${f}(…\`" line`);
  return out;
}

const api = publicApi();
const readme = readFileSync(path.join(root, 'README.md'), 'utf8');

test('the public API is what the README is checked against', () => {
  // A sanity floor, so an empty reading of src/ cannot pass as "nothing to document".
  for (const cls of ['RoomdClient', 'Connection', 'RoomChannel', 'ClockCs', 'RoomdError', 'ActionRejected', 'PatchError']) {
    assert.ok(api.classes.has(cls), `${cls} is exported`);
  }
  for (const m of ['createSession', 'listRooms', 'sit', 'addBot', 'myGames', 'connect']) {
    assert.ok(api.classes.get('RoomdClient').includes(m), `RoomdClient.${m} is public`);
  }
  assert.ok(api.classes.get('Connection').includes('on'), 'inherited methods count');
  assert.ok(!api.classes.get('Connection').includes('setStatus'), 'private methods do not');
  assert.ok(!api.classes.get('Connection').includes('emit'), 'protected methods do not');
  assert.ok(!api.classes.get('RoomChannel').includes('deliver'), '@internal methods do not');
  assert.deepEqual(api.functions, ['applyPatch', 'isRoomInfo', 'nextCursor', 'replayScenes']);
});

test('README.md documents every public class, method and function', () => {
  assert.deepEqual(missing(readme, api), [], 'add a line for each to the API section of clients/js/README.md');
});

test('the check fails when a method has no README line', () => {
  const withNew = { classes: new Map(api.classes), functions: [...api.functions, 'brandNewHelper'] };
  withNew.classes.set('RoomdClient', [...api.classes.get('RoomdClient'), 'kick']);
  assert.deepEqual(missing(readme, withNew), [
    'RoomdClient.kick: no "- `kick(…`" line in ### `RoomdClient`: the HTTP API',
    'function brandNewHelper: no "- `brandNewHelper(…`" line',
  ]);
  // And a line removed from the README is noticed in its own class's section only.
  const withoutSit = readme.replace(/^- `sit\(.*\n/m, '');
  assert.notEqual(withoutSit, readme);
  assert.deepEqual(missing(withoutSit, api), ['RoomdClient.sit: no "- `sit(…`" line in ### `RoomdClient`: the HTTP API']);
});
