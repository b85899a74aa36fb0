// Audit search: a resource name gives its history (every event, oldest
// first); anything else, or anything when asked, is an actor (an API
// key's name, "hosts/h1", "controllers/…"), searched for in the events
// stored over a chosen window (a bounded events:watch, filtered here).

import { get, streamEvents } from '../api.js';
import { fmtTime, h, replace, resourceLink, table } from '../dom.js';
import { dataLine } from '../words.js';

/** The windows an actor search can cover, in minutes. */
const windows = [['15', '15 minutes'], ['60', 'hour'], ['360', '6 hours'], ['1440', '24 hours']];

/** Matches shown at most for an actor search. */
const maxMatches = 2000;

/**
 * The resource a query names, or "" when it names none: a full name
 * ("fleets/demo/gameServers/gs-1", "hosts/h1", "gameSessions/gsess-1"), or
 * tetherctl's short forms: "demo/gs-1" for a game server and
 * "gsess-1/ps-1" for a player session.
 * @param {string} q
 */
export function resourceOf(q) {
  if (/^(fleets|hosts|gameSessions)\/[a-z0-9-]+(\/(gameServers|playerSessions)\/[a-z0-9-]+)?$/.test(q)) return q;
  const short = /^([a-z0-9-]+)\/([a-z0-9-]+)$/.exec(q);
  if (!short) return '';
  return short[1].startsWith('gsess-') ? `gameSessions/${short[1]}/playerSessions/${short[2]}` : `fleets/${short[1]}/gameServers/${short[2]}`;
}

/** @param {import('../app.js').PageContext} ctx */
export async function render({ main, query, signal }) {
  document.title = 'Audit · Tether';
  const q = (query.get('q') ?? '').trim();
  const win = query.get('window') ?? '60';
  // A resource's history, unless asked for an actor ("hosts/h1" is both).
  const name = query.get('by') === 'actor' ? '' : resourceOf(q);
  const by = /** @type {HTMLSelectElement} */ (h('select', { id: 'audit-by', name: 'by' },
    h('option', { value: 'resource', selected: !!name || !q }, 'History of a resource'),
    h('option', { value: 'actor', selected: !name && !!q }, 'Events by an actor')));
  const input = /** @type {HTMLInputElement} */ (h('input', {
    id: 'audit-q', name: 'q', value: q, size: 40, spellcheck: 'false',
    placeholder: 'fleets/demo/gameServers/gs-…, demo/gs-…, hosts/h1, or an actor',
  }));
  const windowSelect = /** @type {HTMLSelectElement} */ (h('select', { id: 'audit-window', name: 'window' },
    windows.map(([v, label]) => h('option', { value: v, selected: v === win }, `last ${label}`))));
  const out = h('div', { 'aria-live': 'polite' });
  replace(main,
    h('h1', {}, 'Audit'),
    h('form', {
      class: 'toolbar',
      onsubmit: (/** @type {Event} */ e) => {
        e.preventDefault();
        location.hash = `#/audit?q=${encodeURIComponent(input.value.trim())}&by=${by.value}&window=${windowSelect.value}`;
      },
    },
    h('label', { for: 'audit-by' }, 'Search '), by, ' ',
    h('label', { for: 'audit-q', class: 'visually-hidden' }, 'Resource or actor'), input, ' ',
    h('label', { for: 'audit-window' }, 'Actor window '), windowSelect, ' ',
    h('button', { type: 'submit' }, 'Search')),
    out);
  if (!q) {
    input.focus();
    replace(out, h('p', { class: 'hint' }, 'A resource name (fleets/demo, demo/gs-…, hosts/h1, gameSessions/…) shows its whole history; ' +
      'an actor (an API key\'s name such as dev-operator, hosts/h1, controllers/…) shows what it did over the chosen window.'));
    return;
  }
  if (name) await history(name, out, signal);
  else await byActor(q, Number(win), out, signal);
}

/** @type {{title: string, cell: (e: any) => any, class?: string}[]} */
const eventColumns = [
  { title: '#', class: 'num', cell: (e) => e.sequence },
  { title: 'Time', cell: (e) => fmtTime(e.time) },
  { title: 'Event', cell: (e) => e.type },
  { title: 'Actor', cell: (e) => e.actor || e.producer },
  { title: 'Data', class: 'data mono', cell: (e) => dataLine(e.data) },
];

/**
 * @param {string} name
 * @param {HTMLElement} out
 * @param {AbortSignal} signal
 */
async function history(name, out, signal) {
  /** @type {any[]} */
  const shown = [];
  let pageToken = '';
  const rows = h('div', {});
  const more = /** @type {HTMLButtonElement} */ (h('button', { type: 'button', hidden: true }, 'More'));
  replace(out, h('h2', {}, 'History of ', resourceLink(name)), rows, more);
  const load = async () => {
    const page = await get(`${name}/events`, { pageSize: 1000, pageToken }, signal);
    shown.push(...(page.events ?? []));
    pageToken = page.nextPageToken ?? '';
    more.hidden = !pageToken;
    replace(rows, table({ rows: shown, columns: eventColumns, empty: 'No events: no such resource, or nothing happened to it yet.' }));
  };
  more.addEventListener('click', () => load().catch(() => {}));
  await load();
}

/**
 * @param {string} actor
 * @param {number} minutes
 * @param {HTMLElement} out
 * @param {AbortSignal} signal
 */
async function byActor(actor, minutes, out, signal) {
  const end = new Date();
  const start = new Date(end.getTime() - minutes * 60_000);
  const progress = h('p', { class: 'hint' }, 'Searching…');
  const rows = h('div', {});
  replace(out, h('h2', {}, `Events by “${actor}”`), progress, rows);
  const needle = actor.toLowerCase();
  /** @type {any[]} */
  const found = [];
  let scanned = 0;
  let timer = 0;
  const show = () => {
    progress.textContent = found.length >= maxMatches
      ? `The first ${maxMatches} events from ${fmtTime(start)} on (${scanned} read); narrow the window for fewer.`
      : `${found.length} of ${scanned} events from ${fmtTime(start)} to ${fmtTime(end)}.`;
    replace(rows, table({ rows: found, columns: [...eventColumns.slice(0, 3), { title: 'Resource', cell: (e) => resourceLink(e.aggregate) }, ...eventColumns.slice(3)] }));
  };
  const enough = new AbortController(); // ends the read at maxMatches
  signal.addEventListener('abort', () => enough.abort(), { once: true });
  try {
    await streamEvents({ startTime: start.toISOString(), endTime: end.toISOString() }, enough.signal, (e) => {
      scanned++;
      if (found.length < maxMatches && `${e.actor} ${e.producer}`.toLowerCase().includes(needle)) found.push(e);
      if (found.length >= maxMatches) enough.abort();
      if (!timer) timer = window.setTimeout(() => { timer = 0; show(); }, 250); // not every event: a window holds many
    });
  } catch (e) {
    if (signal.aborted || !enough.signal.aborted) throw e;
  } finally {
    clearTimeout(timer);
  }
  show();
}
