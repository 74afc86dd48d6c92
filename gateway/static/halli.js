// Halli Galli board (spec §9): the bell in the middle is the only ring target; face-up
// tops in a circle around it; my deck and the flip button below. Space = ring, Enter = flip.

import { h, sound, clock, nameOf } from './ui.js';

export const FRUITS = {
  strawberry: { emoji: '🍓', ko: '딸기' },
  banana: { emoji: '🍌', ko: '바나나' },
  lime: { emoji: '🍈', ko: '라임' },
  plum: { emoji: '🫐', ko: '자두' },
};

/** Fruit totals over the face-up tops: public information (kid mode bars). */
export function fruitTotals(view) {
  const totals = { strawberry: 0, banana: 0, lime: 0, plum: 0 };
  for (const p of Object.values(view.players || {})) {
    if (p.top && p.active !== false) totals[p.top.fruit] = (totals[p.top.fruit] || 0) + p.top.count;
  }
  return totals;
}

function cardFace(top) {
  if (!top) return [];
  const f = FRUITS[top.fruit] || { emoji: '?' };
  return Array.from({ length: top.count }, () => h('span', {}, f.emoji));
}

export function mount(root, ctx) {
  let names = ctx.names;
  let view = null;
  let raf = 0;
  let feedbackTimer = 0;
  let lastBellAt = null;
  const seats = new Map();
  const timeLeft = h('span', { id: 'hg-time' });
  const rank = h('span', { class: 'muted', id: 'hg-rank' });
  const feedback = h('div', { class: 'hg-feedback', id: 'hg-feedback' });
  const lockText = h('span', { class: 'lock' });
  const bell = h('button', { class: 'hg-bell', id: 'bell', 'aria-label': '종 치기 (스페이스)' }, '🔔 땡!', lockText);
  const table = h('div', { class: 'hg-table', id: 'hg-table' }, bell);
  const deck = h('span', { class: 'deck', id: 'my-deck' });
  const flipBtn = h('button', { class: 'hg-flip', id: 'flip', disabled: true }, '뒤집기');
  const kid = h('div', { class: 'panel', id: 'hg-kid', style: 'display:none' });
  const notice = h('div', { class: 'muted', id: 'hg-notice' });
  root.append(...[
    h('div', { class: 'hg-top' }, h('span', {}, '⏱ ', timeLeft), rank),
    feedback, table,
    ctx.act ? h('div', { class: 'hg-bottom' }, deck, flipBtn) : ctx.replay ? null : h('p', { class: 'muted' }, '관전 중이에요. 종과 뒤집기는 참가자만 할 수 있어요.'),
    notice, kid,
    h('p', { class: 'muted' }, '스페이스 = 종, 엔터 = 뒤집기. 같은 과일이 정확히 5개면 종을 쳐요!')].filter(Boolean));

  const show = (text, cls, ms = 1200) => {
    feedback.textContent = text;
    feedback.className = `hg-feedback ${cls}`;
    clearTimeout(feedbackTimer);
    feedbackTimer = setTimeout(() => { feedback.textContent = ''; }, ms);
  };

  const ring = () => {
    if (!ctx.act || !view || bell.disabled) return;
    ctx.act({ type: 'ring', version: view.tableVersion });
  };
  const flip = () => {
    if (!ctx.act || !view || !view.canFlip) return;
    flipBtn.disabled = true;
    ctx.act({ type: 'flip' });
  };
  bell.addEventListener('pointerdown', (ev) => { ev.preventDefault(); ring(); });
  bell.addEventListener('keydown', (ev) => { if (ev.key === ' ' || ev.key === 'Enter') ev.preventDefault(); });
  flipBtn.addEventListener('click', flip);
  const onKey = (ev) => {
    if (ev.target instanceof HTMLInputElement || ev.target instanceof HTMLSelectElement) return;
    if (ev.code === 'Space' || ev.key === ' ') { ev.preventDefault(); if (!ev.repeat) ring(); }
    else if (ev.key === 'Enter') { ev.preventDefault(); flip(); }
  };
  window.addEventListener('keydown', onKey);

  function seatNode(id) {
    let s = seats.get(id);
    if (s) return s;
    const pile = h('div', { class: 'pile' });
    const gauge = h('div', { class: 'gauge', style: 'display:none' });
    pile.append(gauge);
    const name = h('div', { class: 'name' });
    const stats = h('div', { class: 'stats' });
    const el = h('div', { class: 'hg-seat', 'data-player': id }, name, pile, stats);
    table.append(el);
    s = { el, pile, gauge, name, stats };
    seats.set(id, s);
    return s;
  }

  function layout(order) {
    // Me at the bottom, the others clockwise around the bell.
    const meAt = Math.max(0, order.indexOf(ctx.me));
    order.forEach((id, i) => {
      const k = (i - meAt + order.length) % order.length;
      const angle = Math.PI / 2 + (2 * Math.PI * k) / order.length;
      const s = seatNode(id);
      s.el.style.left = `${50 + 38 * Math.cos(angle)}%`;
      s.el.style.top = `${50 + 37 * Math.sin(angle)}%`;
    });
  }

  function tick() {
    raf = requestAnimationFrame(tick);
    if (!view) return;
    const now = clock.now();
    if (view.endsAt) {
      const left = Math.max(0, view.endsAt - now);
      timeLeft.textContent = `${Math.floor(left / 60000)}:${String(Math.floor(left / 1000) % 60).padStart(2, '0')}`;
    } else timeLeft.textContent = view.phase === 'countdown' ? `시작까지 ${Math.max(0, Math.ceil((view.countdownEndsAt - now) / 1000))}초` : '제한 없음';
    for (const [id, s] of seats) {
      const turn = view.turn === id && view.phase === 'playing' && view.turnDeadline;
      s.gauge.style.display = turn ? '' : 'none';
      if (turn) s.gauge.style.setProperty('--p', String(Math.max(0, Math.min(1, (view.turnDeadline - now) / view.flipMs))));
    }
    const mine = view.players?.[ctx.me];
    if (mine && mine.lockedUntil && mine.lockedUntil > now) {
      bell.disabled = true;
      lockText.textContent = `🔒 ${((mine.lockedUntil - now) / 1000).toFixed(1)}초`;
    } else {
      lockText.textContent = '';
      bell.disabled = !ctx.act || !view.canRing && !(mine && mine.active && view.phase === 'playing' && (!mine.lockedUntil || mine.lockedUntil <= now) && !(view.ringWindow?.rang || []).includes(ctx.me));
    }
  }
  raf = requestAnimationFrame(tick);

  function update(v, events) {
    view = v;
    clock.seen(v.now);
    layout(v.order);
    for (const id of v.order) {
      const p = v.players[id];
      const s = seatNode(id);
      s.name.replaceChildren(
        p.rttBand ? h('span', { class: `rtt ${p.rttBand}`, title: p.rtt != null ? `${p.rtt}ms` : '' }) : '',
        nameOf(names, id) + (id === ctx.me ? ' (나)' : ''));
      s.pile.replaceChildren(s.gauge, ...cardFace(p.top));
      s.pile.classList.toggle('empty', !p.top);
      s.stats.textContent = `덱 ${p.deck} · 공개 ${p.faceUpCount}${p.locked ? ' · 🔒' : ''}`;
      s.el.classList.toggle('turn', v.turn === id && v.phase === 'playing');
      s.el.classList.toggle('out', !p.active);
      s.el.classList.toggle('me', id === ctx.me);
    }
    const standing = [...v.order].sort((a, b) => (v.players[b].deck + v.players[b].faceUpCount) - (v.players[a].deck + v.players[a].faceUpCount));
    rank.textContent = `1위 ${nameOf(names, standing[0])} · 종 밑 ${v.pot}장`;
    const mine = v.players[ctx.me];
    deck.textContent = mine ? `내 덱 ${mine.deck}장` : '';
    flipBtn.disabled = !v.canFlip;
    flipBtn.textContent = v.flipReserved && v.turn === ctx.me ? '뒤집기 예약됨' : v.turn === ctx.me ? '뒤집기 (내 차례!)' : '뒤집기';
    notice.textContent = [v.slowNotice, v.phase === 'countdown' ? '곧 시작해요!' : '', v.phase === 'ended' ? '게임이 끝났어요' : ''].filter(Boolean).join(' · ');
    if (v.options?.kidMode) {
      const totals = fruitTotals(v);
      kid.style.display = '';
      kid.replaceChildren(h('div', { class: 'cp-step' }, '5개가 되면 종을 쳐요'),
        h('div', { class: 'hg-kid' }, Object.entries(FRUITS).flatMap(([k, f]) => [
          h('span', {}, `${f.emoji} ${f.ko}`),
          h('span', { class: 'bar' }, h('i', { class: totals[k] === 5 ? 'five' : '', style: `width:${Math.min(100, totals[k] * 10)}%` })),
          h('b', { 'data-fruit': k }, String(totals[k]))])));
    } else kid.style.display = 'none';
    for (const e of events || []) {
      if (e.type === 'bell') {
        const who = e.player === ctx.me ? '내가' : `${nameOf(names, e.player)}님이`;
        if (e.correct) { show(`땡! ${who} 맞혔어요 🎉`, 'correct'); sound.play('ding'); }
        else { show(`삐! ${who} 틀렸어요`, 'wrong'); sound.play('buzz'); if (e.player === ctx.me) sound.vibrate(200); }
        lastBellAt = v.lastBell?.at ?? lastBellAt;
      } else if (e.type === 'flipped') sound.play('tick');
    }
    // A sync (reload) shows the last bell once if it is fresh.
    if (!events?.length && v.lastBell && v.lastBell.at !== lastBellAt && v.now - v.lastBell.at < 1500) {
      lastBellAt = v.lastBell.at;
      show(v.lastBell.correct ? '땡!' : '삐!', v.lastBell.correct ? 'correct' : 'wrong');
    }
  }

  return {
    update,
    names(n) { names = n; },
    reject(msg) { if (msg.code === 'late') show('늦었어요', 'late', 900); },
    destroy() { cancelAnimationFrame(raf); window.removeEventListener('keydown', onKey); clearTimeout(feedbackTimer); },
  };
}
