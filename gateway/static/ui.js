// Small DOM and display helpers shared by the screens.

/** h('div', {class: 'x', onclick: f}, child, …): an element. Strings become text. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'style') el.style.cssText = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

let toastTimer = 0;
let toastAt = 0;
export function toast(text) {
  const el = document.getElementById('toast');
  if (!el) return;
  toastAt = Date.now();
  el.textContent = text;
  el.classList.add('show');
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.remove('show'), 2200);
}
/**
 * Hides a toast when a new page opens: the last page's message is stale there. One
 * shown just now (the reason for this very navigation, e.g. "없는 방이에요") stays.
 */
toast.clear = () => {
  if (Date.now() - toastAt < 400) return;
  clearTimeout(toastTimer);
  document.getElementById('toast')?.classList.remove('show');
};

// Sound: a few WebAudio beeps; muted state survives reloads.
let audio = null;
export const sound = {
  get muted() { return localStorage.getItem('roomd.muted') === '1'; },
  set muted(m) { localStorage.setItem('roomd.muted', m ? '1' : '0'); },
  play(kind) {
    if (this.muted) return;
    try {
      audio = audio || new AudioContext();
      const o = audio.createOscillator();
      const g = audio.createGain();
      const [freq, ms] = { ding: [1320, 180], buzz: [160, 300], tick: [660, 60] }[kind] || [440, 100];
      o.type = kind === 'buzz' ? 'square' : 'sine';
      o.frequency.value = freq;
      g.gain.value = 0.08;
      o.connect(g).connect(audio.destination);
      o.start();
      o.stop(audio.currentTime + ms / 1000);
    } catch { /* no audio here */ }
  },
  vibrate(ms) { if (!this.muted && navigator.vibrate) navigator.vibrate(ms); },
};

/**
 * A player's name for text: wrapped in Unicode isolates (FSI … PDI) so a right-to-left
 * name cannot reorder the text around it.
 */
export function nameOf(names, id) {
  return isolate(names[id] || (id ? id.slice(0, 8) : '?'));
}

const isolate = (name) => `\u2068${name}\u2069`;

/** A name as an element: <bdi dir="auto">, cut with an ellipsis where space runs out. */
export function nameTag(name) {
  return h('bdi', { class: 'nm', dir: 'auto', title: name }, name);
}

/** Server clock: views carry `now`; keep the offset to our clock. */
export const clock = {
  offset: 0,
  seen(serverNow) { if (typeof serverNow === 'number') this.offset = serverNow - Date.now(); },
  now() { return Date.now() + this.offset; },
};

/** Result summaries name players by id (the engine has no names): show names instead. */
export function withNames(text, names) {
  let out = text || '';
  for (const [id, name] of Object.entries(names)) out = out.split(id).join(isolate(name));
  return out;
}

const reduced = matchMedia('(prefers-reduced-motion: reduce)');
/** Whether the player asked for less motion. */
export const reducedMotion = () => reduced.matches;
/** A short Web Animation, skipped when the player asked for less motion. */
export function motion(el, frames, ms) {
  if (!el || reduced.matches || !el.animate) return;
  el.animate(frames, { duration: ms, easing: 'ease-out' });
}

/**
 * A card flight (spec §9 of both games): `card` flies from the centre of `from` to the
 * centre of `to` (elements on the page) and is removed when it lands. `kind` names the
 * flight on the element (`data-flight`), so a test can tell the flights apart. Nothing
 * flies when the player asked for less motion (the board already shows where the card
 * is), or when an end is not on the page. Returns the Web Animation, or null.
 */
export function fly(kind, card, from, to, ms = 520) {
  if (reduced.matches || !from || !to || !card.animate) return null;
  const a = from.getBoundingClientRect();
  const b = to.getBoundingClientRect();
  if (!a.width || !b.width) return null;
  card.classList.add('flight');
  card.dataset.flight = kind;
  card.setAttribute('aria-hidden', 'true');
  document.body.append(card);
  const w = card.offsetWidth;
  const ht = card.offsetHeight;
  const x0 = a.left + a.width / 2 - w / 2;
  const y0 = a.top + a.height / 2 - ht / 2;
  const dx = b.left + b.width / 2 - w / 2 - x0;
  const dy = b.top + b.height / 2 - ht / 2 - y0;
  card.style.left = `${x0}px`;
  card.style.top = `${y0}px`;
  const anim = card.animate([
    { transform: 'translate(0, 0) scale(1)', opacity: 1 },
    { transform: `translate(${dx * 0.5}px, ${dy * 0.5 - 24}px) scale(1.08)`, opacity: 1, offset: 0.5 },
    { transform: `translate(${dx}px, ${dy}px) scale(.7)`, opacity: 0.6 },
  ], { duration: ms, easing: 'ease-in-out' });
  const done = () => card.remove();
  anim.onfinish = done;
  anim.oncancel = done;
  return anim;
}

/** Ends every card flight at once (a new page opens: they belong to the last one). */
export function cancelFlights() {
  for (const el of document.querySelectorAll('.flight')) {
    for (const a of el.getAnimations()) a.cancel();
    el.remove();
  }
}

/**
 * The playing-card mark (the logo, the card a player holds), drawn here rather than as
 * 🃏: without a colour emoji font that emoji is an outline (issue #59).
 */
export const CARD_SVG = '<svg class="card-art" viewBox="0 0 20 26" aria-hidden="true"><rect x="1.5" y="1.5" width="17" height="23" rx="2.6" fill="#fff" stroke="#d8342c" stroke-width="1.6"/><rect x="4" y="4" width="12" height="18" rx="1.4" fill="#fff3e3"/><path d="M10 7.2l1.7 3.5 3.8.5-2.8 2.6.7 3.8-3.4-1.8-3.4 1.8.7-3.8-2.8-2.6 3.8-.5z" fill="#ff8c1a"/></svg>';

/** CARD_SVG as an element; `label` is read out instead of the picture. */
export function cardArt(label) {
  const el = h('span', { class: 'card-mark', role: 'img', 'aria-label': label, title: label });
  el.innerHTML = CARD_SVG;
  return el;
}

const AVATAR_COLOURS = ['#ff8c1a', '#2f6fd6', '#2e9d48', '#c2417a', '#7b3f9e', '#00897b', '#8d6e63', '#d8342c'];
/** A round avatar: the name's first letter on a colour picked from the player's id. */
export function avatar(id, name) {
  let hash = 0;
  for (const c of String(id)) hash = (hash * 31 + c.codePointAt(0)) >>> 0;
  const first = [...String(name || '?').trim()][0] || '?';
  return h('span', { class: 'avatar', 'aria-hidden': 'true', style: `background:${AVATAR_COLOURS[hash % AVATAR_COLOURS.length]}` }, first);
}
