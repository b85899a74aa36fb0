// Game server: what it is now, why (the reason and evidence in words,
// from :explain), its timeline (every event, from its history), and what
// it was at a chosen time or after a chosen event (:stateAt). New events
// join the timeline as they are stored.

import { get, listAll, watch } from '../api.js';
import { ago, badge, enumWord, facts, fmtTime, h, json, lastId, replace, resourceLink } from '../dom.js';
import { changeWords, countersWords, dataLine, evidenceWords, listsWords, offset, reasonWords } from '../words.js';

/** @param {import('../app.js').PageContext} ctx */
export async function render({ main, params, signal, live }) {
  const name = `fleets/${params.fleet}/gameServers/${params.gameServer}`;
  document.title = `${params.gameServer} · Tether`;
  // The views' checkpoint, read first, is where the live part starts: the
  // history read after it includes every event up to it.
  const status = await get('projections/status', {}, signal).catch(() => null);
  const [server, why, history] = await Promise.all([
    get(name, {}, signal),
    get(`${name}:explain`, {}, signal),
    listAll(`${name}/events`, 'events', {}, signal),
  ]);

  const title = h('h1', {}, 'Game server ', h('span', { class: 'mono' }, params.gameServer), ' ', badge(server.state));
  const now = h('section', { 'aria-labelledby': 'now' });
  const explanation = h('section', { 'aria-labelledby': 'why', class: 'why' });
  const timeline = h('ol', { class: 'timeline', 'aria-labelledby': 'tl' });
  const stateOut = h('div', { 'aria-live': 'polite' });
  const at = /** @type {HTMLInputElement} */ (h('input', { type: 'datetime-local', id: 'at', step: '0.001', required: true }));
  at.value = localInput(history.at(-1)?.time ?? new Date().toISOString());

  /** @param {Record<string, any>} q */
  const showStateAt = async (q) => {
    replace(stateOut, h('p', { class: 'empty' }, 'Folding its history…'));
    try {
      replace(stateOut, stateFacts(await get(`${name}:stateAt`, q, signal)));
    } catch (e) {
      if (!signal.aborted) replace(stateOut, h('p', { class: 'error', role: 'alert' }, e instanceof Error ? e.message : String(e)));
    }
  };

  replace(main,
    h('p', { class: 'crumbs' }, h('a', { href: `#/fleets/${params.fleet}` }, `Fleet ${params.fleet}`), ' › ', params.gameServer),
    title,
    h('div', { class: 'cols' }, explanation, now),
    h('div', { class: 'cols wide-left' },
      h('section', {},
        h('h2', { id: 'tl' }, 'Timeline ', h('span', { class: 'hint' }, '(oldest first)')),
        timeline),
      h('section', { 'aria-labelledby': 'stateat', class: 'side' },
        h('h2', { id: 'stateat' }, 'State at a time'),
        h('form', {
          class: 'inline',
          onsubmit: (/** @type {Event} */ e) => { e.preventDefault(); showStateAt({ time: new Date(at.value).toISOString() }); },
        }, h('label', { for: 'at' }, 'At '), at, ' ', h('button', { type: 'submit' }, 'Show')),
        h('p', { class: 'hint' }, 'Or “state after” an event of the timeline.'),
        stateOut)));

  const causes = new Set();
  /** @param {any} s @param {any} w */
  const showNow = (s, w) => {
    replace(title, 'Game server ', h('span', { class: 'mono' }, params.gameServer), ' ', badge(s.state));
    replace(now, h('h2', { id: 'now' }, 'Now'), serverFacts(s));
    causes.clear();
    for (const e of w.events ?? []) causes.add(e.sequence);
    for (const li of timeline.children) li.classList.toggle('cause', causes.has(li.getAttribute('data-seq')));
    replace(explanation, explain(w));
  };
  const first = history[0]?.time;
  /** @param {any} e */
  const addEvent = (e) => {
    timeline.append(h('li', { class: causes.has(e.sequence) ? 'cause' : '', 'data-seq': e.sequence, 'data-type': e.type },
      h('div', { class: 'when' }, h('time', { datetime: e.time }, fmtTime(e.time)), first ? h('div', { class: 'hint' }, offset(e.time, first)) : null),
      h('div', { class: 'what' }, h('strong', {}, e.type), ' ', h('span', { class: 'hint' }, `#${e.sequence} by ${e.actor || e.producer}`)),
      h('div', { class: 'data mono' }, changeWords(e.type, e.data) || dataLine(e.data)),
      h('button', { type: 'button', class: 'small', onclick: () => showStateAt({ sequence: e.sequence }) }, 'state after')));
  };
  showNow(server, why);
  history.forEach(addEvent);

  // Live: an event of this server joins the timeline; the server and its
  // explanation are read again (views first: minSequence).
  let seen = Number(history.at(-1)?.sequence ?? 0);
  let reading = Promise.resolve();
  if (server.state === 'TERMINATED') return; // for good: nothing more happens to it
  watch({
    params: { fleet: `fleets/${params.fleet}` }, after: Number(status?.checkpoint ?? 0), signal,
    onEvent: (e) => {
      if (e.aggregate !== name || Number(e.sequence) <= seen) return;
      seen = Number(e.sequence);
      addEvent(e);
      reading = reading.then(async () => {
        const [s, w] = await Promise.all([get(name, { minSequence: seen }, signal), get(`${name}:explain`, {}, signal)]);
        showNow(s, w);
      }).catch(() => {});
    },
    onStatus: (s) => {
      if (s.state === 'open') live('live', 'live');
      else if (s.state === 'retrying') live(`reconnecting: ${s.error}`, 'retrying');
      else live(`not live: ${s.error}`, 'stopped');
    },
  });
}

