// The roomd reference client: lobby, rooms, boards, results and replays. Hash routes:
// #/ (lobby), #/room/{roomId}, #/replay/{gamePk}.

import { h, toast, sound, clock, nameOf, nameTag, withNames } from './ui.js';
import { session, api, Socket } from './net.js';
import * as halli from './halli.js';
import * as cockroach from './cockroach.js';
import * as tally from './tally.js';
import { showReplay } from './replay.js';

const BOARDS = { 'halli-galli': halli, 'cockroach-poker': cockroach, tally };
const app = document.getElementById('app');
let sock = null;
let catalog = null;
let current = null; // the screen on show: {onMsg?, destroy?}
let lobbyTimer = 0;

// For integrators and tests: the live socket and screen.
window.__roomd = { get sock() { return sock; }, get screen() { return current; } };

function gameName(id) { return catalog?.find((g) => g.id === id)?.nameKo || id; }

async function loadCatalog() {
  if (!catalog) catalog = await api('GET', '/api/games');
  return catalog;
}

function setScreen(...nodes) { app.replaceChildren(...nodes); }

function ensureSocket(s) {
  if (sock && sock.token === s.token) return;
  sock?.close();
  sock = new Socket(s.token, {
    message(msg) {
      if (msg.t === 'error' && msg.code !== 'room_unavailable') toast(msg.reason || msg.code);
      current?.onMsg?.(msg);
    },
    status(st) {
      const el = document.getElementById('net');
      el.className = 'net ' + (st === 'open' ? 'on' : st === 'closed' ? 'off' : '');
      el.title = { open: '연결됨', closed: '연결이 끊겼어요. 다시 연결하는 중…', connecting: '연결하는 중…' }[st];
      el.dataset.state = st;
    },
    unauthorized() {
      session.clear();
      sock?.close();
      sock = null;
      toast('세션이 만료됐어요. 이름을 다시 정해 주세요');
      route();
    },
  });
}

