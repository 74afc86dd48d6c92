// The roomd reference client: lobby, rooms, boards, results and replays. Hash routes:
// #/ (lobby), #/room/{roomId}, #/replay/{gamePk}.

import { h, toast, sound, clock, nameOf, nameTag, withNames, cancelFlights } from './ui.js';
import { session, api, Socket } from './net.js';
import * as halli from './halli.js';
import * as cockroach from './cockroach.js';
import * as tally from './tally.js';
import { showReplay } from './replay.js';
import { chatOn, chatBar, showBubble } from './chat.js';

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

// Parts a screen may leave out are null: replaceChildren would print them as "null".
function setScreen(...nodes) { app.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined)); }

/** "로비로" as a button (a bare link read as plain text). */
export function lobbyButton(id = 'to-lobby') {
  return h('a', { href: '#/', class: 'btn-link' }, h('button', { class: 'sec', id, tabindex: -1 }, '← 로비로'));
}

/** Games a player would choose; `tally` is the developers' example (`?dev` lists it). */
const listed = (g) => g.id !== 'tally' || new URLSearchParams(location.search).has('dev');

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
  toast.clear();
  cancelFlights();
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
    setScreen(h('div', { class: 'panel' }, h('p', {}, e.message || String(e)), lobbyButton()));
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
  // An option with one choice is not a choice: it is not offered (its default applies).
  const rows = game.options.filter((o) => o.choices.length > 1).map((o) => {
    const sel = h('select', { name: o.key, 'data-key': o.key },
      o.choices.map((c) => h('option', {
        value: JSON.stringify(c.value),
        selected: JSON.stringify(c.value) === JSON.stringify(o.default),
      }, c.value === null && !c.label ? '없음' : c.label)));
    selects[o.key] = sel;
    return h('label', { class: 'opt' }, h('span', {}, o.title), sel);
  });
  const values = () => Object.fromEntries(Object.entries(selects).map(([k, s]) => [k, JSON.parse(s.value)]));
  // Collapsed: most rooms are made with the defaults, and the room lists come next.
  const changed = () => Object.values(selects).filter((s) => !s.querySelector('option[selected]')?.selected).length;
  const sumText = h('span', { class: 'muted' });
  const showSum = () => { const n = changed(); sumText.textContent = n ? ` · ${n}개 바꿈` : ' · 기본값'; };
  for (const sel of Object.values(selects)) sel.addEventListener('change', showSum);
  showSum();
  const node = rows.length
    ? h('details', { class: 'opts', id: 'opts' }, h('summary', {}, `옵션 ${rows.length}개`, sumText), rows)
    : h('div', { class: 'opts' });
  return { node, values };
}

