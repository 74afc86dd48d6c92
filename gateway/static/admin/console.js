// The operator console: nodes, rooms (filters, pages), a room's detail, and the admin
// verbs behind a confirmation. Talks only to /admin/api with the operator's token
// (kept in sessionStorage for this tab). Counts refresh every 2 s.

const KEY = 'roomd.admin.token';
const $ = (sel) => document.querySelector(sel);
const el = (tag, props = {}, ...children) => {
  const e = Object.assign(document.createElement(tag), props);
  for (const c of children) e.append(c);
  return e;
};

// `closed`: rooms this console closed, so their detail's 404 afterwards reads as what
// it is (the room is closed), not as an error.
const state = { filters: { game: '', node: '' }, rooms: [], next: null, selected: null, closed: new Set() };

function status(text, error = false) {
  const s = $('#status');
  s.textContent = text;
  s.classList.toggle('error', error);
}

async function call(method, path, body) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY) || ''}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch('/admin/api' + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await res.json().catch(() => null);
  if (res.status === 401) {
    sessionStorage.removeItem(KEY);
    showLogin();
  }
  if (!res.ok) throw Object.assign(new Error(data?.reason || `요청이 실패했어요 (${res.status})`), { status: res.status, code: data?.code });
  return data;
}

/** Resolves true when the operator confirms `text` in the dialog. */
function confirmAction(text) {
  const dialog = $('#confirm');
  $('#confirm-text').textContent = text;
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), { once: true }));
}

const ago = (ms) => (ms < 1000 ? '방금' : ms < 60000 ? `${Math.round(ms / 1000)}초` : `${Math.round(ms / 60000)}분`);

async function loadNodes() {
  const { nodes } = await call('GET', '/nodes');
  $('#node-count').textContent = `(${nodes.length})`;
  const body = $('#nodes tbody');
  body.replaceChildren(...nodes.map((n) => {
    const drain = el('button', { className: 'danger drain', textContent: '드레인', disabled: n.draining });
    drain.dataset.node = n.id;
    drain.addEventListener('click', async () => {
      if (!(await confirmAction(`노드 ${n.id}를 드레인할까요? 방은 다른 노드로 옮겨지고 연결은 끊겨요.`))) return;
      try { await call('POST', `/nodes/${encodeURIComponent(n.id)}/drain`); status(`${n.id} 드레인 시작`); } catch (e) { status(e.message, true); }
    });
    const row = el('tr', {},
      el('td', { textContent: n.id + (n.self ? ' (이 노드)' : '') }),
      el('td', { textContent: n.address ?? '-' }),
      el('td', { className: 'n-rooms', textContent: n.rooms ?? '-' }),
      el('td', { className: 'n-sockets', textContent: n.sockets ?? '-' }),
      el('td', { textContent: ago(Date.now() - n.lastHeartbeat) }),
      el('td', { className: n.draining ? 'draining' : '', textContent: n.draining ? '드레인 중' : '정상' }),
      el('td', {}, drain));
    row.dataset.node = n.id;
    return row;
  }));
}

function roomRow(r) {
  const row = el('tr', {},
    el('td', { textContent: r.roomId }),
    el('td', { textContent: r.game }),
    el('td', { className: 'r-status', textContent: r.status }),
    el('td', { textContent: r.node ?? '-' }),
    el('td', { className: 'r-players', textContent: `${r.players} (사람 ${r.humans})` }),
    el('td', { className: 'r-seq', textContent: r.seq ?? '-' }),
    el('td', { textContent: ago(r.ageMs) }));
  row.dataset.room = r.roomId;
  if (state.selected === r.roomId) row.classList.add('selected');
  row.addEventListener('click', () => { state.selected = r.roomId; renderRooms(); loadDetail(); });
  return row;
}

function renderRooms() {
  $('#room-count').textContent = `(${state.rooms.length}${state.next ? '+' : ''})`;
  $('#rooms tbody').replaceChildren(...state.rooms.map(roomRow));
  $('#more').hidden = !state.next;
}

function query(cursor) {
  const q = new URLSearchParams({ limit: '50' });
  if (state.filters.game) q.set('game', state.filters.game);
  if (state.filters.node) q.set('node', state.filters.node);
  if (cursor) q.set('cursor', cursor);
  return `/rooms?${q}`;
}

/** Reloads the pages shown so far (the first page, plus any loaded with 더 보기). */
async function loadRooms() {
  const pages = Math.max(1, state.pages || 1);
  let rooms = [];
  let next = null;
  for (let i = 0; i < pages; i++) {
    const page = await call('GET', query(next));
    rooms = rooms.concat(page.rooms);
    next = page.next;
    if (!next) break;
  }
  state.rooms = rooms;
  state.next = next;
  renderRooms();
}

