// Overview: fleets with their servers per state, hosts with their
// liveness, and the views' lag and dead letters. It reloads when an event
// changes one of those (a watch of those event types, at most every 2 s).

import { ApiError, get, listAll, listLive, watch } from '../api.js';
import { ago, badge, h, lastId, replace, resourceLink, table } from '../dom.js';
import { hostGrid } from '../charts.js';
import { drawHour } from './fleet.js';

/** Events after which the overview is out of date. */
const changes = [
  'FleetCreated', 'FleetUpdated', 'FleetDeleted', 'FleetAutoscaled', 'FleetStartFailing', 'FleetStartRecovered',
  'FleetPlacementBlocked', 'FleetPlacementUnblocked',
  'GameServerScheduled', 'GameServerReady', 'GameServerReserved', 'GameServerAllocated', 'GameServerUnhealthy',
  'ShutdownRequested', 'GameServerTerminated',
  'HostRegistered', 'HostOnline', 'HostUnreachable', 'HostLost', 'HostDrainRequested', 'HostDrained',
  'HostCordoned', 'HostUncordoned', 'HostDeregistered',
];

/** @param {import('../app.js').PageContext} ctx */
export async function render({ main, signal, live }) {
  document.title = 'Overview · Tether';
  const body = h('div', {});
  const charts = h('div', { class: 'hour' }, h('p', { class: 'hint' }, 'Reading the last hour…'));
  const grid = h('div', {});
  replace(main, h('h1', {}, 'Overview'), body,
    h('section', { 'aria-labelledby': 'hour' }, h('h2', { id: 'hour' }, 'The last hour'), charts), grid);

  let after = 0;
  const load = async () => {
    const [fleets, hosts, status] = await Promise.all([
      listAll('fleets', 'fleets', {}, signal),
      listAll('hosts', 'hosts', {}, signal),
      get('projections/status', {}, signal).catch((e) => {
        if (e instanceof ApiError && e.status === 403) return null; // a role that may not read the projections
        throw e;
      }),
    ]);
    if (status && !after) after = Number(status.checkpoint);
    replace(body, projections(status), fleetTable(fleets), hostTable(hosts));
    replace(grid, h('h2', {}, 'Slots used per host'), hostGrid(hosts));
  };
  await load();
  listLive('fleets/-/gameServers', {}, signal)
    .then(({ servers }) => drawHour(charts, '', servers, signal))
    .catch((e) => { if (!signal.aborted) replace(charts, h('p', { class: 'hint' }, `The last hour's charts: ${e instanceof Error ? e.message : e}`)); });

  // Reload on a change, at most every 2 s, and spending at most a tenth
  // of the time reloading (thousands of hosts take a while to list).
  let timer = 0;
  let next = 0;
  const reload = () => {
    if (timer) return;
    timer = window.setTimeout(async () => {
      const start = Date.now();
      try {
        await load();
      } catch (e) {
        if (!signal.aborted) live(`reload failed: ${e instanceof Error ? e.message : e}`, 'retrying');
      }
      next = Date.now() + Math.max(2000, 10 * (Date.now() - start));
      timer = 0;
    }, Math.max(0, next - Date.now()));
  };
  signal.addEventListener('abort', () => clearTimeout(timer), { once: true });
  watch({
    params: { types: changes }, after, signal,
    onEvent: reload,
    onStatus: (s) => {
      if (s.state === 'open') live('live', 'live');
      else if (s.state === 'retrying') { live(`reconnecting: ${s.error}`, 'retrying'); reload(); }
      else live(`not live: ${s.error}`, 'stopped');
    },
  });
}

/** @param {any} s projections status, or null */
function projections(s) {
  if (!s) return h('p', { class: 'empty' }, 'Projection status: not readable with this key.');
  const lag = Number(s.lag);
  const dead = Number(s.deadLetters);
  return h('section', { 'aria-labelledby': 'proj' },
    h('h2', { id: 'proj' }, 'Views'),
    h('div', { class: 'tiles' },
      tile('Projection lag', `${lag} event${lag === 1 ? '' : 's'}`, lag > 1000 ? 'warn' : ''),
      tile('Dead letters', String(dead), dead > 0 ? 'bad' : ''),
      tile('Checkpoint', `#${s.checkpoint}`, ''),
      tile('Checkpoint advanced', ago(s.checkpointTime), '')));
}

