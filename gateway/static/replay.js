// Replay viewer for my finished games: the first view plus one RFC 6902 patch per scene,
// shown on the game's own board, read-only (no action can be sent from it). ⏮ ◀
// 재생/멈춤 ▶ ⏭, a slider, ←/→/Home/End.

import { h, nameOf } from './ui.js';
import { api, replayScenes } from './net.js';

/** Which board draws a view, from its shape (replays do not name the game). */
function gameOf(view, hint) {
  if (hint) return hint;
  if (view && 'tableVersion' in view) return 'halli-galli';
  if (view && 'handCounts' in view) return 'cockroach-poker';
  return 'tally';
}

export async function showReplay(app, gamePk, { me, boards, gameName }) {
  const [rep, mine] = await Promise.all([
    api('GET', `/api/replays/${encodeURIComponent(gamePk)}`),
    api('GET', '/api/me/games?limit=100').catch(() => []),
  ]);
  const rec = mine.find((g) => g.gamePk === gamePk);
  const names = {};
  if (rec) rec.players.forEach((id, i) => { names[id] = rec.names?.[i] || id; });
  const views = replayScenes(rep);
  const total = views.length;
  const game = gameOf(rep.first, rec?.game);
  let at = 0;
  let playing = false;
  let timer = 0;

  const boardNode = h('div', { id: 'board', 'data-game': game });
  const label = h('div', { class: 'rp-label', id: 'rp-label' });
  const stepText = h('div', { class: 'rp-step', id: 'rp-step' });
  const slider = h('input', { type: 'range', class: 'rp-slider', id: 'rp-slider', min: 0, max: total - 1, value: 0, 'aria-label': '장면' });
  const playBtn = h('button', { id: 'rp-play', title: '재생/일시정지' }, '재생');
  const btn = (id, text, title, fn) => h('button', { id, title, class: 'sec', onclick: fn }, text);
  const mod = boards[game];
  const board = mod ? mod.mount(boardNode, { me, names, act: null, replay: true }) : { update() {}, destroy() {} };

  const go = (i) => {
    at = Math.max(0, Math.min(total - 1, i));
    slider.value = String(at);
    label.textContent = `${at + 1}번째 / 전체 ${total}번`;
    // steps[0] is the start; steps[i] made scene i.
    const step = rep.steps?.[at];
    const t0 = rep.steps?.[0]?.at ?? 0;
    const who = step?.actor ? nameOf(names, step.actor) : '';
    // `bot` steps are a bot's own moves. `auto` steps are the server's: a move for
    // someone whose time ran out, or the game's own clock (a Halli Galli flip, a ring
    // judged, the time limit).
    const what = !step || step.kind === 'start' ? '게임 시작'
      : step.kind === 'player' ? `${who}님의 차례`
        : step.kind === 'bot' ? `${who}님 (봇)`
          : who ? `${who}님 (시간이 지나 자동으로)` : '자동 진행';
    stepText.textContent = step ? `${what} · +${((step.at - t0) / 1000).toFixed(1)}초` : '';
    board.update(views[at], [], 'sync');
    if (at === total - 1) pause();
  };
  const pause = () => { playing = false; clearInterval(timer); playBtn.textContent = '재생'; };
  const play = () => {
    if (at === total - 1) go(0);
    playing = true;
    playBtn.textContent = '멈춤';
    timer = setInterval(() => go(at + 1), 700);
  };
  playBtn.addEventListener('click', () => (playing ? pause() : play()));
  slider.addEventListener('input', () => { pause(); go(Number(slider.value)); });
  const onKey = (ev) => {
    if (ev.target === slider) return; // the slider moves itself on arrow keys
    const to = { ArrowLeft: at - 1, ArrowRight: at + 1, Home: 0, End: total - 1 }[ev.key];
    if (to !== undefined) { ev.preventDefault(); pause(); go(to); }
  };
  window.addEventListener('keydown', onKey);

  app.replaceChildren(
    h('div', { class: 'row' }, h('h2', { class: 'grow' }, `다시보기 · ${gameName(game)}`),
      h('a', { href: '#/', class: 'btn-link' }, h('button', { class: 'sec', id: 'to-lobby', tabindex: -1 }, '← 로비로'))),
    h('div', { class: 'panel' },
      label,
      h('div', { class: 'rp-controls' },
        btn('rp-first', '⏮', '처음', () => { pause(); go(0); }),
        btn('rp-prev', '◀', '이전 장면', () => { pause(); go(at - 1); }),
        playBtn,
        btn('rp-next', '▶', '다음 장면', () => { pause(); go(at + 1); }),
        btn('rp-last', '⏭', '마지막', () => { pause(); go(total - 1); })),
      slider, stepText),
    boardNode);
  go(0);
  return { destroy() { pause(); window.removeEventListener('keydown', onKey); board.destroy?.(); } };
}
