// Cockroach Poker board (spec §9): opponents with hand counts and front badges, the card
// in flight with its claim, my hand grouped by kind, the offer flow (card → target →
// claim → 확인) and the holder's choices. Every deadline shows as a countdown (mine and
// the others'), and a move the server made for someone whose time ran out says so.
// Read-only (no controls) in replays and for spectators.

import { h, nameOf, clock, motion, avatar, fly, cardArt } from './ui.js';

export const KINDS = {
  cockroach: { emoji: '🪳', ko: '바퀴벌레' },
  bat: { emoji: '🦇', ko: '박쥐' },
  fly: { emoji: '🪰', ko: '파리' },
  toad: { emoji: '🐸', ko: '두꺼비' },
  // The rat ships as a drawing (issue #59): without a colour emoji font 🐭 drew as an
  // outline that read as a different animal.
  rat: { emoji: '🐭', ko: '쥐', svg: '<circle cx="6" cy="6.5" r="3.6" fill="#b0a8a0"/><circle cx="18" cy="6.5" r="3.6" fill="#b0a8a0"/><circle cx="6" cy="6.5" r="2" fill="#f2b8c6"/><circle cx="18" cy="6.5" r="2" fill="#f2b8c6"/><ellipse cx="12" cy="14" rx="7.5" ry="7" fill="#cbc4bc"/><circle cx="9.2" cy="12.6" r="1.1" fill="#222"/><circle cx="14.8" cy="12.6" r="1.1" fill="#222"/><circle cx="12" cy="16.4" r="1.3" fill="#e5668a"/><path d="M3.5 15.5l5 .3M3.8 18.2l4.8-1.2M20.5 15.5l-5 .3M20.2 18.2l-4.8-1.2" stroke="#6b6b6b" stroke-width=".6"/>' },
  scorpion: { emoji: '🦂', ko: '전갈' },
  spider: { emoji: '🕷️', ko: '거미' },
  stinkbug: { emoji: '🪲', ko: '노린재' },
};
/** A kind's picture: the shipped drawing where there is one, else its emoji. */
export function kindIcon(k) {
  const art = KINDS[k]?.svg;
  if (!art) return KINDS[k]?.emoji || k;
  const el = h('span', { class: 'kind-art', 'data-art': k, role: 'img', 'aria-label': KINDS[k].ko });
  el.innerHTML = `<svg viewBox="0 0 24 24" aria-hidden="true">${art}</svg>`;
  return el;
}
const kindLabel = (k) => [kindIcon(k), ` ${KINDS[k]?.ko || k}`];
/** Seconds at or under which a countdown turns red. */
const HURRY_S = 5;

function badges(front, loseCount) {
  return h('div', { class: 'badges' }, Object.entries(front || {}).filter(([, n]) => n > 0).map(([k, n]) =>
    h('span', {
      class: `badge ${n >= loseCount - 1 ? 'danger' : n >= Math.max(2, loseCount - 2) ? 'warn' : ''}`,
      title: n >= loseCount - 1 ? `${loseCount}장 모이면 져요!` : '',
      'data-kind': k,
    }, kindIcon(k), ` ${n}`)));
}

/** Whose move the game waits for (null once it is over). */
export function waitingFor(v) {
  if (!v || v.loser) return null;
  return v.holder || v.starter;
}