async function route() {
  current?.destroy?.();
  current = null;
  clearInterval(lobbyTimer);
  const s = session.get();
  document.getElementById('me').replaceChildren(...(s ? [nameTag(s.name), '님'] : []));
  if (!s) return showLogin();
  ensureSocket(s);
  const path = location.hash.replace(/^#/, '') || '/';
  try {
    await loadCatalog();
    let m;
    if ((m = path.match(/^\/room\/([^/]+)$/))) return await showRoom(decodeURIComponent(m[1]));
    if ((m = path.match(/^\/replay\/([^/]+)$/))) {
      current = await showReplay(app, decodeURIComponent(m[1]), { me: s.userId, boards: BOARDS, gameName });
      return;
    }
    return await showLobby();
  } catch (e) {
    if (e.status === 401) { session.clear(); return route(); }
    setScreen(h('div', { class: 'panel' }, h('p', {}, e.message || String(e)), h('a', { href: '#/' }, '로비로')));
  }
}

// ---- login -------------------------------------------------------------------------

function showLogin() {
  const input = h('input', { id: 'name', placeholder: '이름 (1~20자)', maxlength: 20, autocomplete: 'nickname' });
  const go = async (ev) => {
    ev.preventDefault();
    try {
      const r = await api('POST', '/api/session', { name: input.value.trim() });
      session.set({ userId: r.userId, token: r.token, name: r.name || input.value.trim() });
      route();
    } catch (e) { toast(e.message); }
  };
  setScreen(h('form', { class: 'panel', onsubmit: go },
    h('h2', {}, '어서 오세요!'),
    h('p', { class: 'muted' }, '할리갈리와 바퀴벌레 포커를 함께 해요. 이름을 정하면 바로 시작할 수 있어요.'),
    h('div', { class: 'row' }, input, h('button', { id: 'login', type: 'submit' }, '시작하기'))));
  input.focus();
}

// ---- lobby -------------------------------------------------------------------------

function optionsForm(game) {
  const selects = {};
  const rows = game.options.map((o) => {
    const sel = h('select', { name: o.key, 'data-key': o.key },
      o.choices.map((c) => h('option', {
        value: JSON.stringify(c.value),
        selected: JSON.stringify(c.value) === JSON.stringify(o.default),
      }, c.value === null && !c.label ? '없음' : c.label)));
    selects[o.key] = sel;
    return h('label', { class: 'opt' }, h('span', {}, o.title), sel);
  });
  const values = () => Object.fromEntries(Object.entries(selects).map(([k, s]) => [k, JSON.parse(s.value)]));
  return { node: h('div', { class: 'opts' }, rows), values };
}

async function showLobby() {
  const s = session.get();
  const gameSel = h('select', { id: 'game' }, catalog.map((g) => h('option', { value: g.id }, `${g.nameKo} (${g.minPlayers}~${g.maxPlayers}명)`)));
  const optsBox = h('div', {});
  let form = null;
  const pick = () => {
    const g = catalog.find((x) => x.id === gameSel.value);
    form = optionsForm(g);
    optsBox.replaceChildren(form.node);
  };
  gameSel.addEventListener('change', pick);
  pick();
  const create = async () => {
    try {
      const r = await api('POST', '/api/rooms', { game: gameSel.value, options: form.values() });
      location.hash = `#/room/${r.roomId}`;
    } catch (e) { toast(e.message); }
  };
  const open = h('ul', { class: 'list', id: 'open-rooms' });
  const playing = h('ul', { class: 'list', id: 'playing-rooms' });
  const mine = h('ul', { class: 'list', id: 'my-games' });
  setScreen(
    h('div', { class: 'panel' }, h('h2', {}, '방 만들기'),
      h('label', { class: 'opt' }, h('span', {}, '게임'), gameSel), optsBox,
      h('button', { id: 'create', onclick: create, style: 'width:100%;margin-top:.5rem' }, '방 만들기')),
    h('div', { class: 'panel' }, h('h2', {}, '열린 방'), open),
    h('div', { class: 'panel' }, h('h2', {}, '진행 중인 방 (관전)'), playing),
    h('div', { class: 'panel' }, h('h2', {}, '내 게임 기록'), mine),
  );
  const roomLine = (r, action) => {
    const host = r.seats.find((x) => x.userId === r.host)?.name || '';
    return h('li', { 'data-room': r.roomId },
      h('span', { class: 'grow' }, h('b', {}, gameName(r.game)), ' · ', nameTag(host), `님의 방 · ${r.seats.length}/${r.maxPlayers ?? '?'}명`),
      action);
  };
  const refresh = async () => {
    try {
      const [w, p, g] = await Promise.all([
        api('GET', '/api/rooms?status=waiting'), api('GET', '/api/rooms?status=playing'), api('GET', '/api/me/games?limit=10'),
      ]);
      open.replaceChildren(...(w.length ? w.map((r) => roomLine(r, h('button', {
        class: 'sec', onclick: async () => {
          try {
            if (!r.seats.some((x) => x.userId === s.userId)) await api('POST', `/api/rooms/${r.roomId}/seats`, {});
          } catch (e) { toast(e.message); }
          location.hash = `#/room/${r.roomId}`;
        },
      }, r.seats.some((x) => x.userId === s.userId) ? '들어가기' : '참가'))) : [h('li', { class: 'muted' }, '열린 방이 없어요. 새로 만들어 보세요!')]));
      playing.replaceChildren(...(p.length ? p.map((r) => roomLine(r, h('a', { href: `#/room/${r.roomId}` },
        h('button', { class: 'sec' }, r.seats.some((x) => x.userId === s.userId) ? '돌아가기' : '관전')))) : [h('li', { class: 'muted' }, '진행 중인 방이 없어요')]));
      mine.replaceChildren(...(g.length ? g.map((x) => h('li', { 'data-game-pk': x.gamePk },
        h('span', { class: 'grow' }, h('b', {}, gameName(x.game)), ' ', h('span', { class: 'muted' }, new Date(x.endedAt).toLocaleString('ko-KR')),
          h('br'), h('span', { class: 'muted' }, withNames(x.result?.summary, Object.fromEntries((x.players || []).map((id, i) => [id, x.names?.[i] || id]))))),
        h('a', { href: `#/replay/${encodeURIComponent(x.gamePk)}` }, h('button', { class: 'sec' }, '다시보기')))) : [h('li', { class: 'muted' }, '아직 끝난 게임이 없어요')]));
    } catch (e) { if (e.status === 401) route(); }
  };
  await refresh();
  lobbyTimer = setInterval(refresh, 3000);
}

// ---- room --------------------------------------------------------------------------

async function showRoom(roomId) {
  const s = session.get();
  let info;
  try {
    info = await api('GET', `/api/rooms/${roomId}`);
  } catch (e) {
    toast(e.message);
    location.hash = '#/';
    return;
  }
  const game = catalog.find((g) => g.id === info.game);
  let board = null;
  let boardNode = null;
  let result = null;
  const names = () => Object.fromEntries(info.seats.map((x) => [x.userId, x.name]));
  const seated = () => info.seats.some((x) => x.userId === s.userId);
  const head = () => h('div', { class: 'row' }, h('h2', { class: 'grow' }, gameName(info.game)),
    seated() ? null : h('span', { class: 'spectating', id: 'spectating' }, '관전 중'));

  const call = (method, path, body) => api(method, path, body).catch((e) => toast(e.message));
  const renderWaiting = () => {
    board?.destroy?.();
    board = null;
    const isHost = info.host === s.userId;
    const full = info.seats.length >= (info.maxPlayers ?? game.maxPlayers);
    const optLabels = game.options.map((o) => {
      const v = info.options?.[o.key];
      const c = o.choices.find((x) => JSON.stringify(x.value) === JSON.stringify(v));
      return h('li', {}, h('span', { class: 'grow' }, o.title), h('span', { class: 'muted' }, c ? c.label : (v === null ? '없음' : String(v ?? '기본'))));
    });
    setScreen(
      head(),
      h('div', { class: 'panel' }, h('h3', {}, `자리 (${info.seats.length}/${info.maxPlayers ?? game.maxPlayers})`),
        h('ul', { class: 'list', id: 'seats' }, info.seats.map((x) => h('li', { 'data-user': x.userId },
          h('span', { class: 'grow' }, x.bot ? '🤖 ' : '🙂 ', nameTag(x.name), x.userId === s.userId ? ' (나)' : ''),
          x.userId === info.host ? h('span', { class: 'tag' }, '방장') : null,
          x.bot ? h('span', { class: 'tag' }, '봇') : null))),
        h('div', { class: 'row', style: 'margin-top:.5rem' },
          !seated() && !full ? h('button', { id: 'sit', onclick: () => call('POST', `/api/rooms/${roomId}/seats`, {}) }, '참가') : null,
          isHost && !full ? h('button', { id: 'add-bot', class: 'sec', onclick: () => call('POST', `/api/rooms/${roomId}/seats`, { bot: true }) }, '🤖 봇 추가') : null,
          isHost ? h('button', { id: 'start', disabled: info.seats.length < (info.minPlayers ?? game.minPlayers),
            onclick: () => call('POST', `/api/rooms/${roomId}/start`) }, '시작') : h('span', { class: 'muted' }, '방장이 시작하기를 기다리는 중…'),
          seated() ? h('button', { id: 'leave', class: 'ghost', onclick: async () => {
            await call('DELETE', `/api/rooms/${roomId}/seats/me`);
            location.hash = '#/';
          } }, '나가기') : null)),
      h('div', { class: 'panel' }, h('h3', {}, '옵션'), h('ul', { class: 'list' }, optLabels)),
      h('p', { class: 'muted' }, '친구에게 이 주소를 보내면 함께할 수 있어요: ', h('code', {}, location.href)),
    );
  };

  const ensureBoard = () => {
    if (board) return;
    boardNode = h('div', { id: 'board', 'data-game': info.game });
    setScreen(head(), boardNode);
    const mod = BOARDS[info.game];
    if (!mod) { boardNode.append(h('p', {}, '이 게임은 아직 화면이 없어요')); board = { update() {} }; return; }
    board = mod.mount(boardNode, {
      me: s.userId,
      names: names(),
      act: seated() ? (a) => sock.act(roomId, a) : null,
    });
  };

  const renderResult = () => {
    board?.destroy?.();
    board = null;
    const r = result.result;
    const nm = names();
    const ranking = (r.ranking || []).map((ids, i) => h('li', {},
      h('span', { class: 'rank' }, `${i + 1}위`),
      h('span', { class: 'grow' }, ids.map((id) => nameOf(nm, id) + (id === s.userId ? ' (나)' : '')).join(', ')),
      r.scores ? h('span', { class: 'tag' }, ids.map((id) => `${r.scores[id] ?? 0}점`).join(', ')) : null));
    const details = r.details && Array.isArray(r.details.ranking)
      ? h('ul', { class: 'list muted' }, r.details.ranking.map((x) => h('li', {}, `${nameOf(nm, x.id)}: ${x.cards}장 · 정답 ${x.correct} · 오답 ${x.wrong}`)))
      : null;
    setScreen(head(), h('div', { class: 'panel', id: 'result' },
      h('h2', {}, '🏁 게임 끝!'),
      h('p', { class: 'result-summary', id: 'summary' }, withNames(r.summary, nm)),
      h('ol', { class: 'list result-rank', id: 'ranking' }, ranking), details,
      h('div', { class: 'row', style: 'margin-top:.75rem' },
        seated() ? h('a', { href: `#/replay/${encodeURIComponent(result.gamePk)}` }, h('button', { id: 'to-replay' }, '▶ 다시보기')) : null,
        h('a', { href: '#/' }, h('button', { class: 'sec', id: 'to-lobby' }, '로비로')))));
  };

  current = {
    room: roomId,
    onMsg(msg) {
      if (msg.room !== roomId) return;
      if (msg.t === 'room') {
        info = { ...info, ...msg.info };
        if (info.status === 'waiting') renderWaiting();
        else if (board) board.names?.(names());
      } else if (msg.t === 'sync' || msg.t === 'update') {
        const v = msg.view;
        if (v && v.roomId && Array.isArray(v.seats)) { info = { ...info, ...v }; renderWaiting(); return; }
        if (result) return;
        current.view = v;
        clock.seen(v?.now);
        ensureBoard();
        board.update(v, msg.events || [], msg.t);
      } else if (msg.t === 'result') {
        result = msg;
        current.result = msg;
        renderResult();
      } else if (msg.t === 'reject') {
        board?.reject?.(msg);
        if (msg.code !== 'late') toast(msg.reason);
      } else if (msg.t === 'ack') {
        board?.ack?.(msg);
      }
    },
    destroy() {
      sock.unsub(roomId);
      board?.destroy?.();
    },
  };
  setScreen(head(), h('p', { class: 'muted' }, '방에 들어가는 중…'));
  sock.sub(roomId);
}

// ---- boot --------------------------------------------------------------------------

const muteBtn = document.getElementById('mute');
const showMute = () => { muteBtn.textContent = sound.muted ? '🔇' : '🔊'; };
muteBtn.addEventListener('click', () => { sound.muted = !sound.muted; showMute(); });
showMute();
window.addEventListener('hashchange', route);
route();
