// Fleet: the fleet's state and every one of its game servers in a
// virtualised table that follows events:watch live, without polling.
//
// Consistency: the page reads the views' checkpoint first, then lists
// every server with minSequence at that checkpoint, then watches the
// fleet's events from that checkpoint on. Every event after the list is
// seen; an event of a server makes the page GET that server (waiting for
// the views to apply the event), and a row is replaced only by a newer
// sequence of it.
//
// Ended (TERMINATED) servers are hidden unless "Show ended" is ticked (or
// the state picked is TERMINATED): the list reads the live ones and the
// number of ended ones, and reads the ended ones the first time they are
// asked for. A server that ends while the page is open leaves the table
// and adds to that number.

import { ApiError, Refetcher, get, listAll, listLive, watch } from '../api.js';
import { ago, badge, enumWord, facts, fmtTime, h, lastId, replace, resourceLink } from '../dom.js';
import { VirtualTable } from '../vtable.js';
import { foldHour, hourCharts, readHour } from '../charts.js';

/** Lifecycle states in their order, for the filter and the counts. */
const states = ['SCHEDULED', 'STARTING', 'READY', 'RESERVED', 'ALLOCATED', 'SHUTTING_DOWN', 'UNHEALTHY', 'TERMINATED'];

/** @param {any} g a game server */
function endpoint(g) {
  if (!g.address) return '—';
  const ports = (g.ports ?? []).map((/** @type {any} */ p) => `${p.port}/${(enumWord(p.protocol) || 'udp').toLowerCase()}`);
  return ports.length ? `${g.address}:${ports.join(', ')}` : g.address;
}

/** @type {import('../vtable.js').Column<any>[]} */
const columns = [
  { key: 'name', title: 'Game server', width: 'minmax(9rem, 1.3fr)', cell: (g) => resourceLink(g.name, lastId(g.name)), sort: (g) => g.name },
  { key: 'state', title: 'State', width: '8.5rem', cell: (g) => badge(g.state), sort: (g) => states.indexOf(g.state) },
  { key: 'reason', title: 'Reason', width: 'minmax(8rem, 1.2fr)', cell: (g) => enumWord(g.reason), sort: (g) => g.reason },
  { key: 'connection', title: 'Connection', width: '9.5rem', cell: (g) => enumWord(g.connection?.state) || '—', sort: (g) => g.connection?.state ?? '' },
  {
    key: 'health', title: 'Health', width: '7.5rem', sort: (g) => g.health?.state ?? '',
    cell: (g) => (enumWord(g.health?.state) || '—') + (g.health?.missedPeriods ? ` (${g.health.missedPeriods} missed)` : ''),
  },
  { key: 'host', title: 'Host', width: '5rem', cell: (g) => resourceLink(g.host, lastId(g.host)), sort: (g) => g.host },
  { key: 'address', title: 'Address and ports', width: 'minmax(9rem, 1.2fr)', cell: endpoint, sort: endpoint },
  { key: 'pid', title: 'PID', width: '5rem', cell: (g) => (g.pid ? String(g.pid) : '—'), sort: (g) => g.pid },
  { key: 'revision', title: 'Rev', width: '3.5rem', cell: (g) => String(g.revision ?? ''), sort: (g) => Number(g.revision) },
  { key: 'updated', title: 'Changed', width: '8.5rem', cell: (g) => fmtTime(g.updateTime), sort: (g) => g.updateTime ?? '' },
];

