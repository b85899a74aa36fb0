// The console: a router over the page's hash (#/fleets/demo, …), the
// sign-in box, and the live indicator. Each page is a module with a
// render(ctx) function; leaving a page aborts ctx.signal, which ends its
// requests and its watch.

import { ApiError, apiKey, onUnauthorized } from './api.js';
import { h, replace } from './dom.js';
import * as audit from './pages/audit.js';
import * as fleet from './pages/fleet.js';
import * as gameServer from './pages/gameserver.js';
import * as hosts from './pages/hosts.js';
import * as overview from './pages/overview.js';
import * as sessions from './pages/sessions.js';

/**
 * @typedef {{main: HTMLElement, params: Record<string, string>, query: URLSearchParams,
 *   signal: AbortSignal, live: (text: string, state?: string) => void}} PageContext
 * @typedef {{render: (ctx: PageContext) => Promise<void>}} Page
 */

/** @type {[RegExp, Page, string[]][]} pattern, page, names of its groups */
const routes = [
  [/^$/, overview, []],
  [/^hosts$/, hosts, []],
  [/^gameSessions$/, sessions, []],
  [/^gameSessions\/([^/]+)$/, sessions, ['session']],
  [/^audit$/, audit, []],
  [/^fleets\/([^/]+)$/, fleet, ['fleet']],
  [/^fleets\/([^/]+)\/gameServers\/([^/]+)$/, gameServer, ['fleet', 'gameServer']],
];

const main = /** @type {HTMLElement} */ (document.getElementById('main'));
const liveEl = /** @type {HTMLElement} */ (document.getElementById('live'));
const signInButton = /** @type {HTMLButtonElement} */ (document.getElementById('signin'));
const dialog = /** @type {HTMLDialogElement} */ (document.getElementById('auth'));
const form = /** @type {HTMLFormElement} */ (document.getElementById('auth-form'));
const keyInput = /** @type {HTMLInputElement} */ (document.getElementById('auth-key'));
const why = /** @type {HTMLElement} */ (document.getElementById('auth-why'));

/** @type {AbortController | null} */
let current = null;

/** Renders the page of the current hash, ending the previous page's work. */
async function route() {
  current?.abort();
  const ctl = new AbortController();
  current = ctl;
  const [path, q = ''] = location.hash.replace(/^#\/?/, '').split('?', 2);
  const found = routes.map(([re, page, names]) => {
    const m = re.exec(decodeURIComponent(path));
    return m && { page, params: Object.fromEntries(names.map((n, i) => [n, m[i + 1]])) };
  }).find(Boolean);
  for (const a of document.querySelectorAll('nav a')) {
    const here = a.getAttribute('href') === '#/' + path.split('/')[0] || (path === '' && a.getAttribute('href') === '#/');
    if (here) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  replace(main);
  live('');
  main.classList.remove('fill');
  if (!found) {
    replace(main, h('h1', {}, 'Not found'), h('p', {}, 'No page here. ', h('a', { href: '#/' }, 'Overview')));
    return;
  }
  try {
    await found.page.render({ main, params: found.params, query: new URLSearchParams(q), signal: ctl.signal, live });
  } catch (err) {
    if (ctl.signal.aborted) return;
    showError(err);
  }
}

/**
 * Shows an error in place of the page.
 * @param {unknown} err
 */
function showError(err) {
  const e = err instanceof ApiError ? err : null;
  const msg = err instanceof Error ? err.message : String(err);
  replace(main, h('div', { class: 'error', role: 'alert' },
    h('h1', {}, e?.status === 401 ? 'Sign in to see this page' : e?.status === 403 ? 'Not allowed' : 'Something went wrong'),
    h('p', {}, msg),
    e?.status === 403 ? h('p', {}, 'The API key you signed in with has a role that may not read this. Sign in with another key.') : null,
    h('p', {}, h('button', { type: 'button', onclick: () => route() }, 'Try again'))));
}

/**
 * Sets the live indicator in the header (a status region).
 * @param {string} text
 * @param {string} [state] "live", "retrying" or "stopped"
 */
function live(text, state = '') {
  liveEl.textContent = text;
  liveEl.className = state;
}

/** Opens the sign-in box. @param {string} reason */
function askForKey(reason) {
  why.textContent = reason;
  if (dialog.open) return; // several calls may be refused at once
  keyInput.value = '';
  dialog.showModal();
  keyInput.focus();
}

function showSignedIn() {
  signInButton.textContent = apiKey.get() ? 'Sign out' : 'Sign in';
}

onUnauthorized((err) => askForKey(apiKey.get()
  ? `The API refused the key you signed in with: ${err.message}`
  : 'The API asks for an API key.'));

form.addEventListener('submit', (e) => {
  e.preventDefault();
  const key = keyInput.value.trim();
  if (!key) return;
  apiKey.set(key);
  dialog.close();
  showSignedIn();
  route();
});
document.getElementById('auth-cancel')?.addEventListener('click', () => dialog.close());
signInButton.addEventListener('click', () => {
  if (apiKey.get()) {
    apiKey.clear();
    showSignedIn();
    route();
  } else {
    askForKey('Sign in with an API key.');
  }
});

window.addEventListener('hashchange', () => {
  route();
  main.focus({ preventScroll: true });
});
showSignedIn();
route();
