// Reasons, evidence and events in words, for the game server page.

import { enumWord, fmtDuration, fmtTime } from './dom.js';

/** What each termination reason means (proto tether.events.v1.Reason). */
export const reasons = {
  HEALTH_CHECK_FAILED: 'Its heartbeats stopped: it missed the fleet\'s failure threshold of health periods.',
  PROCESS_EXITED: 'Its process exited after it was ready.',
  PROCESS_CRASHED_BEFORE_READY: 'Its process kept exiting before it was ready, and the restarts ran out.',
  PROCESS_START_FAILED: 'Its host agent could not launch the process at all.',
  SDK_DISCONNECT_GRACE_EXPIRED: 'Its SDK connection stayed closed past the grace window, with no heartbeat since.',
  HOST_LOST: 'Its host stopped beating its heartbeat for too long and was judged lost.',
  HOST_SHUTDOWN: 'Its host agent was stopped and took its game servers with it.',
  AGENT_RESTARTED: 'Its host agent restarted and did not take it back.',
  HOST_DRAINING: 'Its host is draining: it was replaced on another host first.',
  FLEET_SCALED_DOWN: 'Its fleet was scaled down.',
  FLEET_UPDATED: 'Its fleet changed, and a server of the new revision replaced it.',
  FLEET_DELETED: 'Its fleet was deleted.',
  SHUTDOWN_REQUESTED_BY_GAME: 'The game asked to shut down, through the SDK.',
  SHUTDOWN_REQUESTED_BY_API: 'An operator or a client asked for its shutdown, through the API.',
  READY_TIMEOUT: 'Its process did not call Ready in time.',
};

/**
 * The sentence for a reason.
 * @param {string} reason
 */
export function reasonWords(reason) {
  const r = enumWord(reason);
  return /** @type {Record<string, string>} */ (reasons)[r] ?? (r ? `Reason: ${r}.` : '');
}

/**
 * Evidence (a game server's, as JSON) in sentences, one per fact.
 * @param {Record<string, any> | null | undefined} ev
 * @returns {string[]}
 */
export function evidenceWords(ev) {
  if (!ev) return [];
  const out = [];
  if (ev.signal) out.push(`The process was ended by a signal: ${ev.signal}.`);
  if (ev.exitCode !== undefined && ev.exitCode !== null) out.push(`The process exited with code ${ev.exitCode}.`);
  if (ev.missedPeriods) {
    out.push(`It missed ${ev.missedPeriods} heartbeat period${ev.missedPeriods === 1 ? '' : 's'}` +
      (ev.periodSeconds ? ` of ${ev.periodSeconds} s` : '') +
      (ev.failureThreshold ? `; the threshold is ${ev.failureThreshold}.` : '.'));
  }
  if (ev.lastHeartbeatTime) out.push(`Its last heartbeat was at ${fmtTime(ev.lastHeartbeatTime)}.`);
  if (ev.requestedBy) out.push(`Requested by ${ev.requestedBy}.`);
  if (ev.startAttempts) out.push(`Its process was started ${ev.startAttempts === 1 ? 'once' : `${ev.startAttempts} times`}.`);
  const history = /** @type {any[]} */ (ev.connectionHistory ?? []);
  if (history.length) {
    out.push('SDK connection: ' + history.map((c) =>
      `${c.connected ? 'connected' : `disconnected (${enumWord(c.kind).toLowerCase().replaceAll('_', ' ') || 'closed'})`} at ${fmtTime(c.time)}`,
    ).join(', then ') + '.');
  }
  if (ev.detail) out.push(`Detail: ${ev.detail}`);
  const known = new Set(['signal', 'exitCode', 'missedPeriods', 'periodSeconds', 'failureThreshold', 'lastHeartbeatTime',
    'requestedBy', 'startAttempts', 'connectionHistory', 'detail']);
  for (const [k, v] of Object.entries(ev)) {
    if (!known.has(k) && v !== '' && v !== null && v !== 0 && v !== false) out.push(`${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}.`);
  }
  return out;
}

/**
 * An event's data in a line: its fields as "key=value", enums in words.
 * @param {Record<string, any> | undefined} data
 */
export function dataLine(data) {
  if (!data) return '';
  return Object.entries(data).map(([k, v]) => {
    if (typeof v === 'string') return `${k}=${/^[A-Z0-9_]+$/.test(v) ? enumWord(v) : v}`;
    return `${k}=${JSON.stringify(v)}`;
  }).join('  ');
}

/**
 * The offset of a time from another, "+1.2 s" or "−350 ms".
 * @param {string} t
 * @param {string} from
 */
export function offset(t, from) {
  const ms = new Date(t).getTime() - new Date(from).getTime();
  return (ms < 0 ? '−' : '+') + fmtDuration(ms);
}

/**
 * A server's counters in words: "rooms 3 of 10, seats 0 of 2" ("" for none).
 * int64 values are JSON strings, and protojson leaves out zeros.
 * @param {Record<string, any> | undefined} counters
 */
export function countersWords(counters) {
  return Object.entries(counters ?? {}).sort(([a], [b]) => a.localeCompare(b))
    .map(([name, c]) => `${name} ${c.count ?? 0} of ${c.capacity ?? 0}`).join(', ');
}

/**
 * A server's lists in words: "players 2 of 100: ann, bob" ("" for none).
 * @param {Record<string, any> | undefined} lists
 */
export function listsWords(lists) {
  return Object.entries(lists ?? {}).sort(([a], [b]) => a.localeCompare(b)).map(([name, l]) => {
    const values = /** @type {string[]} */ (l.values ?? []);
    return `${name} ${values.length} of ${l.capacity ?? 0}${values.length ? `: ${values.join(', ')}` : ''}`;
  }).join('; ');
}

/**
 * A CounterChanged or ListChanged in words, as the API's explain says it:
 * "counter rooms 3 of 10 (+1)", "list players +bob -ann (2 of 100)"; ""
 * for any other event.
 * @param {string} type
 * @param {Record<string, any> | undefined} data
 */
export function changeWords(type, data) {
  if (!data) return '';
  if (type === 'CounterChanged') {
    const diff = Number(data.countDiff ?? 0);
    return `counter ${data.name} ${data.count ?? 0} of ${data.capacity ?? 0}${diff ? ` (${diff > 0 ? '+' : ''}${diff})` : ''}`;
  }
  if (type === 'ListChanged') {
    const added = /** @type {string[]} */ (data.added ?? []).map((v) => ` +${v}`).join('');
    const removed = /** @type {string[]} */ (data.removed ?? []).map((v) => ` -${v}`).join('');
    return `list ${data.name}${added}${removed} (${(data.values ?? []).length} of ${data.capacity ?? 0})`;
  }
  return '';
}