/** @param {import('../app.js').PageContext} ctx */
export async function render({ main, params, signal, live }) {
  const name = `fleets/${params.fleet}`;
  document.title = `${params.fleet} · Tether`;
  main.classList.add('fill');

  const status = await get('projections/status', {}, signal).catch((e) => {
    if (e instanceof ApiError && e.status === 403) return null; // then the watch starts from "now"
    throw e;
  });
  const checkpoint = status ? Number(status.checkpoint) : 0;
  const [fleet, { servers: list, ended: endedAtFirst }] = await Promise.all([
    get(name, { minSequence: checkpoint }, signal),
    listLive(`${name}/gameServers`, { minSequence: checkpoint }, signal),
  ]);
  /** Ended servers counted but not read (0 once they are read). */
  let endedUnread = endedAtFirst;
  /** @type {Promise<void> | null} the read of the ended servers, once asked for */
  let endedRead = null;

  /** @type {Map<string, any>} name → game server */
  const servers = new Map(list.map((g) => [g.name, g]));
  /** The servers' names, sorted (the list comes sorted by name). */
  const order = list.map((g) => g.name);
  const summary = h('div', { class: 'summary' });
  const charts = h('section', { class: 'hour', 'aria-label': 'The last hour' }, h('p', { class: 'hint' }, 'Reading the last hour…'));
  const counts = h('p', { class: 'counts', 'aria-live': 'polite' });
  const search = /** @type {HTMLInputElement} */ (h('input', { type: 'search', id: 'gs-filter', placeholder: 'name, host, address, pid', spellcheck: 'false' }));
  const stateSelect = /** @type {HTMLSelectElement} */ (h('select', { id: 'gs-state' },
    h('option', { value: '' }, 'All states'), states.map((s) => h('option', { value: s }, s))));
  const showEnded = /** @type {HTMLInputElement} */ (h('input', { type: 'checkbox', id: 'gs-ended' }));
  const endedCount = h('span', { id: 'gs-ended-count' });
  const grid = new VirtualTable({
    label: `Game servers of fleet ${params.fleet}`, columns, signal,
    rowKey: (g) => g.name, rowHref: (g) => '#/' + g.name,
  });

  replace(main,
    h('div', { class: 'page-head' },
      h('h1', {}, 'Fleet ', h('span', { class: 'mono' }, params.fleet)),
      h('nav', { class: 'links', 'aria-label': 'Fleet' },
        h('a', { href: `#/audit?q=${encodeURIComponent(name)}` }, 'History'), ' ',
        h('a', { href: `#/gameSessions?fleet=${encodeURIComponent(name)}` }, 'Game sessions'))),
    summary,
    charts,
    h('div', { class: 'toolbar' },
      h('label', { for: 'gs-filter' }, 'Filter '), search,
      h('label', { for: 'gs-state' }, 'State '), stateSelect,
      h('label', { for: 'gs-ended' }, showEnded, ' Show the ', endedCount, ' ended'),
      counts),
    grid.el);

  /** @param {any} f */
  const showFleet = (f) => replace(summary, fleetFacts(f));
  showFleet(fleet);
  drawHour(charts, name, list, signal);

  let dirty = 0;
  const redraw = () => {
    if (dirty) return;
    dirty = requestAnimationFrame(() => {
      dirty = 0;
      const text = search.value.trim().toLowerCase();
      const state = stateSelect.value;
      const ended = showEnded.checked || state === 'TERMINATED';
      /** @type {Record<string, number>} */
      const per = {};
      const rows = [];
      for (const n of order) {
        const g = servers.get(n);
        per[g.state] = (per[g.state] ?? 0) + 1;
        if (state && g.state !== state) continue;
        if (!ended && g.state === 'TERMINATED') continue;
        if (text && !`${g.name} ${g.host} ${endpoint(g)} ${g.pid} ${g.reason}`.toLowerCase().includes(text)) continue;
        rows.push(g);
      }
      grid.setRows(rows);
      const endedAll = (per.TERMINATED ?? 0) + endedUnread;
      endedCount.textContent = String(endedAll);
      counts.textContent = `${rows.length} shown · ` +
        (states.filter((s) => s !== 'TERMINATED' && per[s]).map((s) => `${per[s]} ${s}`).join(', ') || 'no live servers') +
        ` · ${endedAll} ended`;
    });
  };
  signal.addEventListener('abort', () => cancelAnimationFrame(dirty), { once: true });
  const refilter = () => {
    grid.el.scrollTop = 0;
    if ((showEnded.checked || stateSelect.value === 'TERMINATED') && !endedRead) endedRead = readEnded();
    redraw();
  };
  search.addEventListener('input', refilter);
  stateSelect.addEventListener('change', refilter);
  showEnded.addEventListener('change', refilter);
  redraw();

  /** Keeps a server's newer state. @param {any} g */
  const keep = (g) => {
    const had = servers.get(g.name);
    if (had && Number(had.sequence) > Number(g.sequence)) return;
    if (!had) order.splice(sortedIndex(order, g.name), 0, g.name);
    servers.set(g.name, g);
    redraw();
  };
  /** Reads the ended servers into the table, once. */
  const readEnded = async () => {
    try {
      for (const g of await listAll(`${name}/gameServers`, 'gameServers', { filter: 'ended=true' }, signal)) keep(g);
      endedUnread = 0;
      redraw();
    } catch (e) {
      endedRead = null; // the next tick tries again
      if (!signal.aborted) live(`reading the ended servers failed: ${e instanceof Error ? e.message : e}`, 'retrying');
    }
  };
  let fleetSeq = Number(fleet.sequence);
  const refetch = new Refetcher({
    signal,
    fetch: async (n, seq) => {
      if (n === name) {
        const f = await get(name, { minSequence: seq }, signal);
        if (Number(f.sequence) >= fleetSeq) { fleetSeq = Number(f.sequence); showFleet(f); }
      } else {
        keep(await get(n, { minSequence: seq }, signal));
      }
    },
    // Too many servers changed at once to fetch one by one: list them all,
    // the ended ones too (a server that ended meanwhile is in no live list).
    onOverflow: async (seq) => {
      try {
        for (const g of await listAll(`${name}/gameServers`, 'gameServers', { minSequence: seq }, signal)) keep(g);
        endedUnread = 0;
        endedRead ??= Promise.resolve();
      } catch (e) {
        if (!signal.aborted) live(`reload failed: ${e instanceof Error ? e.message : e}`, 'retrying');
      }
    },
  });
  watch({
    params: { fleet: name }, after: checkpoint, signal,
    onEvent: (ev) => refetch.add(ev.aggregate, Number(ev.sequence)),
    onStatus: (s) => {
      if (s.state === 'open') live('live', 'live');
      else if (s.state === 'retrying') live(`reconnecting in ${Math.round(s.delay / 100) / 10} s: ${s.error}`, 'retrying');
      else live(`not live: ${s.error}`, 'stopped');
    },
  });
}