export function mount(root, ctx) {
  let names = ctx.names;
  let view = null;
  const readOnly = !ctx.act;
  // The offer / pass flow: chosen card kind, target and claim.
  let pick = { kind: null, to: null, claim: null };
  let roundKey = '';
  // The last move the server made for someone whose time ran out: {player, text, at}.
  let auto = null;
  const who = (id) => (id === ctx.me ? '나' : `${nameOf(names, id)}님`);
  const subj = (id) => (id === ctx.me ? '내가' : `${nameOf(names, id)}님이`);
  const poss = (id) => (id === ctx.me ? '내' : `${nameOf(names, id)}님`);
  // Where a player sits on this board: their box, or my hand when it is me.
  const seatOf = (id) => root.querySelector(`.cp-opp[data-player="${CSS.escape(id)}"]`)
    || (id === ctx.me ? root.querySelector('#hand') : null);
  const frontOf = (id) => root.querySelector(`.cp-opp[data-player="${CSS.escape(id)}"] .badges`)
    || (id === ctx.me ? root.querySelector('#my-front .badges') : null) || seatOf(id);

  // Countdowns: every element with data-deadline shows the seconds left, once a
  // quarter second (no re-render needed).
  const tickClocks = () => {
    const now = clock.now();
    for (const el of root.querySelectorAll('[data-deadline]')) {
      const left = Math.max(0, Math.ceil((Number(el.dataset.deadline) - now) / 1000));
      el.textContent = `${el.dataset.prefix || ''}${left}초`;
      el.classList.toggle('hurry', left <= HURRY_S);
    }
  };
  const clockTimer = setInterval(tickClocks, 250);
  const countdown = (deadline, prefix, attrs = {}) => h('span', {
    class: `cp-clock ${attrs.class || ''}`, id: attrs.id, 'data-deadline': deadline, 'data-prefix': prefix, role: 'timer',
  });

  const render = () => {
    const v = view;
    if (!v) return;
    const me = ctx.me;
    const spectator = !v.hand;
    const mine = !readOnly && !spectator;
    const iStart = mine && !v.holder && v.starter === me && !v.loser;
    const iHold = mine && v.holder === me && !v.loser;
    const passing = iHold && v.peeked;
    const choosingTarget = (iStart && pick.kind) || passing;
    const targetOk = (id) => (iStart ? id !== me : passing ? v.passTargets.includes(id) : false);
    const waiting = waitingFor(v);
    const deadline = waiting && v.deadline && !ctx.replay ? v.deadline : null;

    // Read-only (replays, spectators): plain boxes, not buttons that do nothing.
    const tag = readOnly ? 'div' : 'button';
    const opps = v.order.filter((id) => id !== me || spectator || readOnly).map((id) => h(tag, {
      class: `cp-opp ${v.holder === id ? 'holder' : ''} ${pick.to === id ? 'target' : ''} ${choosingTarget && targetOk(id) ? 'can-take' : ''} ${waiting === id ? 'waiting' : ''}`,
      'data-player': id,
      disabled: !readOnly && choosingTarget && !targetOk(id),
      onclick: () => { if (choosingTarget && targetOk(id)) { pick.to = id; render(); } },
    },
    h('div', { class: 'name' }, avatar(id, names[id]), nameOf(names, id), v.starter === id && !v.holder ? ' ✋' : '', v.holder === id ? [' ', cardArt('holding')] : '', v.loser === id ? ' 😵' : ''),
    h('div', { class: 'muted' }, `손패 ${v.handCounts[id]}장`, waiting === id && deadline ? countdown(deadline, ' · ⏱ ', { class: 'opp-clock' }) : null),
    badges(v.fronts[id], v.loseCount)));

    // The middle: whose move it is (with its countdown), the card in flight, the claim
    // bubble, the last reveal, and a move the server made for someone.
    const center = h('div', { class: 'cp-center', id: 'cp-center' });
    if (waiting) {
      const doing = v.holder ? '어떻게 할지 고르는 중' : '건넬 카드를 고르는 중';
      center.append(h('div', { class: `cp-turn ${waiting === me ? 'mine' : ''}`, id: 'cp-turn' },
        waiting === me && !readOnly ? '내 차례예요' : `${subj(waiting)} ${doing}…`,
        deadline ? countdown(deadline, ' · ⏱ ', { id: 'cp-timer' }) : null));
    }
    if (v.holder && v.claim) {
      const from = v.lastPasser || v.starter;
      center.append(
        v.card ? h('div', { class: 'cp-card face', id: 'cp-card', title: KINDS[v.card.kind]?.ko }, kindIcon(v.card.kind)) : h('div', { class: 'cp-card', id: 'cp-card' }, '?'),
        h('div', { class: 'cp-bubble', id: 'claim' }, `${who(from)} → ${who(v.holder)}: "이건 ${KINDS[v.claim]?.ko || v.claim}야!"`));
      if (v.claims && v.claims.length > 1) center.append(h('div', { class: 'muted' }, v.claims.map((c) => `${nameOf(names, c.from)}: ${KINDS[c.claim]?.ko}`).join(' → ')));
    }
    if (v.lastReveal) {
      const r = v.lastReveal;
      // Once a new card is in flight, the reveal is the last round's: dimmed and labelled,
      // so it cannot be read as the outcome of the card now on offer (issue #59).
      const past = !!v.holder && !v.loser;
      const byServer = auto && auto.player === r.caller && auto.kind === 'call' && auto.card === r.card;
      center.append(h('div', { class: `cp-reveal ${r.correct ? 'ok' : 'bad'} ${past ? 'past' : ''}`, id: 'reveal' },
        past ? '지난 판: ' : '',
        `${who(r.caller)}: "${r.call === 'true' ? '진짜!' : '거짓말!'}"${byServer ? ' (시간 초과로 자동)' : ''} → `, kindLabel(r.kind), ` (주장: ${KINDS[r.claim]?.ko}) · `,
        h('b', {}, r.correct ? '맞혔어요!' : '틀렸어요!'), ` ${poss(r.takenBy)} 앞으로`));
    }
    if (auto && clock.now() - auto.at < 8000) {
      center.append(h('div', { class: 'cp-auto', id: 'cp-auto', role: 'status' }, `⏰ ${auto.text}`));
    }
    if (v.loser) center.append(h('div', { class: 'cp-reveal bad' }, `${subj(v.loser)} 졌어요`));

    // My controls.
    const controls = h('div', { class: 'panel', id: 'cp-controls' });
    const claimButtons = () => h('div', { class: 'cp-claims', id: 'claims' }, Object.keys(KINDS).map((k) => h('button', {
      class: `cp-kind ${pick.claim === k ? 'sel' : ''}`, 'data-claim': k, onclick: () => { pick.claim = k; render(); },
    }, h('span', { class: 'emo' }, kindIcon(k)), KINDS[k].ko)));
    if (iStart) {
      controls.append(h('div', { class: 'cp-step' }, !pick.kind ? '① 건넬 카드를 고르세요' : !pick.to ? '② 받을 사람을 고르세요 (파란 테두리)' : '③ 뭐라고 말할까요?'));
      if (pick.kind && pick.to) {
        controls.append(claimButtons(), h('button', {
          id: 'confirm', style: 'width:100%;margin-top:.5rem', disabled: !pick.claim,
          onclick: () => {
            const card = v.hand.find((c) => c.kind === pick.kind);
            if (card) ctx.act({ type: 'offer', cardId: card.id, to: pick.to, claim: pick.claim });
            pick = { kind: null, to: null, claim: null };
          },
        }, pick.claim ? `확인: ${nameOf(names, pick.to)}님에게 "이건 ${KINDS[pick.claim].ko}야!"` : '확인'));
      }
    } else if (iHold && !v.peeked) {
      const noPass = v.passTargets.length === 0;
      controls.append(h('div', { class: 'cp-step' }, `"이건 ${KINDS[v.claim]?.ko}야!" — 어떻게 할까요?`),
        h('div', { class: 'cp-actions' },
          h('button', { class: 'true', id: 'call-true', onclick: () => ctx.act({ type: 'call', call: 'true' }) }, '진짜!'),
          h('button', { class: 'false', id: 'call-false', onclick: () => ctx.act({ type: 'call', call: 'false' }) }, '거짓말!'),
          h('button', { class: 'peek', id: 'peek', disabled: noPass, onclick: () => ctx.act({ type: 'peek' }) }, '몰래 보고 넘기기'),
          noPass ? h('div', { class: 'cp-help', id: 'peek-reason', style: 'grid-column:1 / span 2' }, '넘길 사람이 없어요 (모두 이 카드를 봤어요)') : null));
    } else if (passing) {
      controls.append(h('div', { class: 'cp-step' }, !pick.to ? '카드를 봤어요. 넘길 사람을 고르세요 (파란 테두리)' : '뭐라고 말할까요?'));
      if (pick.to) {
        controls.append(claimButtons(), h('button', {
          id: 'confirm', style: 'width:100%;margin-top:.5rem', disabled: !pick.claim,
          onclick: () => { ctx.act({ type: 'pass', to: pick.to, claim: pick.claim }); pick = { kind: null, to: null, claim: null }; },
        }, pick.claim ? `확인: ${nameOf(names, pick.to)}님에게 넘기며 "이건 ${KINDS[pick.claim].ko}야!"` : '확인'));
      }
    } else if (!v.loser) {
      controls.append(h('div', { class: 'muted' }, readOnly
        ? (ctx.replay ? '다시보기예요. 아래 버튼으로 장면을 넘겨 보세요.' : '관전 중이에요. 손패는 보이지 않아요.')
        : `${poss(waiting)} 차례를 기다리는 중…`));
    }

    const hand = !v.hand ? null : (() => {
      const groups = {};
      for (const c of v.hand) groups[c.kind] = (groups[c.kind] || 0) + 1;
      return h('div', { class: 'cp-hand', id: 'hand' }, Object.keys(KINDS).filter((k) => groups[k]).map((k) => h(tag, {
        class: `cp-kind ${pick.kind === k ? 'sel' : ''}`, 'data-kind': k, disabled: !readOnly && !iStart,
        onclick: () => { if (iStart) { pick.kind = k; pick.to = null; render(); } },
      }, h('span', { class: 'emo' }, kindIcon(k)), KINDS[k].ko, h('span', { class: 'n' }, String(groups[k])))));
    })();

    // Not replaceChildren(…, null): it would write the text "null" (a spectator has no hand).
    root.replaceChildren(...[
      h('div', { class: 'cp-opps', id: 'opponents' }, opps),
      center,
      controls,
      hand ? h('div', { class: 'panel' }, h('h3', {}, `내 손패 ${v.hand.length}장`, ' ', h('span', { class: 'muted', id: 'my-front' }, badges(v.fronts[me], v.loseCount))), hand) : null,
      h('p', { class: 'cp-help' }, `같은 벌레 ${v.loseCount}장 모이면 져요.`,
        v.loseCount - 2 >= 2 ? ` 노란 배지는 ${v.loseCount - 2}장째,` : '', ' 빨간 배지는 한 장만 더 오면 져요.')].filter(Boolean));
    tickClocks();
  };

  return {
    update(v, events) {
      const key = `${v.starter}|${v.holder}|${v.peeked}|${(v.claims || []).length}|${v.lastReveal?.card ?? ''}`;
      if (key !== roundKey) { roundKey = key; pick = { kind: null, to: null, claim: null }; }
      const timedOut = (events || []).find((e) => e.type === 'timedOut');
      if (timedOut) {
        const p = timedOut.player;
        const did = (events || []).find((e) => e.type !== 'timedOut');
        const kind = did?.type === 'revealed' ? 'call' : did?.type === 'offered' ? 'offer' : did?.type === 'passed' ? 'pass' : 'move';
        const what = { call: '대신 "진짜/거짓말"을 골랐어요', offer: '대신 카드를 건넸어요', pass: '대신 카드를 넘겼어요', move: '대신 골랐어요' }[kind];
        auto = { player: p, kind, card: did?.card?.id ?? v.lastReveal?.card, at: clock.now(), text: `시간이 지나서 서버가 ${who(p)} ${what}` };
      }
      view = v;
      render();
      // The reveal turns the card over; a passed or offered card slides in.
      if ((events || []).some((e) => e.type === 'revealed')) motion(root.querySelector('#reveal'), [{ transform: 'rotateX(90deg)', opacity: 0 }, { transform: 'none', opacity: 1 }], 350);
      if ((events || []).some((e) => e.type === 'offered' || e.type === 'passed')) motion(root.querySelector('#claim'), [{ transform: 'translateY(-12px) scale(.9)', opacity: 0 }, { transform: 'none', opacity: 1 }], 300);
      // Card flights (spec §9): a handed card goes from the giver's seat to the
      // receiver's, face down; a revealed card goes face up to the front row of whoever
      // takes it. (None in replays: scenes come without events.)
      for (const e of events || []) {
        if (e.type === 'offered' || e.type === 'passed') {
          fly('cp-card', h('div', { class: 'cp-card' }, '?'), seatOf(e.from), seatOf(e.to));
        } else if (e.type === 'revealed' && e.card) {
          fly('cp-reveal', h('div', { class: 'cp-card face' }, kindIcon(e.card.kind)), root.querySelector('#reveal'), frontOf(e.takenBy), 650);
        }
      }
    },
    names(n) { names = n; render(); },
    destroy() { clearInterval(clockTimer); },
  };
}
