// RFC 6902 JSON Patch, as replays use it: the add/remove/replace ops that the server's
// diff produces (move/copy/test are accepted too). Returns a new document; the input is
// untouched.
/** A patch that cannot be applied to the document (a corrupt or mismatched replay). */
export class PatchError extends Error {
    constructor(message) {
        super(message);
        this.name = 'PatchError';
    }
}
function unescapeToken(token) {
    return token.replace(/~1/g, '/').replace(/~0/g, '~');
}
function parsePointer(pointer) {
    if (pointer === '')
        return [];
    if (!pointer.startsWith('/'))
        throw new PatchError(`bad JSON pointer: ${pointer}`);
    return pointer.slice(1).split('/').map(unescapeToken);
}
function isContainer(v) {
    return v !== null && typeof v === 'object';
}
function get(doc, path) {
    let cur = doc;
    for (const t of path) {
        if (!isContainer(cur))
            throw new PatchError(`no such path: /${path.join('/')}`);
        cur = Array.isArray(cur) ? cur[Number(t)] : cur[t];
    }
    return cur;
}
function arrayIndex(arr, token, forAdd) {
    if (token === '-' && forAdd)
        return arr.length;
    const i = Number(token);
    if (!Number.isInteger(i) || i < 0 || i > arr.length || (!forAdd && i === arr.length)) {
        throw new PatchError(`bad array index: ${token}`);
    }
    return i;
}
function has(obj, key) {
    return Object.prototype.hasOwnProperty.call(obj, key);
}
function applyOne(doc, op) {
    const path = parsePointer(op.path);
    if (path.length === 0) {
        if (op.op === 'add' || op.op === 'replace')
            return structuredClone(op.value);
        if (op.op === 'remove')
            return null;
    }
    const parent = get(doc, path.slice(0, -1));
    const last = path[path.length - 1] ?? '';
    if (!isContainer(parent))
        throw new PatchError(`no parent for ${op.path}`);
    switch (op.op) {
        case 'add':
            if (Array.isArray(parent))
                parent.splice(arrayIndex(parent, last, true), 0, structuredClone(op.value));
            else
                parent[last] = structuredClone(op.value);
            return doc;
        case 'remove':
            if (Array.isArray(parent))
                parent.splice(arrayIndex(parent, last, false), 1);
            else if (has(parent, last))
                delete parent[last];
            else
                throw new PatchError(`remove of a missing member: ${op.path}`);
            return doc;
        case 'replace':
            if (Array.isArray(parent))
                parent[arrayIndex(parent, last, false)] = structuredClone(op.value);
            else if (has(parent, last))
                parent[last] = structuredClone(op.value);
            else
                throw new PatchError(`replace of a missing member: ${op.path}`);
            return doc;
        case 'move':
        case 'copy': {
            const value = structuredClone(get(doc, parsePointer(op.from)));
            if (op.op === 'move')
                doc = applyOne(doc, { op: 'remove', path: op.from });
            return applyOne(doc, { op: 'add', path: op.path, value });
        }
        case 'test':
            if (JSON.stringify(get(doc, path)) !== JSON.stringify(op.value))
                throw new PatchError(`test failed at ${op.path}`);
            return doc;
        default:
            throw new PatchError(`unknown patch op: ${op.op}`);
    }
}
/** Applies one RFC 6902 patch to a copy of `doc`. Throws [`PatchError`] when it does not fit. */
export function applyPatch(doc, patch) {
    let out = structuredClone(doc);
    for (const op of patch)
        out = applyOne(out, op);
    return out;
}
