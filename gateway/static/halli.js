// Halli Galli board (spec §9): the bell in the middle is the only ring target; face-up
// tops in a circle around it; my deck and the flip button below. Space = ring, Enter = flip.

import { h, sound, clock, nameOf, motion, reducedMotion, avatar, fly } from './ui.js';

// The card art ships with the client (issue #24): emoji differ by platform (🫐 draws
// several berries, which makes "exactly five" ambiguous; there is no lime emoji) and
// are missing without an emoji font. One small SVG per fruit, one drawing per fruit
// on the card, so a count reads the same everywhere.
const SVG = {
  strawberry: '<path d="M10 18c-4-2.5-7-6-7-9.5C3 6 5 5 10 5s7 1 7 3.5C17 12 14 15.5 10 18z" fill="#e0302f"/><path d="M6 5.5 10 3l4 2.5-4 1.5z" fill="#2e9d48"/><circle cx="8" cy="10" r=".7" fill="#ffd"/><circle cx="12" cy="10" r=".7" fill="#ffd"/><circle cx="10" cy="13" r=".7" fill="#ffd"/>',
  banana: '<path d="M3 6c1 7 7 11 14 9l1-2c-6 1.5-11-2-12.5-8z" fill="#f5c518" stroke="#b08a00" stroke-width=".8"/><path d="M3 6 2.5 4.5" stroke="#6b4b2a" stroke-width="1.4"/>',
  lime: '<circle cx="10" cy="10" r="7.5" fill="#6cbf2e"/><circle cx="10" cy="10" r="5.5" fill="#c8ef8a"/><path d="M10 4.5v11M4.5 10h11M6 6l8 8M14 6l-8 8" stroke="#6cbf2e" stroke-width=".8"/>',
  plum: '<circle cx="10" cy="11" r="7" fill="#7b3f9e"/><ellipse cx="7.5" cy="8.5" rx="1.6" ry="1" fill="#b98bd6"/><path d="M10 4c0-1.5 1-2.5 3-2.5-.3 1.8-1.4 2.6-3 2.5z" fill="#2e9d48"/>',
};
export const FRUITS = {
  strawberry: { ko: '딸기' },
  banana: { ko: '바나나' },
  lime: { ko: '라임' },
  plum: { ko: '자두' },
};

/** One fruit drawing (static SVG markup, no user data in it). */
export function fruitIcon(fruit) {
  const el = h('span', { class: `fruit f-${fruit}`, 'aria-hidden': 'true' });
  el.innerHTML = `<svg viewBox="0 0 20 20" width="18" height="18">${SVG[fruit] || ''}</svg>`;
  return el;
}

/** Fruit totals over the face-up tops: public information (kid mode bars). */
export function fruitTotals(view) {
  const totals = { strawberry: 0, banana: 0, lime: 0, plum: 0 };
  for (const p of Object.values(view.players || {})) {
    if (p.top && p.active !== false) totals[p.top.fruit] = (totals[p.top.fruit] || 0) + p.top.count;
  }
  return totals;
}

/** Whether a view's table shows exactly five of one fruit (what a ring is judged on). */
export function atFive(view) {
  return Object.values(fruitTotals(view)).includes(5);
}

// "The table I was looking at" (issue #24). A ring quotes a tableVersion; the server
// judges it against that table: the current version right or wrong, an older one late
// ("늦었어요", no penalty). A person needs 200-600 ms from seeing a table to pressing the
// bell, so a press that lands just after the table changed was aimed at the table before.
// Quoting the new table then turns a correct but slower ring into a wrong one (cards lost
// to a bot that reacted 200 ms sooner). So: a ring on a table at five quotes that table
// (a quick correct ring stays correct); otherwise, if a table at five was on screen less
// than REACTION_MS ago, the ring quotes that one, and the server finds it late: as at a
// real table, your hand lands on the winner's hand, you pay nothing and win nothing. A
// ring with no five on screen in that time stays a wrong ring. Nothing is gained by it:
// an old version can never win cards.
export const REACTION_MS = 600;