async function loadDetail() {
  const room = state.selected;
  const box = $('#detail');
  if (!room) { box.hidden = true; return; }
  let d;
  try { d = await call('GET', `/rooms/${encodeURIComponent(room)}`); } catch (e) {
    box.hidden = true;
    state.selected = null;
    // A room that is gone was closed (here or elsewhere) or ended: news, not an error.
    if (e.status === 404) status(state.closed.has(room) ? `방 ${room}을 닫았어요 (닫힘)` : `방 ${room}은 이제 없어요 (닫혔거나 끝났어요)`);
    else status(e.message, true);
    return;
  }
  box.hidden = false;
  $('#d-room').textContent = room;
  const info = d.info;
  const pairs = [['게임', info.game], ['상태', info.status], ['노드', d.node ?? '-'], ['seq', d.seq ?? '-'],
    ['구독', d.subscribers], ['방장', info.host]];
  $('#d-info').replaceChildren(...pairs.flatMap(([k, v]) => [el('dt', { textContent: k }), el('dd', { textContent: String(v) })]));
  $('#d-info').dataset.status = info.status;
  $('#d-seats').replaceChildren(...info.seats.map((s) => {
    const li = el('li', { textContent: `${s.name} (${s.userId})${s.bot ? ' 봇' : ''} ` });
    if (!s.bot) {
      const kick = el('button', { className: 'danger kick', textContent: '내보내기' });
      kick.dataset.user = s.userId;
      kick.addEventListener('click', () => kickUser(room, s.userId, s.name));
      li.append(kick);
    }
    return li;
  }));
  const kicked = info.kicked || [];
  $('#d-kicked').replaceChildren(...(kicked.length ? kicked.map((user) => {
    const li = el('li', { textContent: `${user} ` });
    const allow = el('button', { className: 'unkick', textContent: '다시 허용' });
    allow.dataset.user = user;
    allow.addEventListener('click', () => unkickUser(room, user));
    li.append(allow);
    return li;
  }) : [el('li', { textContent: '-' })]));
  $('#d-recent').replaceChildren(...d.recent.map((r) => el('li', { textContent: `#${r.seq} ${new Date(r.at).toLocaleTimeString('ko-KR')} ${r.actor} ${r.kind}` })));
}

async function kickUser(room, user, name) {
  if (!(await confirmAction(`${name}(${user})님을 방 ${room}에서 내보낼까요? 이 방에는 다시 들어올 수 없어요.`))) return;
  try {
    await call('POST', `/rooms/${encodeURIComponent(room)}/kick`, { user, reason: $('#d-reason').value });
    status(`${name}님을 내보냈어요`);
  } catch (e) { status(e.message, true); }
  await refresh();
}

async function unkickUser(room, user) {
  if (!(await confirmAction(`${user}님이 방 ${room}에 다시 앉거나 구경할 수 있게 할까요?`))) return;
  try {
    await call('POST', `/rooms/${encodeURIComponent(room)}/unkick`, { user, reason: $('#d-reason').value });
    status(`${user}님이 방 ${room}에 다시 들어올 수 있어요`);
  } catch (e) { status(e.message, true); }
  await refresh();
}

async function closeRoom() {
  const room = state.selected;
  if (!room || !(await confirmAction(`방 ${room}을 닫을까요? 진행 중인 게임은 끝나요.`))) return;
  try {
    await call('POST', `/rooms/${encodeURIComponent(room)}/close`, { reason: $('#d-reason').value });
    state.closed.add(room);
    status(`방 ${room}을 닫았어요 (닫힘)`);
  } catch (e) { status(e.message, true); }
  await refresh();
}

let refreshing = false;
async function refresh() {
  if (refreshing || !sessionStorage.getItem(KEY)) return;
  refreshing = true;
  try {
    await Promise.all([loadNodes(), loadRooms()]);
    await loadDetail();
    document.body.dataset.refreshed = String(Date.now());
  } catch (e) { status(e.message, true); } finally { refreshing = false; }
}

function showLogin() {
  $('#login').hidden = false;
  $('#console').hidden = true;
}

function showConsole() {
  $('#login').hidden = true;
  $('#console').hidden = false;
  refresh();
}

$('#login').addEventListener('submit', (e) => {
  e.preventDefault();
  // The last token's "운영자 토큰이 필요해요" is about that token, not this one.
  status('');
  sessionStorage.setItem(KEY, $('#token').value.trim());
  showConsole();
});
$('#filters').addEventListener('submit', (e) => {
  e.preventDefault();
  state.filters = { game: $('#f-game').value.trim(), node: $('#f-node').value.trim() };
  state.pages = 1;
  refresh();
});
$('#more').addEventListener('click', () => { state.pages = (state.pages || 1) + 1; refresh(); });
$('#d-close').addEventListener('click', closeRoom);
setInterval(refresh, 2000);
if (sessionStorage.getItem(KEY)) showConsole(); else showLogin();
