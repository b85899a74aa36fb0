// Game sessions (matches), newest first, and one game session with its
// player sessions: seats, reconnects and why each ended.

import { get } from '../api.js';
import { ago, badge, enumWord, facts, fmtTime, h, lastId, replace, resourceLink, table } from '../dom.js';

/** @param {import('../app.js').PageContext} ctx */
export async function render(ctx) {
  return ctx.params.session ? one(ctx) : list(ctx);
}

/** @param {import('../app.js').PageContext} ctx */
async function list({ main, query, signal }) {
  document.title = 'Game sessions · Tether';
  const state = query.get('state') ?? '';
  const fleet = query.get('fleet') ?? '';
  const filter = [state && `state=${state}`, fleet && `fleet=${fleet}`].filter(Boolean).join(' AND ');
  const stateSelect = /** @type {HTMLSelectElement} */ (h('select', { id: 'gsess-state', name: 'state' },
    ['', 'ACTIVE', 'ENDED'].map((s) => h('option', { value: s, selected: s === state }, s || 'Any state'))));
  const fleetInput = /** @type {HTMLInputElement} */ (h('input', { id: 'gsess-fleet', name: 'fleet', value: fleet, placeholder: 'fleets/demo', spellcheck: 'false' }));
  const rows = h('div', {});
  const more = /** @type {HTMLButtonElement} */ (h('button', { type: 'button', hidden: true }, 'More'));
  replace(main,
    h('h1', {}, 'Game sessions'),
    h('form', {
      class: 'toolbar',
      onsubmit: (/** @type {Event} */ e) => {
        e.preventDefault();
        const q = new URLSearchParams();
        if (stateSelect.value) q.set('state', stateSelect.value);
        if (fleetInput.value.trim()) q.set('fleet', fleetInput.value.trim());
        location.hash = '#/gameSessions' + (q.size ? '?' + q : '');
      },
    }, h('label', { for: 'gsess-state' }, 'State '), stateSelect, h('label', { for: 'gsess-fleet' }, ' Fleet '), fleetInput, ' ',
    h('button', { type: 'submit' }, 'Show')),
    rows, more);

  /** @type {any[]} */
  const shown = [];
  let pageToken = '';
  const load = async () => {
    const page = await get('gameSessions', { filter, pageSize: 200, pageToken }, signal);
    shown.push(...(page.gameSessions ?? []));
    pageToken = page.nextPageToken ?? '';
    more.hidden = !pageToken;
    replace(rows, table({
      rows: shown,
      empty: 'No game sessions.',
      columns: [
        { title: 'Game session', cell: (s) => resourceLink(s.name, lastId(s.name)) },
        { title: 'State', cell: (s) => badge(s.state) },
        { title: 'Players', class: 'num', cell: (s) => `${s.playerCount}${s.maxPlayers ? ` / ${s.maxPlayers}` : ''}` },
        { title: 'Game server', cell: (s) => resourceLink(s.gameServer, s.gameServer.replace(/^fleets\//, '').replace('/gameServers/', '/')) },
        { title: 'End reason', cell: (s) => endReason(s) },
        { title: 'Started', cell: (s) => fmtTime(s.createTime) },
        { title: 'Changed', cell: (s) => ago(s.updateTime) },
      ],
    }));
  };
  more.addEventListener('click', () => load().catch(() => {}));
  await load();
}

/** @param {any} s a game session */
function endReason(s) {
  const r = enumWord(s.endReason);
  return r ? r + (s.serverReason ? ` (${enumWord(s.serverReason)})` : '') : '';
}

/** @param {import('../app.js').PageContext} ctx */
async function one({ main, params, signal }) {
  const name = `gameSessions/${params.session}`;
  document.title = `${params.session} · Tether`;
  const [s, players] = await Promise.all([
    get(name, {}, signal),
    get(`${name}/playerSessions`, {}, signal),
  ]);
  replace(main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/gameSessions' }, 'Game sessions'), ' › ', params.session),
    h('h1', {}, 'Game session ', h('span', { class: 'mono' }, params.session), ' ', badge(s.state)),
    facts([
      ['Game server', resourceLink(s.gameServer)],
      ['Seats', `${s.playerCount} taken${s.maxPlayers ? ` of ${s.maxPlayers}` : ''}`],
      ['Reconnect window', `${s.reconnectWindowSeconds} s`],
      ['End reason', endReason(s)],
      ['Properties', Object.entries(s.properties ?? {}).map(([k, v]) => `${k}=${v}`).join(' ')],
      ['Started', fmtTime(s.createTime)],
      ['Changed', `${fmtTime(s.updateTime)} (event #${s.sequence})`],
      ['History', h('a', { href: `#/audit?q=${encodeURIComponent(name)}` }, 'every event')],
    ]),
    h('h2', {}, 'Player sessions'),
    table({
      rows: players.playerSessions ?? [],
      empty: 'No players.',
      columns: [
        { title: 'Seat', class: 'num', cell: (p) => p.slot },
        { title: 'Player', cell: (p) => p.playerId },
        { title: 'State', cell: (p) => badge(p.state) },
        { title: 'Reconnects', class: 'num', cell: (p) => p.reconnectCount },
        { title: 'Token generation', class: 'num', cell: (p) => p.tokenGeneration },
        {
          title: 'Seat held until', cell: (p) => p.state === 'RESERVED' ? `${fmtTime(p.reservationDeadline)} (reservation)`
            : p.state === 'DISCONNECTED' ? `${fmtTime(p.reconnectDeadline)} (${ago(p.reconnectDeadline)}, reconnect window)` : '',
        },
        { title: 'End reason', cell: (p) => enumWord(p.endReason) },
        { title: 'Player session', cell: (p) => h('a', { href: `#/audit?q=${encodeURIComponent(p.name)}` }, lastId(p.name)) },
      ],
    }));
}