/**
 * A time as the value of a datetime-local input (local time, ms).
 * @param {string} t
 */
function localInput(t) {
  const d = new Date(t);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 23);
}

/**
 * A server's health: now while it runs; once it ended, what it was when it
 * ended and when its last heartbeat came, not "ago" as if it still beat.
 * @param {any} s a game server
 */
function healthWords(s) {
  const missed = s.health?.missedPeriods ? `, ${s.health.missedPeriods} periods missed` : '';
  const beat = s.health?.lastHeartbeatTime;
  if (s.state === 'TERMINATED') {
    return `${enumWord(s.health?.state) || 'not evaluated'} when it ended${missed}` + (beat ? `, its last heartbeat at ${fmtTime(beat)}` : '');
  }
  return `${enumWord(s.health?.state) || 'not evaluated'}${missed}` + (beat ? `, last heartbeat ${ago(beat)}` : '');
}

/** @param {any} s a game server */
function serverFacts(s) {
  return facts([
    ['State', s.state],
    ['Reason', enumWord(s.reason)],
    ['Connection', `${enumWord(s.connection?.state) || 'never connected'}${s.connection?.since ? `, since ${fmtTime(s.connection.since)}` : ''}` +
      `${s.connection?.graceDeadline && s.connection.state === 'DISCONNECTED' ? `, grace until ${fmtTime(s.connection.graceDeadline)}` : ''}`],
    ['Health', healthWords(s)],
    ['Host', resourceLink(s.host, lastId(s.host))],
    ['Address', s.address ? `${s.address} ${(s.ports ?? []).map((/** @type {any} */ p) => `${p.name}=${p.port}/${enumWord(p.protocol).toLowerCase()}`).join(' ')}` : ''],
    ['PID', s.pid ? String(s.pid) : ''],
    ['Revision', String(s.revision ?? '')],
    ['Game session', s.gameSession ? resourceLink(s.gameSession, lastId(s.gameSession)) : ''],
    ['Counters', countersWords(s.counters)],
    ['Lists', listsWords(s.lists)],
    ['Annotations', Object.entries(s.annotations ?? {}).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k}=${v}`).join(', ')],
    ['Created', fmtTime(s.createTime)],
    ['Changed', `${fmtTime(s.updateTime)} (event #${s.sequence})`],
  ]);
}

/** @param {any} w an explanation */
function explain(w) {
  const state = enumWord(w.state);
  const words = evidenceWords(w.evidence);
  return [
    h('h2', { id: 'why' }, `Why it is ${state}`),
    h('p', { class: 'reason' }, w.reason ? [h('strong', {}, enumWord(w.reason)), ': ', reasonWords(w.reason)] : 'No reason recorded: it got here the ordinary way.'),
    words.length ? h('ul', { class: 'evidence' }, words.map((t) => h('li', {}, t))) : null,
    h('p', { class: 'summary-line' }, w.summary),
    (w.events ?? []).length ? h('p', { class: 'hint' }, `The events that led there (marked in the timeline): ` +
      w.events.map((/** @type {any} */ e) => e.type).join(' → ') + `, of ${w.historyLength} in its history.`) : null,
  ];
}

/** @param {any} s a StateAt */
function stateFacts(s) {
  const g = s.state;
  if (!g || Object.keys(g).length === 0) return h('p', { class: 'empty' }, 'It did not exist yet.');
  return h('div', {},
    h('p', {}, `After ${s.eventCount} event${s.eventCount === 1 ? '' : 's'}, the last #${s.sequence} at ${fmtTime(s.time)}:`),
    facts([
      ['State', badge(g.lifecycle)],
      ['Reason', enumWord(g.reason)],
      ['Connection', enumWord(g.connection)],
      ['Health', `${enumWord(g.health)}${g.missedPeriods ? `, ${g.missedPeriods} missed` : ''}`],
      ['Host', g.host],
      ['PID', g.pid ? String(g.pid) : ''],
      ['Game session', g.gameSession],
    ]),
    h('details', {}, h('summary', {}, 'Everything it held'), json(g)));
}
