// Hosts: every host's inventory (slots, labels, address, agent), its
// liveness and the age of its last heartbeat, in a virtualised table (a
// fleet can span thousands of hosts); ?host=h1 shows one host and the game
// servers placed on it.

import { get, listAll, listLive } from '../api.js';
import { ago, badge, enumWord, facts, fmtTime, h, lastId, replace, resourceLink, table } from '../dom.js';
import { VirtualTable } from '../vtable.js';

/** @type {import('../vtable.js').Column<any>[]} */
const columns = [
  { key: 'name', title: 'Host', width: 'minmax(6rem, 1fr)', cell: (x) => h('a', { href: `#/hosts?host=${lastId(x.name)}` }, lastId(x.name)), sort: (x) => x.name },
  { key: 'state', title: 'Liveness', width: '9rem', cell: (x) => badge(x.state), sort: (x) => x.state },
  { key: 'heartbeat', title: 'Heartbeat age', width: '9rem', cell: (x) => ago(x.lastHeartbeatTime), sort: (x) => x.lastHeartbeatTime ?? '' },
  { key: 'slots', title: 'Slots used', width: '7rem', cell: (x) => `${x.allocatedSlots} / ${x.capacity}`, sort: (x) => x.allocatedSlots / (x.capacity || 1) },
  { key: 'cordoned', title: 'Cordoned', width: 'minmax(7rem, 1fr)', cell: (x) => (x.cordoned ? `by ${x.cordonedBy || '?'}` : ''), sort: (x) => (x.cordoned ? 1 : 0) },
  { key: 'labels', title: 'Labels', width: 'minmax(8rem, 1.5fr)', cell: labels, sort: labels },
  { key: 'address', title: 'Address', width: '9rem', cell: (x) => x.address, sort: (x) => x.address },
  { key: 'agent', title: 'Agent', width: '6rem', cell: (x) => x.agentVersion, sort: (x) => x.agentVersion },
];

/** @param {any} x a host */
function labels(x) {
  return Object.entries(x.labels ?? {}).map(([k, v]) => `${k}=${v}`).join(' ');
}

/** @param {import('../app.js').PageContext} ctx */
export async function render(ctx) {
  return ctx.query.get('host') ? one(ctx) : all(ctx);
}

/** @param {import('../app.js').PageContext} ctx */
async function all({ main, signal }) {
  document.title = 'Hosts · Tether';
  main.classList.add('fill');
  const hosts = await listAll('hosts', 'hosts', {}, signal);
  /** @type {Record<string, number>} */
  const per = {};
  for (const x of hosts) per[x.state] = (per[x.state] ?? 0) + 1;
  const grid = new VirtualTable({ label: 'Hosts', columns, signal, rowKey: (x) => x.name, rowHref: (x) => `#/hosts?host=${lastId(x.name)}` });
  replace(main,
    h('h1', {}, 'Hosts'),
    h('p', { class: 'counts' }, `${hosts.length} hosts: ` + Object.entries(per).map(([s, n]) => `${n} ${s}`).join(', ') +
      '. Heartbeat age counts from the last heartbeat the views know of.'),
    grid.el);
  grid.setRows(hosts);
  const tick = window.setInterval(() => grid.refresh(), 1000); // the ages grow
  signal.addEventListener('abort', () => clearInterval(tick), { once: true });
}

/** @param {import('../app.js').PageContext} ctx */
async function one({ main, query, signal }) {
  const id = query.get('host') ?? '';
  const name = `hosts/${id}`;
  document.title = `${id} · Tether`;
  const [x, { servers: live, ended }] = await Promise.all([
    get(name, {}, signal),
    listLive('fleets/-/gameServers', { filter: `host=${name}` }, signal),
  ]);
  const age = h('span', {}, ago(x.lastHeartbeatTime));
  replace(main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/hosts' }, 'Hosts'), ' › ', id),
    h('h1', {}, 'Host ', h('span', { class: 'mono' }, id), ' ', badge(x.state)),
    facts([
      ['Heartbeat', [age, ` (${fmtTime(x.lastHeartbeatTime)})`]],
      ['Slots', `${x.allocatedSlots} used of ${x.capacity}`],
      ['Cordoned', x.cordoned ? `by ${x.cordonedBy || '?'} at ${fmtTime(x.cordonTime)}` : ''],
      ['Labels', labels(x)],
      ['Address', x.address],
      ['Agent', x.agentVersion],
      ['Changed', `${fmtTime(x.updateTime)} (event #${x.sequence})`],
      ['History', h('a', { href: `#/audit?q=${encodeURIComponent(name)}` }, 'every event')],
    ]),
    h('h2', {}, `Game servers on ${id}`),
    table({
      rows: live,
      empty: 'None running.',
      columns: [
        { title: 'Game server', cell: (g) => resourceLink(g.name, g.name.replace(/^fleets\//, '').replace('/gameServers/', '/')) },
        { title: 'State', cell: (g) => badge(g.state) },
        { title: 'Connection', cell: (g) => enumWord(g.connection?.state) },
        { title: 'Health', cell: (g) => enumWord(g.health?.state) },
        { title: 'PID', class: 'num', cell: (g) => (g.pid ? String(g.pid) : '') },
        { title: 'Ports', cell: (g) => (g.ports ?? []).map((/** @type {any} */ p) => p.port).join(', ') },
      ],
    }),
    ended ? h('p', { class: 'hint' }, `and ${ended} that ended.`) : null);
  const tick = window.setInterval(() => { age.textContent = ago(x.lastHeartbeatTime); }, 1000);
  signal.addEventListener('abort', () => clearInterval(tick), { once: true });
}