/** Why a player went out (the `eliminated` event's reason). */
export const OUT_REASONS = {
  emptyDeck: '차례가 왔는데 덱에 카드가 없었어요',
  couldNotPay: '틀린 종의 벌칙 카드를 다 낼 수 없었어요',
  duelWrongRing: '1대1에서 종을 잘못 쳤어요',
  strikeOut: '종을 3번 잘못 쳐서 몰수패했어요',
};

/** The knock-out message for me (`reason` null when only the view says I am out). */
export function outText(reason) {
  return `탈락했어요. ${OUT_REASONS[reason] || '카드를 모두 잃었어요'}`;
}

function cardFace(top) {
  if (!top) return [];
  return Array.from({ length: top.count }, () => fruitIcon(top.fruit));
}

export function mount(root, ctx) {
  let names = ctx.names;
  let view = null;
  let raf = 0;
  let feedbackTimer = 0;
  let lastBellAt = null;
  let wasOut = false;
  // Tables recently on screen: {version, five, until} (until = when it was replaced).
  let shown = [];
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
  const outBox = h('div', { class: 'hg-out', id: 'hg-out', role: 'status', hidden: true });
  root.append(...[
    h('div', { class: 'hg-top' }, h('span', {}, '⏱ ', timeLeft), rank),
    feedback, outBox, table,
    ctx.act ? h('div', { class: 'hg-bottom' }, deck, flipBtn) : ctx.replay ? null : h('p', { class: 'muted' }, '관전 중이에요. 종과 뒤집기는 참가자만 할 수 있어요.'),
    notice, kid,
    ctx.act ? h('p', { class: 'muted hg-rule' }, '같은 과일이 정확히 5개면 종을 쳐요!',
      matchMedia('(hover: hover) and (pointer: fine)').matches ? h('span', { id: 'hg-keys' }, ' 스페이스 = 종, 엔터 = 뒤집기') : null) : null].filter(Boolean));

  // Until when the message on show may not be replaced: "늦었어요" has to be read, and
  // a bot's "삐!" 0.9 s later used to wipe it (issue #59).
  let holdUntil = 0;
  const show = (text, cls, ms = 1200, hold = 0) => {
    const now = performance.now();
    if (now < holdUntil) return;
    holdUntil = now + hold;
    feedback.textContent = text;
    feedback.className = `hg-feedback ${cls}`;
    clearTimeout(feedbackTimer);
    feedbackTimer = setTimeout(() => { feedback.textContent = ''; }, ms);
  };

  /** The tableVersion a ring made now quotes (see REACTION_MS). */
  const ringVersion = () => {
    if (atFive(view)) return view.tableVersion;
    const now = performance.now();
    const recent = shown.filter((t) => t.version !== view.tableVersion && t.five && now - t.until <= REACTION_MS);
    return recent.length ? recent[recent.length - 1].version : view.tableVersion;
  };
  const ring = () => {
    if (!ctx.act || !view || bell.disabled) return;
    ctx.act({ type: 'ring', version: ringVersion() });
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

  /**
   * Seats in two rows around the bell, clockwise from me at the bottom middle: the
   * first others go from the bottom left up over the top row, the last one comes back
   * down on the bottom right. Rows, not a circle of absolute positions, so no seat can
   * cover the bell or another seat at any width (issue #24: the bell hid my name on
   * phones).
   */
  function layout(order) {
    const meAt = Math.max(0, order.indexOf(ctx.me));
    const others = order.slice(meAt + 1).concat(order.slice(0, meAt));
    const place = new Map([[order[meAt], [3, 2]]]);
    const k = others.length;
    const bottomLeft = k >= 4 ? others.slice(0, 1) : [];
    const bottomRight = k >= 5 ? others.slice(-1) : [];
    const top = others.slice(bottomLeft.length, k - bottomRight.length);
    const cols = { 1: [2], 2: [1, 3], 3: [1, 2, 3] }[top.length] || [];
    top.forEach((id, i) => place.set(id, [1, cols[i]]));
    bottomLeft.forEach((id) => place.set(id, [3, 1]));
    bottomRight.forEach((id) => place.set(id, [3, 3]));
    for (const id of order) {
      const [row, col] = place.get(id) || [1, 2];
      const s = seatNode(id);
      s.el.style.gridRow = String(row);
      s.el.style.gridColumn = String(col);
    }
  }

  function tick() {
    raf = requestAnimationFrame(tick);
    if (!view) return;
    const now = clock.now();
    if (view.phase === 'countdown') {
      timeLeft.textContent = `시작까지 ${Math.max(0, Math.ceil((view.countdownEndsAt - now) / 1000))}초`;
    } else if (view.endsAt) {
      const left = Math.max(0, view.endsAt - now);
      timeLeft.textContent = `${Math.floor(left / 60000)}:${String(Math.floor(left / 1000) % 60).padStart(2, '0')}`;
    } else timeLeft.textContent = '제한 없음';
    for (const [id, s] of seats) {
      const turn = view.turn === id && view.phase === 'playing' && view.turnDeadline;
      s.gauge.style.display = turn ? '' : 'none';
      if (turn) s.gauge.style.setProperty('--p', String(Math.max(0, Math.min(1, (view.turnDeadline - now) / view.flipMs))));
    }
    const mine = view.players?.[ctx.me];
    if (mine && mine.lockedUntil && mine.lockedUntil > now) {
      bell.disabled = true;
      lockText.textContent = `🔒 ${((mine.lockedUntil - now) / 1000).toFixed(1)}초`;
      // The lock's round timer around the bell (spec §9), emptying as the lock runs out.
      const total = view.options?.wrongRingLockoutMs || 1000;
      bell.classList.add('locked');
      bell.style.setProperty('--l', String(Math.max(0, Math.min(1, (mine.lockedUntil - now) / total))));
    } else {
      lockText.textContent = '';
      bell.classList.remove('locked');
      bell.disabled = !ctx.act || !view.canRing && !(mine && mine.active && view.phase === 'playing' && (!mine.lockedUntil || mine.lockedUntil <= now) && !(view.ringWindow?.rang || []).includes(ctx.me));
    }
  }
  raf = requestAnimationFrame(tick);

  function update(v, events) {
    if (!view || view.tableVersion !== v.tableVersion) {
      const now = performance.now();
      if (view) shown.push({ version: view.tableVersion, five: atFive(view), until: now });
      shown = shown.filter((t) => now - t.until <= REACTION_MS);
    }
    // The cards fly to the ring's winner: copies of the tops, taken before they go.
    const won = (events || []).find((e) => e.type === 'collected');
    const flying = won && view ? [...seats.entries()].filter(([id]) => view.players?.[id]?.top).map(([, st]) => {
      const r = st.pile.getBoundingClientRect();
      // Inside a seat-classed box of its own, so the pile keeps its card look.
      const copy = h('div', { class: 'hg-flying flight', 'aria-hidden': 'true', 'data-flight': 'hg-collect' }, st.pile.cloneNode(true));
      Object.assign(copy.style, { position: 'fixed', left: `${r.left}px`, top: `${r.top}px`, width: `${r.width}px`, pointerEvents: 'none', zIndex: '10' });
      copy.firstChild.style.margin = '0';
      return copy;
    }) : [];
    view = v;
    clock.seen(v.now);
    layout(v.order);
    for (const id of v.order) {
      const p = v.players[id];
      const s = seatNode(id);
      s.name.replaceChildren(
        avatar(id, names[id]),
        p.rttBand ? h('span', { class: `rtt ${p.rttBand}`, title: p.rtt != null ? `${p.rtt}ms` : '' }) : '',
        nameOf(names, id) + (id === ctx.me ? ' (나)' : ''));
      s.pile.replaceChildren(s.gauge, ...cardFace(p.top));
      s.pile.title = p.top ? `${FRUITS[p.top.fruit]?.ko || p.top.fruit} ${p.top.count}개` : '빈 자리';
      s.pile.setAttribute('aria-label', s.pile.title);
      s.pile.classList.toggle('empty', !p.top);
      s.stats.textContent = `덱 ${p.deck} · 공개 ${p.faceUpCount}${p.locked ? ' · 🔒' : ''}`;
      s.el.classList.toggle('turn', v.turn === id && v.phase === 'playing');
      s.el.classList.toggle('out', !p.active);
      s.el.classList.toggle('me', id === ctx.me);
    }
    const held = (id) => v.players[id].deck + v.players[id].faceUpCount;
    const standing = [...v.order].sort((a, b) => held(b) - held(a));
    const tied = standing.length > 1 && held(standing[0]) === held(standing[1]);
    rank.textContent = `${tied ? '선두 없음 (동점)' : `선두 ${nameOf(names, standing[0])} ${held(standing[0])}장`} · 종 밑 ${v.pot}장`;
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
          h('span', {}, fruitIcon(k), ` ${f.ko}`),
          h('span', { class: 'bar' }, h('i', { class: totals[k] === 5 ? 'five' : '', style: `width:${Math.min(100, totals[k] * 10)}%` })),
          h('b', { 'data-fruit': k }, String(totals[k]))])));
    } else kid.style.display = 'none';
    // Knocked out: say so (and why, when the event tells), once, and keep it on screen.
    const outEvent = (events || []).find((e) => e.type === 'eliminated' && e.player === ctx.me);
    if (mine && !mine.active && !wasOut && !ctx.replay) {
      wasOut = true;
      outBox.hidden = false;
      outBox.textContent = `${outText(outEvent?.reason)} 게임이 끝날 때까지 지켜볼 수 있어요.`;
      ctx.onOut?.(outText(outEvent?.reason));
    }
    const target = won && seats.get(won.player)?.pile;
    if (target && flying.length && !reducedMotion()) {
      const to = target.getBoundingClientRect();
      for (const copy of flying) {
        document.body.append(copy);
        const dx = to.left - parseFloat(copy.style.left);
        const dy = to.top - parseFloat(copy.style.top);
        const a = copy.animate([{ transform: 'none', opacity: 1 }, { transform: `translate(${dx}px, ${dy}px) scale(.6)`, opacity: 0.2 }], { duration: 450, easing: 'ease-in' });
        a.onfinish = () => copy.remove();
        a.oncancel = () => copy.remove();
      }
    }
    for (const e of events || []) {
      if (e.type === 'bell') {
        const who = e.player === ctx.me ? '내가' : `${nameOf(names, e.player)}님이`;
        if (e.correct) { show(`땡! ${who} 맞혔어요 🎉`, 'correct'); sound.play('ding'); }
        else { show(`삐! ${who} 틀렸어요`, 'wrong'); sound.play('buzz'); if (e.player === ctx.me) sound.vibrate(200); }
        lastBellAt = v.lastBell?.at ?? lastBellAt;
      } else if (e.type === 'flipped') {
        sound.play('tick');
        motion(seats.get(e.player)?.pile, [{ transform: 'rotateY(90deg)' }, { transform: 'none' }], 220);
      } else if (e.type === 'collected') {
        // The cards go to the winner: their pile swells once.
        motion(seats.get(e.player)?.pile, [{ transform: 'scale(1)' }, { transform: 'scale(1.25)', borderColor: 'var(--green)' }, { transform: 'scale(1)' }], 450);
      } else if (e.type === 'penalty') {
        // The penalty cards travel (spec §9): one face-down card from the wrong ringer's
        // pile to each player who receives one, who then bounces once on landing.
        const from = seats.get(e.player)?.pile;
        for (const to of e.to || []) {
          if (to === e.player) continue;
          const a = fly('hg-penalty', h('div', { class: 'hg-fly-card' }), from, seats.get(to)?.pile, 480);
          const land = () => motion(seats.get(to)?.pile, [{ transform: 'translateY(-6px)' }, { transform: 'none' }], 300);
          if (a) a.addEventListener('finish', land); else land();
        }
        motion(from, [{ transform: 'translateX(-4px)' }, { transform: 'translateX(4px)' }, { transform: 'none' }], 300);
      }
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
    reject(msg) {
      if (msg.code !== 'late') return;
      // Who was quicker, when the last bell was a correct one by someone else.
      const b = view?.lastBell;
      const by = b && b.correct && b.player !== ctx.me && clock.now() - b.at < 3000 ? ` · ${nameOf(names, b.player)}님이 먼저 쳤어요` : '';
      show(`늦었어요${by}`, 'late', 2000, 1500);
    },
    destroy() { cancelAnimationFrame(raf); window.removeEventListener('keydown', onKey); clearTimeout(feedbackTimer); },
  };
}
