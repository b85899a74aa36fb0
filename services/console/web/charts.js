// Charts of the last hour, drawn as inline SVG by hand: the fleet page's
// and the overview's servers per state, allocations per minute, starts
// and terminations by reason, and the overview's hosts as a grid of
// slots. The series are folded in the browser from the event history
// (GET /v1/events:watch with startTime and endTime: a bounded export of
// the hour, one request); foldHour is a pure function of the events.

import { streamEvents } from './api.js';
import { enumWord, h } from './dom.js';

const svgNS = 'http://www.w3.org/2000/svg';

/** The events the charts read. */
export const chartTypes = ['GameServerScheduled', 'ProcessStarted', 'GameServerReady', 'GameServerReserved', 'GameServerAllocated',
  'GameServerUnhealthy', 'ShutdownRequested', 'GameServerTerminated'];

/** The state an event leaves its server in. @type {Record<string, string>} */
const stateAfter = {
  GameServerScheduled: 'SCHEDULED', ProcessStarted: 'STARTING', GameServerReady: 'READY', GameServerReserved: 'RESERVED',
  GameServerAllocated: 'ALLOCATED', GameServerUnhealthy: 'UNHEALTHY', ShutdownRequested: 'SHUTTING_DOWN', GameServerTerminated: 'TERMINATED',
};

/** The state a server was in before its first event of the hour, when that event says (else unknown, not counted). @type {Record<string, string>} */
const stateBefore = { GameServerReserved: 'READY', GameServerAllocated: 'READY' };

/** The states drawn as lines. */
export const lineStates = ['READY', 'ALLOCATED', 'RESERVED'];

/** Events read at most for a chart; past it the chart says it is cut short. */
export const maxEvents = 5000;

/** Minutes in the window. */
export const minutes = 60;

/**
 * @typedef {{start: number, end: number, states: Record<string, number[]>, allocations: number[], starts: number[],
 *   terminations: Record<string, number[]>, totals: {allocations: number, starts: number, terminations: Record<string, number>},
 *   truncated: boolean, events: number}} Hour
 */

/**
 * Folds the events of a window into per-minute buckets. states[s][i] is
 * the number of servers in state s at the end of minute i (a step
 * series): it starts from the servers that did not change in the window
 * (their state now, from the list) and follows each state-changing event;
 * a server whose first event in the window came after an earlier change
 * starts from the state that event implies (READY before a reservation or
 * an allocation), or is counted from its first event on. allocations,
 * starts (GameServerScheduled: a new server) and terminations (by
 * GameServerTerminated's reason) are counts per minute.
 * @param {{sequence: string, type: string, aggregate: string, time: string, data: Record<string, any>}[]} events oldest first
 * @param {{name: string, state: string}[]} servers the servers now (the list)
 * @param {number} start window start, ms
 * @param {number} end window end, ms
 * @param {boolean} [truncated] the events were cut short at the bound
 * @returns {Hour}
 */
export function foldHour(events, servers, start, end, truncated = false) {
  const n = minutes;
  const step = (end - start) / n;
  const bucket = (/** @type {string} */ t) => Math.min(n - 1, Math.max(0, Math.floor((new Date(t).getTime() - start) / step)));
  const zeros = () => new Array(n).fill(0);
  /** @type {Record<string, number[]>} */
  const delta = Object.fromEntries(lineStates.map((s) => [s, zeros()]));
  const base = Object.fromEntries(lineStates.map((s) => [s, 0]));
  const allocations = zeros();
  const starts = zeros();
  /** @type {Record<string, number[]>} */
  const terminations = {};
  /** @type {Map<string, string>} server → its state as folded so far */
  const cur = new Map();
  for (const e of events) {
    const to = stateAfter[e.type];
    if (!to || !e.aggregate.includes('/gameServers/')) continue;
    const i = bucket(e.time);
    if (!cur.has(e.aggregate)) {
      const before = e.type === 'GameServerScheduled' ? '' : (stateBefore[e.type] ?? '');
      if (before in base) base[before]++;
      cur.set(e.aggregate, before);
    }
    const from = cur.get(e.aggregate) ?? '';
    if (from in delta) delta[from][i]--;
    if (to in delta) delta[to][i]++;
    cur.set(e.aggregate, to);
    if (e.type === 'GameServerAllocated') allocations[i]++;
    if (e.type === 'GameServerScheduled') starts[i]++;
    if (e.type === 'GameServerTerminated') {
      const r = enumWord(e.data?.reason) || 'UNKNOWN';
      (terminations[r] ??= zeros())[i]++;
    }
  }
  for (const g of servers) if (!cur.has(g.name) && g.state in base) base[g.state]++;
  /** @type {Record<string, number[]>} */
  const states = {};
  for (const s of lineStates) {
    let v = base[s];
    states[s] = delta[s].map((d) => (v = Math.max(0, v + d)));
  }
  const sum = (/** @type {number[]} */ a) => a.reduce((x, y) => x + y, 0);
  return {
    start, end, states, allocations, starts, terminations, truncated, events: events.length,
    totals: {
      allocations: sum(allocations), starts: sum(starts),
      terminations: Object.fromEntries(Object.entries(terminations).map(([r, a]) => [r, sum(a)])),
    },
  };
}

