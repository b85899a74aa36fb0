// The REST API, from the browser: reads with the signed-in API key, every
// page of a list, and the live event watch.

const keyItem = 'tether.apiKey';

/** The API key this tab signed in with ("" for none), kept in sessionStorage. */
export const apiKey = {
  get: () => sessionStorage.getItem(keyItem) ?? '',
  /** @param {string} key */
  set: (key) => sessionStorage.setItem(keyItem, key),
  clear: () => sessionStorage.removeItem(keyItem),
};

/** The largest page the API serves. */
export const maxPageSize = 1000;

/** An error answer of the API (a google.rpc.Status), or a network failure (status 0). */
export class ApiError extends Error {
  /**
   * @param {number} status HTTP status
   * @param {string} message
   * @param {string} [reason] ErrorInfo reason, e.g. "PROJECTION_BEHIND"
   * @param {number} [retryAfter] seconds, from Retry-After
   */
  constructor(status, message, reason = '', retryAfter = 0) {
    super(message);
    this.status = status;
    this.reason = reason;
    this.retryAfter = retryAfter;
  }
}

/** @type {(err: ApiError) => void} */
let unauthorized = () => {};

/**
 * Sets what happens when the API answers 401: the console asks for a key.
 * @param {(err: ApiError) => void} fn
 */
export function onUnauthorized(fn) {
  unauthorized = fn;
}

/**
 * The URL of an API path ("fleets/a", "events:watch") with query
 * parameters; an array value repeats its parameter, an empty or zero one is
 * left out.
 * @param {string} path
 * @param {Record<string, string | number | string[] | undefined>} [params]
 */
export function apiURL(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    for (const one of Array.isArray(v) ? v : [v]) {
      if (one !== undefined && one !== '' && one !== 0) q.append(k, String(one));
    }
  }
  const s = q.toString();
  return '/v1/' + path + (s ? '?' + s : '');
}

/** @returns {Record<string, string>} */
function headers() {
  const key = apiKey.get();
  return key ? { Authorization: 'Bearer ' + key } : {};
}

/**
 * The ApiError of a response that is not OK.
 * @param {Response} res
 */
async function errorOf(res) {
  let message = res.statusText || `HTTP ${res.status}`;
  let reason = '';
  try {
    const body = await res.json();
    message = body.message || message;
    reason = body.details?.find((/** @type {any} */ d) => d.reason)?.reason ?? '';
  } catch {
    // not the API's JSON (a proxy's page): keep the status text
  }
  const err = new ApiError(res.status, message, reason, Number(res.headers.get('Retry-After')) || 0);
  if (res.status === 401) unauthorized(err);
  return err;
}

/**
 * Sends a request and returns its response, or throws an ApiError.
 * @param {string} url
 * @param {AbortSignal} [signal]
 */
async function send(url, signal) {
  let res;
  try {
    res = await fetch(url, { headers: headers(), signal, cache: 'no-store' });
  } catch (e) {
    if (signal?.aborted) throw e;
    throw new ApiError(0, `the API did not answer: ${e instanceof Error ? e.message : e}`);
  }
  if (!res.ok) throw await errorOf(res);
  return res;
}

/**
 * GETs an API path and returns its JSON.
 * @param {string} path
 * @param {Record<string, any>} [params]
 * @param {AbortSignal} [signal]
 * @returns {Promise<any>}
 */
export async function get(path, params, signal) {
  return (await send(apiURL(path, params), signal)).json();
}

/**
 * GETs every page of a list and returns its items (field names the list
 * in the response, e.g. "gameServers").
 * @param {string} path
 * @param {string} field
 * @param {Record<string, any>} [params]
 * @param {AbortSignal} [signal]
 * @returns {Promise<any[]>}
 */
export async function listAll(path, field, params = {}, signal) {
  return (await listPages(path, field, params, signal)).items;
}

/**
 * GETs every page of a list: its items, and its first page (for the
 * figures a list gives there, e.g. endedCount).
 * @param {string} path
 * @param {string} field
 * @param {Record<string, any>} params
 * @param {AbortSignal} [signal]
 * @returns {Promise<{items: any[], first: any}>}
 */
async function listPages(path, field, params, signal) {
  const items = [];
  let first = null;
  let pageToken = '';
  do {
    const page = await get(path, { ...params, pageSize: maxPageSize, pageToken }, signal);
    first ??= page;
    items.push(...(page[field] ?? []));
    pageToken = page.nextPageToken ?? '';
  } while (pageToken);
  return { items, first };
}

/**
 * Lists the live game servers under path ("fleets/f/gameServers", or
 * "fleets/-/gameServers"): those not yet TERMINATED, with params.filter's
 * terms too, and how many ended ones the list left out.
 * @param {string} path
 * @param {Record<string, any>} [params]
 * @param {AbortSignal} [signal]
 * @returns {Promise<{servers: any[], ended: number}>}
 */
export async function listLive(path, params = {}, signal) {
  const filter = params.filter ? `${params.filter} AND ended=false` : 'ended=false';
  const { items, first } = await listPages(path, 'gameServers', { ...params, filter }, signal);
  return { servers: items, ended: Number(first?.endedCount ?? 0) };
}

/**
 * Resolves after ms, or rejects when signal aborts.
 * @param {number} ms
 * @param {AbortSignal} signal
 */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); reject(signal.reason); }, { once: true });
  });
}

/**
 * The lines of a response body, as they arrive.
 * @param {ReadableStream<Uint8Array>} body
 */
async function* lines(body) {
  const reader = body.getReader();
  const text = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += text.decode(value, { stream: true });
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (line) yield line;
      }
    }
    if (buf.trim()) yield buf.trim();
  } finally {
    reader.cancel().catch(() => {});
  }
}

