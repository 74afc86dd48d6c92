// Cockroach Poker board (spec §9): opponents with hand counts and front badges, the card
// in flight with its claim, my hand grouped by kind, the offer flow (card → target →
// claim → 확인) and the holder's choices.

import { h, nameOf } from './ui.js';

export const KINDS = {
  cockroach: { emoji: '🪳', ko: '바퀴벌레' },
  bat: { emoji: '🦇', ko: '박쥐' },
  fly: { emoji: '🪰', ko: '파리' },
  toad: { emoji: '🐸', ko: '두꺼비' },
  rat: { emoji: '🐭', ko: '쥐' },
  scorpion: { emoji: '🦂', ko: '전갈' },
  spider: { emoji: '🕷️', ko: '거미' },
  stinkbug: { emoji: '🪲', ko: '노린재' },
};
const kindLabel = (k) => `${KINDS[k]?.emoji || ''} ${KINDS[k]?.ko || k}`;

function badges(front, loseCount) {
  return h('div', { class: 'badges' }, Object.entries(front || {}).filter(([, n]) => n > 0).map(([k, n]) =>
    h('span', {
      class: `badge ${n >= loseCount - 1 ? 'danger' : n >= 3 ? 'warn' : ''}`,
      title: n >= loseCount - 1 ? `${loseCount}장 모이면 져요!` : '',
      'data-kind': k,
    }, `${KINDS[k]?.emoji || k} ${n}`)));
}