/**
 * Draws the charts of the fleet's last hour into el, from its events
 * (charts.js), once; a key refused the export gets a line.
 * @param {HTMLElement} el
 * @param {string} fleet "fleets/f", or "" for all
 * @param {any[]} servers the servers now
 * @param {AbortSignal} signal
 */
export async function drawHour(el, fleet, servers, signal) {
  try {
    const { events, start, end, truncated } = await readHour(fleet, signal);
    replace(el, hourCharts(foldHour(events, servers, start, end, truncated)));
  } catch (e) {
    if (signal.aborted) return;
    replace(el, h('p', { class: 'hint' }, e instanceof ApiError && e.status === 403
      ? 'The last hour\'s charts: this key may not read the events.'
      : `The last hour's charts: ${e instanceof Error ? e.message : e}`));
  }
}

/**
 * Where name goes in a sorted array.
 * @param {string[]} sorted
 * @param {string} name
 */
function sortedIndex(sorted, name) {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid] < name) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** @param {any} f a fleet */
function fleetFacts(f) {
  const st = f.status ?? {};
  const conditions = (st.conditions ?? []).filter((/** @type {any} */ c) => c.status === 'True');
  const rollout = st.rollout;
  return facts([
    ['Replicas', `${f.replicas} desired` + (st.waitingReplicas ? `, ${st.waitingReplicas} waiting for a host` : '')],
    ['Revision', String(f.revision ?? '')],
    ['Rollout', rollout ? `${enumWord(rollout.state)}: revision ${rollout.fromRevision} → ${rollout.revision}` +
      `${rollout.message ? ` (${rollout.message})` : ''}` : ''],
    ['Autoscaling', st.lastScaling],
    ['Conditions', conditions.length ? conditions.map((/** @type {any} */ c) => `${c.type}: ${c.reason}${c.message ? ` (${c.message})` : ''}`).join('; ') : ''],
    ['Command', f.template?.command],
    ['Deleted', f.deleteTime ? ago(f.deleteTime) : ''],
  ]);
}