/**
 * @typedef {{sequence: string, type: string, aggregate: string, time: string,
 *   producer: string, actor: string, data: Record<string, any>}} ApiEvent
 * @typedef {{state: 'open', after: number}
 *   | {state: 'retrying', after: number, error: string, delay: number}
 *   | {state: 'stopped', error: string}} WatchStatus
 */

/** Backoff between watch attempts, in ms: from first, doubling up to max. */
export const watchBackoff = { first: 500, max: 15_000 };

/**
 * Reads one GET /v1/events:watch stream to its end, calling onEvent with
 * each event; it throws an ApiError when the stream fails. The gateway
 * streams newline-delimited JSON: {"result": event} per line, or
 * {"error": status} as the last line.
 * @param {Record<string, any>} params
 * @param {AbortSignal} signal
 * @param {(e: ApiEvent) => void} onEvent
 * @param {(after: number) => void} [onOpen] called with where the watch starts
 */
export async function streamEvents(params, signal, onEvent, onOpen = () => {}) {
  const res = await send(apiURL('events:watch', params), signal);
  onOpen(Number(res.headers.get('Grpc-Metadata-Tether-After-Sequence')) || 0);
  if (!res.body) throw new ApiError(0, 'the watch has no body');
  for await (const line of lines(res.body)) {
    const msg = JSON.parse(line);
    if (msg.error) {
      const reason = msg.error.details?.find((/** @type {any} */ d) => d.reason)?.reason ?? '';
      throw new ApiError(0, msg.error.message || 'the watch failed', reason);
    }
    onEvent(/** @type {ApiEvent} */ (msg.result));
  }
}

/**
 * Follows GET /v1/events:watch, calling onEvent with each event as it is
 * stored, until signal aborts. It starts after sequence after (0: with the
 * events stored from now on). When the stream fails or ends it connects
 * again after a backoff (honouring Retry-After), resuming after the last
 * sequence seen, so no event is missed or repeated. A 401 or 403 stops it
 * (the console asks for a key; the page starts again once one is given).
 * @param {{params?: Record<string, any>, after?: number, signal: AbortSignal,
 *   onEvent: (e: ApiEvent) => void, onStatus?: (s: WatchStatus) => void}} opts
 * @returns {Promise<void>} settles when the watch stops
 */
export async function watch({ params = {}, after = 0, signal, onEvent, onStatus = () => {} }) {
  let last = after;
  let delay = 0;
  while (!signal.aborted) {
    try {
      // The response's headers, and so onOpen, come with the first event
      // (the gateway writes them then); a watch from "now" learns there
      // where it started.
      onStatus({ state: 'open', after: last });
      await streamEvents({ ...params, afterSequence: last }, signal, (ev) => {
        last = Number(ev.sequence);
        delay = 0;
        onEvent(ev);
      }, (from) => {
        if (last === 0 && from > 0) last = from;
      });
      throw new ApiError(0, 'the watch ended');
    } catch (e) {
      if (signal.aborted) return;
      const err = e instanceof ApiError ? e : new ApiError(0, e instanceof Error ? e.message : String(e));
      if (err.status === 401 || err.status === 403) {
        onStatus({ state: 'stopped', error: err.message });
        return;
      }
      delay = Math.min(watchBackoff.max, delay ? delay * 2 : watchBackoff.first);
      const wait = Math.max(delay * (0.8 + 0.4 * Math.random()), err.retryAfter * 1000);
      onStatus({ state: 'retrying', after: last, error: err.message, delay: wait });
      try {
        await sleep(wait, signal);
      } catch {
        return;
      }
    }
  }
}

/**
 * Refetches resources named by events, a few at a time: each name once
 * however many events name it meanwhile, with the highest sequence seen
 * (GET …?minSequence= waits until the views have applied it). A name
 * whose fetch fails for a passing reason (the views behind, the network)
 * is tried again a second later. When more than maxPending names wait,
 * it gives up on them and calls onOverflow (the page reloads its list).
 */
export class Refetcher {
  /**
   * @param {{fetch: (name: string, seq: number) => Promise<void>, onOverflow: (seq: number) => void,
   *   signal: AbortSignal, concurrency?: number, maxPending?: number}} opts
   */
  constructor({ fetch, onOverflow, signal, concurrency = 4, maxPending = 500 }) {
    this.fetch = fetch;
    this.onOverflow = onOverflow;
    this.signal = signal;
    this.concurrency = concurrency;
    this.maxPending = maxPending;
    /** @type {Map<string, number>} name → sequence to wait for */
    this.pending = new Map();
    /** @type {Set<string>} */
    this.inflight = new Set();
  }

  /**
   * Asks for name to be fetched at sequence seq or later.
   * @param {string} name
   * @param {number} seq
   */
  add(name, seq) {
    this.pending.set(name, Math.max(seq, this.pending.get(name) ?? 0));
    if (this.pending.size > this.maxPending) {
      const top = Math.max(...this.pending.values());
      this.pending.clear();
      this.onOverflow(top);
      return;
    }
    this.pump();
  }

  pump() {
    for (const [name, seq] of this.pending) {
      if (this.inflight.size >= this.concurrency || this.signal.aborted) return;
      if (this.inflight.has(name)) continue; // after the fetch in flight
      this.pending.delete(name);
      this.inflight.add(name);
      this.fetch(name, seq)
        .catch(async (err) => {
          if (this.signal.aborted || (err instanceof ApiError && (err.status === 401 || err.status === 403 || err.status === 404))) return;
          await sleep(1000, this.signal).catch(() => {});
          if (!this.signal.aborted) this.pending.set(name, Math.max(seq, this.pending.get(name) ?? 0));
        })
        .finally(() => {
          this.inflight.delete(name);
          this.pump();
        });
    }
  }
}
