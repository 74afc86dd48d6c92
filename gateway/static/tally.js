// Tally, the example game: a counter everyone can bump.

import { h, nameOf } from './ui.js';

export function mount(root, ctx) {
  let names = ctx.names;
  const count = h('div', { class: 'tally-count', id: 'count' }, '0');
  const info = h('p', { class: 'muted', id: 'tally-info', style: 'text-align:center' });
  const bump = h('button', { class: 'tally-bump', id: 'bump', disabled: !ctx.act, onclick: () => ctx.act?.({ type: 'bump' }) }, '+1 누르기');
  root.append(h('div', { class: 'panel' }, count, info, bump));
  return {
    update(v) {
      count.textContent = String(v.count);
      info.textContent = `${v.target ? `목표 ${v.target}` : '목표 없음'} · 마지막: ${v.last ? nameOf(names, v.last) : '아직 없음'}`;
    },
    names(n) { names = n; },
    destroy() {},
  };
}