/**
 * Reads the last hour's events (of a fleet, or of all) through a bounded
 * export, at most maxEvents of them (the newest are then missing).
 * @param {string} fleet "fleets/f", or "" for all
 * @param {AbortSignal} signal
 * @returns {Promise<{events: any[], start: number, end: number, truncated: boolean}>}
 */
export async function readHour(fleet, signal) {
  const end = Date.now();
  const start = end - minutes * 60_000;
  const ctl = new AbortController();
  const stop = () => ctl.abort();
  signal.addEventListener('abort', stop, { once: true });
  /** @type {any[]} */
  const events = [];
  let truncated = false;
  try {
    await streamEvents({ fleet, types: chartTypes, startTime: new Date(start).toISOString(), endTime: new Date(end).toISOString() },
      ctl.signal, (e) => {
        if (events.length >= maxEvents) { truncated = true; ctl.abort(); return; }
        events.push(e);
      });
  } catch (e) {
    if (!truncated) throw e;
  } finally {
    signal.removeEventListener('abort', stop);
  }
  return { events, start, end, truncated };
}

/**
 * An SVG element.
 * @param {string} tag
 * @param {Record<string, string | number>} [attrs]
 * @param {...(Element | string)} children
 */
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

const W = 360;
const H = 150;
const pad = { l: 30, r: 8, t: 8, b: 20 };

/** A time of day, "14:05". @param {number} t */
const hhmm = (t) => new Date(t).toTimeString().slice(0, 5);

/**
 * The frame of a chart: y axis up to max with its ticks, x axis of the
 * window's minutes.
 * @param {Hour} hour
 * @param {number} max
 */
function axes(hour, max) {
  const y = (/** @type {number} */ v) => H - pad.b - (v / max) * (H - pad.t - pad.b);
  const g = s('g', { class: 'axes', 'aria-hidden': 'true' });
  for (const v of [0, Math.round(max / 2), max]) {
    g.append(s('line', { x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v), class: 'grid' }),
      s('text', { x: pad.l - 4, y: y(v) + 4, 'text-anchor': 'end' }, String(v)));
  }
  for (const [i, anchor] of /** @type {[number, string][]} */ ([[0, 'start'], [30, 'middle'], [60, 'end']])) {
    const t = hour.start + (i / minutes) * (hour.end - hour.start);
    g.append(s('text', { x: xAt(i), y: H - 5, 'text-anchor': anchor }, hhmm(t)));
  }
  return { g, y };
}

/** The x of minute i (0 to 60). @param {number} i */
const xAt = (i) => pad.l + (i / minutes) * (W - pad.l - pad.r);

/** A nice maximum for values. @param {number[]} vs */
function top(vs) {
  const m = Math.max(1, ...vs);
  return m <= 4 ? m : Math.ceil(m / 4) * 4;
}

/**
 * A figure: title, the SVG, a legend, and a note.
 * @param {string} id
 * @param {string} title
 * @param {SVGElement} svg
 * @param {[string, string, number][]} legend class, label, total
 * @param {Hour} hour
 */
function figure(id, title, svg, legend, hour) {
  return h('figure', { class: 'chart', 'data-chart': id },
    h('figcaption', {}, title),
    svg,
    h('ul', { class: 'legend' }, legend.map(([cls, label, n]) => h('li', { class: cls }, `${label} ${n}`))),
    hour.truncated ? h('p', { class: 'hint cut' }, `The first ${maxEvents} events of the hour only: later ones are not drawn.`) : null);
}

/**
 * Servers READY, ALLOCATED and RESERVED over the hour, as step lines.
 * @param {Hour} hour
 */
export function stateChart(hour) {
  const max = top(lineStates.flatMap((st) => hour.states[st]));
  const { g, y } = axes(hour, max);
  const now = Object.fromEntries(lineStates.map((st) => [st, hour.states[st].at(-1) ?? 0]));
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `Servers per state over the last hour; now ` +
    lineStates.map((st) => `${now[st]} ${st}`).join(', ') }, s('title', {}, 'Servers per state, last hour'), g);
  for (const st of lineStates) {
    const vs = hour.states[st];
    let d = `M${xAt(0)},${y(vs[0])}`;
    vs.forEach((v, i) => { d += `H${xAt(i + 1)}` + (i + 1 < vs.length ? `V${y(vs[i + 1])}` : ''); });
    svg.append(s('path', { d, class: `series s-${st.toLowerCase()}`, 'data-series': st, 'data-now': now[st], 'data-max': Math.max(...vs) }));
  }
  return figure('states', 'Servers per state', svg, lineStates.map((st) => [`s-${st.toLowerCase()}`, st, now[st]]), hour);
}