/**
 * @param {string} label
 * @param {string} value
 * @param {string} tone
 */
function tile(label, value, tone) {
  return h('div', { class: `tile ${tone}` }, h('div', { class: 'tile-label' }, label), h('div', { class: 'tile-value' }, value));
}

/** @param {any[]} fleets */
function fleetTable(fleets) {
  const n = (/** @type {any} */ v) => Number(v ?? 0);
  return h('section', { 'aria-labelledby': 'fleets' },
    h('h2', { id: 'fleets' }, 'Fleets'),
    table({
      rows: fleets,
      empty: 'No fleets yet.',
      columns: [
        { title: 'Fleet', cell: (f) => resourceLink(f.name, lastId(f.name)) },
        { title: 'Desired', class: 'num', cell: (f) => f.replicas },
        { title: 'Live', class: 'num', cell: (f) => n(f.status?.replicas) },
        { title: 'Ready', class: 'num', cell: (f) => n(f.status?.readyReplicas) },
        { title: 'Reserved', class: 'num', cell: (f) => n(f.status?.reservedReplicas) },
        { title: 'Allocated', class: 'num', cell: (f) => n(f.status?.allocatedReplicas) },
        { title: 'Unhealthy', class: 'num', cell: (f) => n(f.status?.unhealthyReplicas) },
        {
          title: 'Starting or stopping', class: 'num', cell: (f) => Math.max(0, n(f.status?.replicas) - n(f.status?.readyReplicas) -
            n(f.status?.reservedReplicas) - n(f.status?.allocatedReplicas) - n(f.status?.unhealthyReplicas)),
        },
        { title: 'Waiting for a host', class: 'num', cell: (f) => n(f.status?.waitingReplicas) },
        { title: 'Revision', class: 'num', cell: (f) => f.revision },
        {
          title: 'Conditions', cell: (f) => (f.status?.conditions ?? []).filter((/** @type {any} */ c) => c.status === 'True')
            .map((/** @type {any} */ c) => h('span', { class: 'badge s-unhealthy', title: c.message }, `${c.type}: ${c.reason}`)),
        },
      ],
    }));
}

/** Hosts listed on the overview at most: those that need a look. */
const maxHostsShown = 50;

/** @param {any[]} hosts */
function hostTable(hosts) {
  /** @type {Record<string, number>} */
  const per = {};
  for (const x of hosts) per[x.state] = (per[x.state] ?? 0) + 1;
  // Every host while there are few; else those not ONLINE or cordoned.
  const look = hosts.length <= maxHostsShown ? hosts : hosts.filter((x) => x.state !== 'ONLINE' || x.cordoned);
  return h('section', { 'aria-labelledby': 'hosts' },
    h('h2', { id: 'hosts' }, h('a', { href: '#/hosts' }, 'Hosts')),
    h('p', {}, `${hosts.length} host${hosts.length === 1 ? '' : 's'}: ` + (Object.entries(per).map(([st, n]) => `${n} ${st}`).join(', ') || 'none registered') +
      (look.length === hosts.length ? '' : look.length === 0 ? '; none is cordoned.'
        : `. Those not ONLINE or cordoned${look.length > maxHostsShown ? ` (the first ${maxHostsShown})` : ''}:`)),
    look.length ? table({
      rows: look.slice(0, maxHostsShown),
      columns: [
        { title: 'Host', cell: (x) => resourceLink(x.name, lastId(x.name)) },
        { title: 'Liveness', cell: (x) => [badge(x.state), x.cordoned && x.state === 'ONLINE' ? ' cordoned' : ''] },
        { title: 'Slots used', class: 'num', cell: (x) => `${x.allocatedSlots} / ${x.capacity}` },
        { title: 'Heartbeat', cell: (x) => ago(x.lastHeartbeatTime) },
        { title: 'Labels', cell: (x) => Object.entries(x.labels ?? {}).map(([k, v]) => `${k}=${v}`).join(' ') },
        { title: 'Agent', cell: (x) => x.agentVersion },
      ],
    }) : null);
}
