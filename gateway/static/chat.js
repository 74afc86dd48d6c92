// Quick chat (Cockroach Poker `quickChat`): the game's fixed phrases as buttons for seated
// players, and a speech bubble by the sender's seat for everyone who watches, spectators
// too. Never free text: the server relays only the catalog's phrase keys, and the page
// shows each key's label from the catalog.

import { h, nameOf } from './ui.js';

/** The server takes one phrase per player per this long. */
export const CHAT_EVERY_MS = 2000;
/** How long a bubble stays. */
const BUBBLE_MS = 3500;
let lastSent = 0;

/** Whether a room has quick chat: its game names phrases and the room's option is on. */
export function chatOn(game, info) {
  return Boolean(game?.chatPhrases?.length) && info?.options?.quickChat !== false;
}

/** The phrase buttons; `send(key)` sends one, and every button rests for 2 s after. */
export function chatBar(phrases, send) {
  const resting = () => Date.now() - lastSent < CHAT_EVERY_MS;
  const buttons = phrases.map((p) => h('button', {
    class: 'sec chat-phrase', 'data-phrase': p.key, disabled: resting(),
    onclick: () => {
      if (resting()) return;
      lastSent = Date.now();
      send(p.key);
      for (const b of buttons) b.disabled = true;
      setTimeout(() => { for (const b of buttons) if (b.isConnected) b.disabled = false; }, CHAT_EVERY_MS);
    },
  }, p.label));
  return h('div', { class: 'chat-bar', id: 'chat-bar', role: 'group', 'aria-label': '빠른 대화' }, buttons);
}

/** The layer bubbles float in (above the board; it takes no clicks). */
function layer() {
  let el = document.getElementById('chat-layer');
  if (!el) {
    el = h('div', { id: 'chat-layer', 'aria-live': 'polite' });
    document.body.append(el);
  }
  return el;
}

/**
 * Shows `msg` (`{from, phrase}`) as a bubble by the sender's seat: an opponent's box on a
 * board (`data-player`), a seat of a waiting room (`data-user`), else (my own seat, which
 * boards draw as my hand) just above the phrase buttons or at the bottom of the screen.
 */
export function showBubble(msg, { phrases, names, me }) {
  const label = phrases?.find((p) => p.key === msg.phrase)?.label;
  if (!label) return; // not a phrase of this game: nothing to show
  const from = CSS.escape(msg.from);
  for (const old of document.querySelectorAll(`.chat-bubble[data-from="${from}"]`)) old.remove();
  const bubble = h('div', { class: 'chat-bubble', 'data-from': msg.from, role: 'status' },
    h('b', {}, msg.from === me ? '나' : nameOf(names, msg.from)), ' ', label);
  layer().append(bubble);
  const seat = msg.from === me ? null : document.querySelector(`#app [data-player="${from}"], #app [data-user="${from}"]`);
  const anchor = seat || document.getElementById('chat-bar');
  const box = bubble.getBoundingClientRect();
  if (anchor) {
    const r = anchor.getBoundingClientRect();
    const x = Math.min(Math.max(r.left + r.width / 2, box.width / 2 + 8), window.innerWidth - box.width / 2 - 8);
    bubble.style.left = `${x}px`;
    bubble.style.top = `${Math.max(r.top - 6, box.height + 8)}px`;
  } else {
    bubble.style.left = '50%';
    bubble.style.top = `${window.innerHeight - 24}px`;
  }
  setTimeout(() => bubble.remove(), BUBBLE_MS);
}