/**
 * Bars per minute, stacked by series.
 * @param {string} id
 * @param {string} title
 * @param {Hour} hour
 * @param {[string, string, number[]][]} series class, label, counts per minute
 */
function barChart(id, title, hour, series) {
  const stack = new Array(minutes).fill(0);
  for (const [, , vs] of series) vs.forEach((v, i) => { stack[i] += v; });
  const max = top(stack);
  const { g, y } = axes(hour, max);
  const totals = series.map(([, , vs]) => vs.reduce((a, b) => a + b, 0));
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title} per minute over the last hour: ` +
    (series.map(([, label], k) => `${totals[k]} ${label}`).join(', ') || 'none') }, s('title', {}, `${title}, last hour`), g);
  const base = new Array(minutes).fill(0);
  const bw = (W - pad.l - pad.r) / minutes;
  series.forEach(([cls, label, vs], k) => {
    const grp = s('g', { class: `series ${cls}`, 'data-series': label, 'data-total': totals[k] });
    vs.forEach((v, i) => {
      if (!v) return;
      grp.append(s('rect', { x: xAt(i) + 0.5, width: Math.max(1, bw - 1), y: y(base[i] + v), height: y(base[i]) - y(base[i] + v), 'data-minute': i, 'data-count': v },
        s('title', {}, `${hhmm(hour.start + i * 60_000)}: ${v} ${label}`)));
      base[i] += v;
    });
    svg.append(grp);
  });
  return figure(id, title, svg, series.map(([cls, label], k) => [cls, label, totals[k]]), hour);
}

/** Allocations per minute. @param {Hour} hour */
export function allocationChart(hour) {
  return barChart('allocations', 'Allocations', hour, [['s-allocated', 'allocations', hour.allocations]]);
}

/** Starts and terminations by reason, per minute. @param {Hour} hour */
export function churnChart(hour) {
  const reasons = Object.keys(hour.terminations).sort();
  return barChart('churn', 'Starts and terminations', hour, [
    ['s-ready', 'started', hour.starts],
    ...reasons.map((r, k) => /** @type {[string, string, number[]]} */ ([`r-${k % 6}`, r, hour.terminations[r]])),
  ]);
}

/**
 * The three charts of an hour, in a row.
 * @param {Hour} hour
 */
export function hourCharts(hour) {
  return h('div', { class: 'charts', 'data-events': hour.events, 'data-truncated': String(hour.truncated) },
    stateChart(hour), allocationChart(hour), churnChart(hour));
}

/** Hosts drawn in the grid at most. */
export const maxGridHosts = 200;

/**
 * Hosts as a grid of slots: a row per host, a cell per slot, filled when
 * used (allocatedSlots of capacity).
 * @param {any[]} hosts
 */
export function hostGrid(hosts) {
  const shown = hosts.slice(0, maxGridHosts);
  const cell = 16;
  const label = 56;
  const widest = Math.min(64, Math.max(1, ...shown.map((x) => Number(x.capacity) || 0)));
  const used = hosts.reduce((a, x) => a + (Number(x.allocatedSlots) || 0), 0);
  const cap = hosts.reduce((a, x) => a + (Number(x.capacity) || 0), 0);
  const svg = s('svg', { viewBox: `0 0 ${label + widest * cell} ${Math.max(1, shown.length) * cell}`, role: 'img', class: 'slots',
    'aria-label': `Slots used: ${used} of ${cap} on ${hosts.length} hosts` }, s('title', {}, 'Slots used per host'));
  svg.setAttribute('width', String(label + widest * cell));
  shown.forEach((x, row) => {
    const n = Math.min(widest, Number(x.capacity) || 0);
    const u = Number(x.allocatedSlots) || 0;
    const g = s('g', { class: 'host', 'data-host': x.name, 'data-used': u, 'data-capacity': Number(x.capacity) || 0 },
      s('title', {}, `${x.name.replace(/^hosts\//, '')}: ${u} of ${x.capacity} slots used`),
      s('text', { x: 0, y: row * cell + cell - 4 }, x.name.replace(/^hosts\//, '')));
    for (let i = 0; i < n; i++) {
      g.append(s('rect', { x: label + i * cell + 1, y: row * cell + 1, width: cell - 2, height: cell - 2, class: i < u ? 'used' : 'free' }));
    }
    svg.append(g);
  });
  return h('figure', { class: 'chart hostgrid', 'data-chart': 'hosts', 'data-used': used, 'data-capacity': cap },
    h('figcaption', {}, `Slots used: ${used} of ${cap}`),
    svg,
    hosts.length > shown.length ? h('p', { class: 'hint' }, `The first ${maxGridHosts} hosts of ${hosts.length}.`) : null,
    widest < Math.max(0, ...shown.map((x) => Number(x.capacity) || 0)) ? h('p', { class: 'hint' }, 'Hosts with more than 64 slots show their first 64.') : null);
}
