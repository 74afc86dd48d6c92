// A tiny RFC 6902 JSON Patch applier: the add/remove/replace ops that json-patch's diff
// produces (move/copy/test are accepted too). Returns a new document; the input is untouched.

function unescape(token) { return token.replace(/~1/g, '/').replace(/~0/g, '~'); }

function parse(pointer) {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw new Error(`bad JSON pointer: ${pointer}`);
  return pointer.slice(1).split('/').map(unescape);
}

function get(doc, path) {
  let cur = doc;
  for (const t of path) {
    if (cur === null || typeof cur !== 'object') throw new Error(`no such path: /${path.join('/')}`);
    cur = Array.isArray(cur) ? cur[Number(t)] : cur[t];
  }
  return cur;
}

function index(arr, token, forAdd) {
  if (token === '-' && forAdd) return arr.length;
  const i = Number(token);
  if (!Number.isInteger(i) || i < 0 || i > arr.length || (!forAdd && i === arr.length)) {
    throw new Error(`bad array index: ${token}`);
  }
  return i;
}

function applyOne(doc, op) {
  const path = parse(op.path);
  if (path.length === 0) {
    if (op.op === 'add' || op.op === 'replace') return structuredClone(op.value);
    if (op.op === 'remove') return null;
  }
  const parent = get(doc, path.slice(0, -1));
  const last = path[path.length - 1];
  if (parent === null || typeof parent !== 'object') throw new Error(`no parent for ${op.path}`);
  switch (op.op) {
    case 'add':
      if (Array.isArray(parent)) parent.splice(index(parent, last, true), 0, structuredClone(op.value));
      else parent[last] = structuredClone(op.value);
      return doc;
    case 'remove':
      if (Array.isArray(parent)) parent.splice(index(parent, last, false), 1);
      else if (last in parent) delete parent[last];
      else throw new Error(`remove of a missing member: ${op.path}`);
      return doc;
    case 'replace':
      if (Array.isArray(parent)) parent[index(parent, last, false)] = structuredClone(op.value);
      else if (last in parent) parent[last] = structuredClone(op.value);
      else throw new Error(`replace of a missing member: ${op.path}`);
      return doc;
    case 'move':
    case 'copy': {
      const value = structuredClone(get(doc, parse(op.from)));
      if (op.op === 'move') doc = applyOne(doc, { op: 'remove', path: op.from });
      return applyOne(doc, { op: 'add', path: op.path, value });
    }
    case 'test':
      if (JSON.stringify(get(doc, path)) !== JSON.stringify(op.value)) throw new Error(`test failed at ${op.path}`);
      return doc;
    default:
      throw new Error(`unknown patch op: ${op.op}`);
  }
}

export function applyPatch(doc, patch) {
  let out = structuredClone(doc);
  for (const op of patch) out = applyOne(out, op);
  return out;
}