export function mount(root, ctx) {
  let names = ctx.names;
  let view = null;
  // The offer / pass flow: chosen card kind, target and claim.
  let pick = { kind: null, to: null, claim: null };
  let roundKey = '';

  const render = () => {
    const v = view;
    if (!v) return;
    const me = ctx.me;
    const spectator = !v.hand;
    const iStart = !spectator && !v.holder && v.starter === me && !v.loser;
    const iHold = !spectator && v.holder === me && !v.loser;
    const passing = iHold && v.peeked;
    const choosingTarget = (iStart && pick.kind) || passing;
    const targetOk = (id) => (iStart ? id !== me : passing ? v.passTargets.includes(id) : false);

    const opps = v.order.filter((id) => id !== me || spectator).map((id) => h('button', {
      class: `cp-opp ${v.holder === id ? 'holder' : ''} ${pick.to === id ? 'target' : ''}`,
      'data-player': id,
      disabled: choosingTarget ? !targetOk(id) : false,
      onclick: () => { if (choosingTarget && targetOk(id)) { pick.to = id; render(); } },
    },
    h('div', { class: 'name' }, nameOf(names, id), v.starter === id && !v.holder ? ' ✋' : '', v.holder === id ? ' 🃏' : '', v.loser === id ? ' 😵' : ''),
    h('div', { class: 'muted' }, `손패 ${v.handCounts[id]}장`),
    badges(v.fronts[id], v.loseCount)));

    // The middle: the card in flight, the claim bubble, the last reveal.
    const center = h('div', { class: 'cp-center', id: 'cp-center' });
    if (v.holder && v.claim) {
      const from = v.lastPasser || v.starter;
      center.append(
        v.card ? h('div', { class: 'cp-card face', id: 'cp-card', title: KINDS[v.card.kind]?.ko }, KINDS[v.card.kind]?.emoji || '?') : h('div', { class: 'cp-card' }, '?'),
        h('div', { class: 'cp-bubble', id: 'claim' }, `${nameOf(names, from)} → ${nameOf(names, v.holder)}: "이건 ${KINDS[v.claim]?.ko || v.claim}야!"`));
      if (v.claims && v.claims.length > 1) center.append(h('div', { class: 'muted' }, v.claims.map((c) => `${nameOf(names, c.from)}: ${KINDS[c.claim]?.ko}`).join(' → ')));
    } else if (!v.loser) {
      center.append(h('div', { class: 'muted' }, `${nameOf(names, v.starter)}님이 카드를 고르는 중…`));
    }
    if (v.lastReveal) {
      const r = v.lastReveal;
      center.append(h('div', { class: `cp-reveal ${r.correct ? 'ok' : 'bad'}`, id: 'reveal' },
        `${nameOf(names, r.caller)}: "${r.call === 'true' ? '진짜!' : '거짓말!'}" → ${kindLabel(r.kind)} (주장: ${KINDS[r.claim]?.ko}) · `,
        r.correct ? '맞혔어요!' : '틀렸어요!', ` ${nameOf(names, r.takenBy)}님 앞으로`));
    }
    if (v.loser) center.append(h('div', { class: 'cp-reveal bad' }, `${nameOf(names, v.loser)}님이 졌어요`));

    // My controls.
    const controls = h('div', { class: 'panel', id: 'cp-controls' });
    const claimButtons = () => h('div', { class: 'cp-claims', id: 'claims' }, Object.keys(KINDS).map((k) => h('button', {
      class: `cp-kind ${pick.claim === k ? 'sel' : ''}`, 'data-claim': k, onclick: () => { pick.claim = k; render(); },
    }, h('span', { class: 'emo' }, KINDS[k].emoji), KINDS[k].ko)));
    if (iStart) {
      controls.append(h('div', { class: 'cp-step' }, !pick.kind ? '① 건넬 카드를 고르세요' : !pick.to ? '② 받을 사람을 고르세요' : '③ 뭐라고 말할까요?'));
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
      controls.append(h('div', { class: 'cp-step' }, !pick.to ? '카드를 봤어요. 넘길 사람을 고르세요' : '뭐라고 말할까요?'));
      if (pick.to) {
        controls.append(claimButtons(), h('button', {
          id: 'confirm', style: 'width:100%;margin-top:.5rem', disabled: !pick.claim,
          onclick: () => { ctx.act({ type: 'pass', to: pick.to, claim: pick.claim }); pick = { kind: null, to: null, claim: null }; },
        }, '확인'));
      }
    } else if (!spectator && !v.loser) {
      controls.append(h('div', { class: 'muted' }, v.holder ? `${nameOf(names, v.holder)}님이 고민 중…` : '기다리는 중…'));
    }

    const hand = spectator ? h('p', { class: 'muted' }, ctx.replay ? '' : '관전 중이에요. 손패는 보이지 않아요.') : (() => {
      const groups = {};
      for (const c of v.hand) groups[c.kind] = (groups[c.kind] || 0) + 1;
      return h('div', { class: 'cp-hand', id: 'hand' }, Object.keys(KINDS).filter((k) => groups[k]).map((k) => h('button', {
        class: `cp-kind ${pick.kind === k ? 'sel' : ''}`, 'data-kind': k, disabled: !iStart,
        onclick: () => { if (iStart) { pick.kind = k; pick.to = null; render(); } },
      }, h('span', { class: 'emo' }, KINDS[k].emoji), KINDS[k].ko, h('span', { class: 'n' }, String(groups[k])))));
    })();

    root.replaceChildren(
      h('div', { class: 'cp-opps', id: 'opponents' }, opps),
      center,
      controls,
      spectator ? hand : h('div', { class: 'panel' }, h('h3', {}, `내 손패 ${v.hand.length}장`, ' ', h('span', { class: 'muted' }, badges(v.fronts[me], v.loseCount))), hand),
      h('p', { class: 'cp-help' }, `같은 벌레 ${v.loseCount}장 모이면 져요. 노란 배지는 3장째, 빨간 배지는 한 장만 더 오면 져요.`));
  };

  return {
    update(v) {
      const key = `${v.starter}|${v.holder}|${v.peeked}|${(v.claims || []).length}|${v.lastReveal?.card ?? ''}`;
      if (key !== roundKey) { roundKey = key; pick = { kind: null, to: null, claim: null }; }
      view = v;
      render();
    },
    names(n) { names = n; render(); },
    destroy() {},
  };
}