async function showLobby() {
  const s = session.get();
  const gameSel = h('select', { id: 'game' }, catalog.filter(listed).map((g) => h('option', { value: g.id }, `${g.nameKo} (${g.minPlayers}~${g.maxPlayers}명)`)));
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
  let knockedOut = '';
  // Set when an operator closed the room ({"t":"error","code":"room_closed"}): the room
  // is gone, so nothing here may be pressed any more.
  let closed = null;
  const names = () => Object.fromEntries(info.seats.map((x) => [x.userId, x.name]));
  const seated = () => info.seats.some((x) => x.userId === s.userId);
  const head = () => h('div', { class: 'row' }, h('h2', { class: 'grow' }, gameName(info.game)),
    seated() ? null : h('span', { class: 'spectating', id: 'spectating' }, '관전 중'));

  const call = (method, path, body) => api(method, path, body).catch((e) => toast(e.message));
  // Quick chat: buttons for seated players of a room that has it (bubbles for everyone).
  const chat = () => (seated() && chatOn(game, info) ? chatBar(game.chatPhrases, (key) => sock.chat(roomId, key)) : null);
  const renderWaiting = () => {
    board?.destroy?.();
    board = null;
    const isHost = info.host === s.userId;
    const full = info.seats.length >= (info.maxPlayers ?? game.maxPlayers);
    const optLabels = game.options.filter((o) => o.choices.length > 1).map((o) => {
      const v = info.options?.[o.key];
      const c = o.choices.find((x) => JSON.stringify(x.value) === JSON.stringify(v));
      return h('li', {}, h('span', { class: 'grow' }, o.title), h('span', { class: 'muted' }, c ? c.label : (v === null ? '없음' : String(v ?? '기본'))));
    });
    const need = info.minPlayers ?? game.minPlayers;
    const short = Math.max(0, need - info.seats.length);
    setScreen(
      head(),
      closed ? h('div', { class: 'panel room-closed', id: 'room-closed', role: 'status' },
        h('b', {}, '이 방은 닫혔어요. '), closed, h('div', { style: 'margin-top:.5rem' }, lobbyButton('closed-to-lobby'))) : null,
      h('div', { class: 'panel' }, h('h3', {}, `자리 (${info.seats.length}/${info.maxPlayers ?? game.maxPlayers})`),
        h('ul', { class: 'list', id: 'seats' }, info.seats.map((x) => h('li', { 'data-user': x.userId },
          h('span', { class: 'grow' }, x.bot ? '🤖 ' : '🙂 ', nameTag(x.name), x.userId === s.userId ? ' (나)' : ''),
          x.userId === info.host ? h('span', { class: 'tag' }, '방장') : null,
          x.bot ? h('span', { class: 'tag' }, '봇') : null,
          isHost && x.bot && !closed ? h('button', {
            class: 'ghost remove-bot', title: '이 봇 빼기', 'aria-label': `${x.name} 빼기`,
            onclick: () => call('DELETE', `/api/rooms/${roomId}/seats/${encodeURIComponent(x.userId)}`),
          }, '✕') : null))),
        h('div', { class: 'row', style: 'margin-top:.5rem' },
          !seated() && !full && !closed ? h('button', { id: 'sit', onclick: () => call('POST', `/api/rooms/${roomId}/seats`, {}) }, '참가') : null,
          isHost && !full && !closed ? h('button', { id: 'add-bot', class: 'sec', onclick: () => call('POST', `/api/rooms/${roomId}/seats`, { bot: true }) }, '🤖 봇 추가') : null,
          isHost ? h('button', { id: 'start', disabled: short > 0 || !!closed,
            onclick: () => call('POST', `/api/rooms/${roomId}/start`) }, '시작') : h('span', { class: 'muted' }, '방장이 시작하기를 기다리는 중…'),
          seated() && !closed ? h('button', { id: 'leave', class: 'ghost', onclick: async () => {
            await call('DELETE', `/api/rooms/${roomId}/seats/me`);
            location.hash = '#/';
          } }, '나가기') : null),
        isHost && short > 0 && !closed ? h('p', { class: 'muted', id: 'start-hint' }, `${need}명부터 시작할 수 있어요. ${short}명 더 모이거나 봇을 추가하세요.`) : null),
      closed ? null : chat(),
      h('div', { class: 'panel' }, h('h3', {}, '옵션'), h('ul', { class: 'list' }, optLabels)),
      closed ? null : h('p', { class: 'muted' }, '친구에게 이 주소를 보내면 함께할 수 있어요: ', h('code', {}, location.href)),
    );
  };

  const ensureBoard = () => {
    if (board) return;
    boardNode = h('div', { id: 'board', 'data-game': info.game });
    setScreen(head(), boardNode, chat());
    const mod = BOARDS[info.game];
    if (!mod) { boardNode.append(h('p', {}, '이 게임은 아직 화면이 없어요')); board = { update() {} }; return; }
    board = mod.mount(boardNode, {
      me: s.userId,
      names: names(),
      act: seated() ? (a) => sock.act(roomId, a) : null,
      onOut: (text) => { knockedOut = text; },
    });
  };

  const renderResult = () => {
    board?.destroy?.();
    board = null;
    const r = result.result;
    const nm = names();
    const cp = info.game === 'cockroach-poker';
    const places = r.ranking || [];
    // Cockroach Poker has one loser and everyone else wins: two groups, whatever order
    // the winners are listed in. Elsewhere tied players share a place (1, 1, 3).
    const groups = cp && places.length > 1 ? [places.slice(0, -1).flat(), places[places.length - 1]] : places;
    let rank = 1;
    const rows = groups.map((ids, i) => {
      const label = cp ? (i === groups.length - 1 ? '패배' : '승리') : `${ids.length > 1 ? '공동 ' : ''}${rank}위`;
      const row = h('li', { 'data-rank': cp ? (i === groups.length - 1 ? 2 : 1) : rank, class: ids.includes(s.userId) ? 'me' : '' },
        h('span', { class: `rank ${cp && i === groups.length - 1 ? 'lost' : ''}` }, label),
        h('span', { class: 'grow' }, ids.map((id) => nameOf(nm, id) + (id === s.userId ? ' (나)' : '')).join(', ')),
        r.scores ? h('span', { class: 'tag' }, [...new Set(ids.map((id) => `${r.scores[id] ?? 0}점`))].join(', ')) : null);
      rank += ids.length;
      return row;
    });
    const pointsHelp = r.scores ? ({
      'halli-galli': '점수: 1위 3점 · 2위 2점 · 3위 1점 · 그 아래 0점 (같은 순위는 같은 점수)',
      'cockroach-poker': '점수: 이긴 사람 1점 · 진 사람 0점',
    }[info.game] || '') : '';
    const details = r.details && Array.isArray(r.details.ranking)
      ? h('ul', { class: 'list muted', id: 'result-details' }, r.details.ranking.map((x) => h('li', {}, `${nameOf(nm, x.id)}: 카드 ${x.cards}장 · 맞힌 종 ${x.correct}번 · 틀린 종 ${x.wrong}번`)))
      : null;
    // A message for me when I was knocked out (Halli Galli) or lost (Cockroach Poker).
    const lostText = cp && r.details?.loser === s.userId ? '내가 졌어요. 다음엔 꼭 이겨요!'
      : !cp && knockedOut && seated() ? knockedOut : '';
    const again = seated() && info.host === s.userId ? h('button', { id: 'rematch', class: 'sec', onclick: rematch }, '🔁 같은 옵션으로 다시') : null;
    setScreen(head(), h('div', { class: 'panel', id: 'result' },
      h('h2', {}, '🏁 게임 끝!'),
      h('p', { class: 'result-summary', id: 'summary' }, withNames(r.summary, nm)),
      lostText ? h('p', { class: 'knocked-out', id: 'knocked-out', role: 'status' }, lostText) : null,
      h('ul', { class: 'list result-rank', id: 'ranking' }, rows),
      pointsHelp ? h('p', { class: 'muted', id: 'points-help' }, pointsHelp) : null,
      details,
      h('div', { class: 'row', style: 'margin-top:.75rem' },
        seated() ? h('a', { href: `#/replay/${encodeURIComponent(result.gamePk)}` }, h('button', { id: 'to-replay', tabindex: -1 }, '▶ 다시보기')) : null,
        again,
        lobbyButton()),
      seated() ? null : h('p', { class: 'muted', id: 'replay-note' }, replayNote[info.game] || replayNote.other)));
  };

  // Why a spectator gets no replay button. Halli Galli has no hands to hide: the
  // spectator watched it all already, and replays are kept for the players' own games.
  const replayNote = {
    'cockroach-poker': '다시보기는 게임에 참가한 사람만 볼 수 있어요 (손패가 보이니까요).',
    'halli-galli': '다시보기는 게임에 참가한 사람만 볼 수 있어요. 관전한 게임은 내 기록에 남지 않아요.',
    other: '다시보기는 게임에 참가한 사람만 볼 수 있어요.',
  };

  // A new room with this game's options and as many bots; the others can join from the lobby.
  const rematch = async () => {
    try {
      const r = await api('POST', '/api/rooms', { game: info.game, options: info.options || {} });
      for (const x of info.seats.filter((x) => x.bot)) await api('POST', `/api/rooms/${r.roomId}/seats`, { bot: true });
      location.hash = `#/room/${r.roomId}`;
    } catch (e) { toast(e.message); }
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
      } else if (msg.t === 'chat') {
        showBubble(msg, { phrases: game?.chatPhrases, names: names(), me: s.userId });
      } else if (msg.t === 'error' && msg.code === 'room_closed' && !result) {
        // A running game ends with a result frame; a waiting room only gets this error.
        closed = msg.reason || '운영자가 방을 닫았어요';
        if (!board) renderWaiting();
      }
    },
    destroy() {
      sock.unsub(roomId);
      board?.destroy?.();
    },
  };
  setScreen(head(), h('p', { class: 'muted' }, '방에 들어가는 중…'));
  // The info just read names the room's owner (`nodeUrl`): the socket goes straight there.
  sock.sub(roomId, info);
}

// ---- boot --------------------------------------------------------------------------

const muteBtn = document.getElementById('mute');
const showMute = () => { muteBtn.textContent = sound.muted ? '🔇' : '🔊'; };
muteBtn.addEventListener('click', () => { sound.muted = !sound.muted; showMute(); });
showMute();
window.addEventListener('hashchange', route);
route();
