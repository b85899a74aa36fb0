// Small helpers to build the page. Text always goes in as text nodes,
// never as HTML: nothing the API returns is parsed as markup.

/**
 * What an element can hold: nodes, text, nothing, or lists of those.
 * @typedef {Node | string | number | null | undefined | false | ChildList} Child
 * @typedef {Child[]} ChildList
 */

/**
 * Builds an element: h('a', {href: '#/'}, 'Overview'). Attributes named
 * on* are event listeners; class is className; a false, null or undefined
 * attribute or child is left out.
 * @param {string} tag
 * @param {Record<string, any>} [attrs]
 * @param {...Child} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

/**
 * Appends children (nested arrays allowed) to el.
 * @param {Node} el
 * @param {Child[]} children
 */
export function append(el, children) {
  for (const c of children) {
    if (Array.isArray(c)) append(el, c);
    else if (c !== null && c !== undefined && c !== false) el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/**
 * Replaces an element's children.
 * @param {Element} el
 * @param {...Child} children
 */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/**
 * The console's route of a resource name ("fleets/a/gameServers/b" →
 * "#/fleets/a/gameServers/b"); a host goes to the hosts page, a player
 * session to its history.
 * @param {string} name
 */
export function routeOf(name) {
  if (name.startsWith('hosts/')) return '#/hosts?host=' + encodeURIComponent(lastId(name));
  if (name.includes('/playerSessions/')) return '#/audit?q=' + encodeURIComponent(name);
  return '#/' + name;
}

/**
 * A link to a resource's page, showing its last id (or the given text).
 * @param {string} name
 * @param {string} [text]
 */
export function resourceLink(name, text) {
  if (!name) return '—';
  return h('a', { href: routeOf(name) }, text ?? name);
}

/** The last segment of a resource name. @param {string} name */
export function lastId(name) {
  return name ? name.slice(name.lastIndexOf('/') + 1) : '';
}

/** The prefixes of the stored events' enum values (proto/tether/events/v1). */
const enumPrefix = new RegExp('^(' + ['PLAYER_SESSION_END_REASON', 'GAME_SESSION_END_REASON', 'PLAYER_SESSION_STATUS', 'GAME_SESSION_STATUS',
  'HOST_STATUS', 'CONNECTION_STATE', 'HEALTH_STATE', 'ROLLOUT_STATE', 'DISCONNECT_KIND', 'LIFECYCLE', 'REASON', 'PROTOCOL', 'SCHEDULING'].join('|') + ')_');

/**
 * An enum value in words: the API's values ("PROCESS_EXITED") and the
 * event data's ("REASON_PROCESS_EXITED", "DISCONNECT_KIND_RESET") read
 * the same; an unset one is "".
 * @param {string | undefined} v
 */
export function enumWord(v) {
  if (!v || v.endsWith('_UNSPECIFIED')) return '';
  return v.replace(enumPrefix, '');
}

/** A state badge. @param {string} state */
export function badge(state) {
  const word = enumWord(state) || '—';
  return h('span', { class: 'badge s-' + word.toLowerCase() }, word);
}

const pad = (/** @type {number} */ n, w = 2) => String(n).padStart(w, '0');

/**
 * A time as the user's local "YYYY-MM-DD HH:MM:SS.mmm" (date left out
 * when it is today).
 * @param {string | Date | null | undefined} t
 */
export function fmtTime(t) {
  if (!t) return '—';
  const d = t instanceof Date ? t : new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  const today = new Date();
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

/**
 * A duration in words: "350 ms", "4.2 s", "3 min 5 s", "2 h 10 min", "3 d".
 * @param {number} ms
 */
export function fmtDuration(ms) {
  const a = Math.abs(ms);
  if (a < 1000) return `${Math.round(a)} ms`;
  if (a < 10_000) return `${(a / 1000).toFixed(1)} s`;
  if (a < 60_000) return `${Math.round(a / 1000)} s`;
  if (a < 3_600_000) return `${Math.floor(a / 60_000)} min ${Math.round((a % 60_000) / 1000)} s`;
  if (a < 86_400_000) return `${Math.floor(a / 3_600_000)} h ${Math.round((a % 3_600_000) / 60_000)} min`;
  return `${Math.round(a / 86_400_000)} d`;
}

/**
 * How long ago a time was, "4.2 s ago" ("—" without a time).
 * @param {string | null | undefined} t
 * @param {number} [now]
 */
export function ago(t, now = Date.now()) {
  if (!t) return '—';
  const ms = now - new Date(t).getTime();
  return ms < 0 ? `in ${fmtDuration(-ms)}` : `${fmtDuration(ms)} ago`;
}

/**
 * A small static table (for tens or hundreds of rows; the fleet page's
 * servers use VirtualTable).
 * @template T
 * @param {{caption?: string, columns: {title: string, cell: (row: T) => Child, class?: string}[], rows: T[], empty?: string}} spec
 */
export function table({ caption, columns, rows, empty = 'None.' }) {
  if (rows.length === 0) return h('p', { class: 'empty' }, caption ? `${caption}: ${empty}` : empty);
  return h('table', {},
    caption ? h('caption', {}, caption) : null,
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col', class: c.class }, c.title)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, columns.map((c) => h('td', { class: c.class }, c.cell(r)))))));
}

/**
 * A definition list from [term, value] pairs, leaving out empty values.
 * @param {[string, Child][]} pairs
 */
export function facts(pairs) {
  return h('dl', { class: 'facts' },
    pairs.filter(([, v]) => v !== '' && v !== null && v !== undefined && v !== false)
      .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

/** Pretty JSON, in a pre. @param {unknown} v */
export function json(v) {
  return h('pre', { class: 'json' }, JSON.stringify(v, null, 2));
}
