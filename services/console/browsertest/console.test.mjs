// The console's browser test: playwright-core drives the chromium on the
// machine through a running Tether. services/dev/console_browser_test.go
// starts `tether dev`, runs this script and answers its questions: the
// script writes "ASK <what>" on stdout and reads the answer, one line on
// stdin, once the Go test has done it (created a fleet, killed a server,
// cut the browser's connections to the API through its proxy). Every wait
// is bounded; the script exits 1 with the reason on a failure.
//
// Environment:
//   TETHER_CONSOLE_URL   the console, http://127.0.0.1:PORT/ui/
//   TETHER_API_KEY       the key to sign in with
//   TETHER_CHROMIUM      the chromium binary
//   TETHER_NODE_MODULES  a node_modules holding playwright-core (.tools/node_modules)
//   TETHER_SCREENSHOTS   a directory for console-fleet.png, console-timeline.png, console-charts.png
//                        and console-overview.png (optional)

import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const env = (/** @type {string} */ name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const consoleURL = env('TETHER_CONSOLE_URL');
const apiKey = env('TETHER_API_KEY');
const { chromium } = createRequire(path.join(env('TETHER_NODE_MODULES'), 'noop.js'))('playwright-core');
const shots = process.env.TETHER_SCREENSHOTS ?? '';

/** How long a step may take: generous, for a loaded machine and the race detector. */
const step = 30_000;

const answers = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/**
 * Asks the Go test to do something and returns its answer.
 * @param {string} what
 */
async function ask(what) {
  process.stdout.write(`ASK ${what}\n`);
  let timer;
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no answer to "${what}" in ${step} ms`)), step); });
  try {
    const { value, done } = await Promise.race([answers.next(), late]);
    if (done) throw new Error(`stdin closed before an answer to "${what}"`);
    return value.trim();
  } finally {
    clearTimeout(timer);
  }
}

/** @param {string} msg */
const log = (msg) => process.stdout.write(`# ${msg}\n`);

/**
 * Fails unless cond holds.
 * @param {unknown} cond
 * @param {string} msg
 */
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

const browser = await chromium.launch({
  executablePath: env('TETHER_CHROMIUM'),
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  timeout: step,
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1366, height: 768 } });
  page.setDefaultTimeout(step);
  /** @type {string[]} */
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  /** @type {string[]} GETs the page makes, as paths with their queries */
  const requests = [];
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith('/v1/')) requests.push(decodeURIComponent(u.pathname + u.search));
  });

  // Signing in: the API answers 401 without a key, and the console asks.
  await page.goto(consoleURL);
  await page.locator('#auth[open]').waitFor();
  await page.fill('#auth-key', apiKey);
  await page.press('#auth-key', 'Enter');
  await page.getByRole('heading', { name: 'Fleets' }).waitFor();
  log('signed in; the overview shows');

  // A fleet created through the API appears on the overview, live.
  const [fleet, count] = (await ask('create-fleet')).split(' ');
  const replicas = Number(count);
  const fleetLink = page.locator('main table a', { hasText: new RegExp(`^${fleet}$`) });
  await fleetLink.waitFor();
  log(`fleet ${fleet} appeared on the overview`);

  // Its page lists its servers, READY.
  await fleetLink.click();
  await page.waitForURL((u) => u.hash === `#/fleets/${fleet}`);
  await page.waitForFunction((n) => document.querySelectorAll('[role=row][data-key] [data-col=state] .s-ready').length === n, replicas);
  log(`fleet page shows ${replicas} READY servers`);

  // A server killed with kill -9 ends on this page without a reload, and
  // without listing the fleet again: the watch's event makes the page GET
  // that one server. Ended servers are hidden, and counted, until "Show
  // the N ended" is ticked; then it shows TERMINATED (PROCESS_EXITED).
  const marker = `no-reload-${Date.now()}`;
  await page.evaluate((m) => { /** @type {any} */ (window).tetherTestMarker = m; }, marker);
  const before = requests.length;
  const victim = await ask(`kill ${fleet}`);
  const victimRow = page.locator(`[role=grid] [role=row][data-key="${victim}"]`);
  await page.locator('#gs-ended-count', { hasText: /^1$/ }).waitFor();
  await victimRow.waitFor({ state: 'detached' });
  check(await page.evaluate(() => /** @type {any} */ (window).tetherTestMarker) === marker, 'the page was reloaded');
  const during = requests.slice(before);
  check(!during.some((r) => /\/gameServers\?/.test(r) || r.endsWith('/gameServers')), `the fleet was listed again: ${during.join(', ')}`);
  check(during.some((r) => r.startsWith(`/v1/${victim}?`) || r === `/v1/${victim}`), `no GET of ${victim}: ${during.join(', ')}`);
  await page.locator('#gs-ended').check();
  await victimRow.locator('[data-col=state]', { hasText: /^TERMINATED$/ }).waitFor();
  await victimRow.locator('[data-col=reason]', { hasText: /^PROCESS_EXITED$/ }).waitFor();
  log(`${victim} left the table, counted as ended, without a reload; shown with the ended: TERMINATED, PROCESS_EXITED`);

  // Its replacement joins the table, READY, live too.
  await page.waitForFunction((n) => document.querySelectorAll('[role=row][data-key] [data-col=state] .s-ready').length === n, replicas);
  log('its replacement shows READY');

  // A network blink (the Go test cuts the connections between the
  // browser and the API): the watch fails, connects again after a backoff,
  // and resumes after the last event it saw, so a server killed while it
  // was cut off still turns TERMINATED here.
  const watchAfter = () => requests.filter((r) => r.startsWith('/v1/events:watch'))
    .map((r) => Number(new URLSearchParams(r.split('?')[1]).get('afterSequence') ?? 0));
  const firstAfter = watchAfter()[0];
  await ask('cut');
  await page.locator('#live.retrying').waitFor();
  const victim2 = await ask(`kill-and-wait ${fleet}`);
  await ask('restore');
  const victim2Row = page.locator(`[role=grid] [role=row][data-key="${victim2}"]`);
  await victim2Row.locator('[data-col=state]', { hasText: /^TERMINATED$/ }).waitFor();
  await victim2Row.locator('[data-col=reason]', { hasText: /^PROCESS_EXITED$/ }).waitFor();
  const resumedAfter = watchAfter().at(-1) ?? 0;
  check(resumedAfter > firstAfter, `the watch started again after sequence ${resumedAfter}, not after the events it saw (first after ${firstAfter})`);
  check(await page.evaluate(() => /** @type {any} */ (window).tetherTestMarker) === marker, 'the page was reloaded');
  await page.locator('#live.live').waitFor();
  log(`after a network blink the watch resumed after #${resumedAfter}; ${victim2}, killed meanwhile, shows TERMINATED`);

  await page.waitForFunction((n) => document.querySelectorAll('[role=row][data-key] [data-col=state] .s-ready').length === n, replicas);
  if (shots) {
    await page.setViewportSize({ width: 1366, height: 520 }); // the table's few rows, without a screen of blank
    await page.screenshot({ path: path.join(shots, 'console-fleet.png') });
    await page.setViewportSize({ width: 1366, height: 768 });
  }

  // The last hour's charts: after an allocation, the fleet page (loaded
  // again) and the overview draw them, with the counts of what the test
  // did: servers READY and ALLOCATED now, one allocation, every server
  // started, the two killed ended PROCESS_EXITED, and the hosts' slots.
  const want = JSON.parse(await ask(`allocate ${fleet}`));
  check(want.Fleet.Allocated === 1 && want.Fleet.Terminated.PROCESS_EXITED === 2, `the test's own counts: ${JSON.stringify(want)}`);
  /**
   * Waits for the charts and checks them against counts.
   * @param {any} c
   * @param {string} where
   */
  const checkCharts = async (c, where) => {
    await page.locator('.charts [data-chart=churn] svg').waitFor();
    const got = await page.evaluate(() => {
      const attr = (/** @type {string} */ sel, /** @type {string} */ a) => document.querySelector(sel)?.getAttribute(a) ?? null;
      /** @type {Record<string, number>} */
      const ended = {};
      for (const g of document.querySelectorAll('.charts [data-chart=churn] g.series')) {
        const name = g.getAttribute('data-series') ?? '';
        if (name !== 'started') ended[name] = Number(g.getAttribute('data-total'));
      }
      return {
        Ready: Number(attr('.charts path[data-series=READY]', 'data-now')),
        Allocated: Number(attr('.charts path[data-series=ALLOCATED]', 'data-now')),
        Reserved: Number(attr('.charts path[data-series=RESERVED]', 'data-now')),
        allocations: Number(attr('.charts [data-chart=allocations] g.series', 'data-total')),
        bars: document.querySelectorAll('.charts [data-chart=allocations] rect').length,
        Started: Number(attr('.charts [data-chart=churn] g[data-series=started]', 'data-total')),
        Terminated: ended,
        truncated: attr('.charts', 'data-truncated'),
        labelled: [...document.querySelectorAll('.charts svg')].every((s) => s.getAttribute('role') === 'img' && s.getAttribute('aria-label') && s.querySelector('title')),
      };
    });
    const expect = { Ready: c.Ready, Allocated: c.Allocated, Reserved: c.Reserved, allocations: c.Allocated, bars: 1,
      Started: c.Started, Terminated: c.Terminated, truncated: 'false', labelled: true };
    check(JSON.stringify(got) === JSON.stringify(expect), `${where}'s charts show ${JSON.stringify(got)}, want ${JSON.stringify(expect)}`);
  };
  await page.reload();
  await page.waitForFunction((n) => document.querySelectorAll('[role=row][data-key] [data-col=state] .s-ready, [role=row][data-key] [data-col=state] .s-allocated').length === n,
    want.Fleet.Live);
  await checkCharts(want.Fleet, 'the fleet page');
  log(`the fleet page's charts: ${want.Fleet.Ready} READY, ${want.Fleet.Allocated} ALLOCATED, 1 allocation, ${want.Fleet.Started} started, 2 PROCESS_EXITED`);
  if (shots) await page.screenshot({ path: path.join(shots, 'console-charts.png') });
  await page.goto(consoleURL + '#/');
  await checkCharts(want.All, 'the overview');
  const grid = await page.evaluate(() => {
    const fig = document.querySelector('[data-chart=hosts]');
    return {
      used: Number(fig?.getAttribute('data-used')), capacity: Number(fig?.getAttribute('data-capacity')),
      cellsUsed: document.querySelectorAll('[data-chart=hosts] rect.used').length,
      cells: document.querySelectorAll('[data-chart=hosts] rect').length,
      hosts: document.querySelectorAll('[data-chart=hosts] g.host').length,
    };
  });
  const gridWant = { used: want.Used, capacity: want.Capacity, cellsUsed: want.Used, cells: want.Capacity, hosts: 2 };
  check(JSON.stringify(grid) === JSON.stringify(gridWant), `the hosts' grid shows ${JSON.stringify(grid)}, want ${JSON.stringify(gridWant)}`);
  log(`the overview's charts, and its grid of ${want.Used} of ${want.Capacity} slots used`);
  if (shots) {
    await page.setViewportSize({ width: 1366, height: 1000 });
    await page.screenshot({ path: path.join(shots, 'console-overview.png') });
    await page.setViewportSize({ width: 1366, height: 768 });
  }
  await page.goto(consoleURL + `#/fleets/${fleet}`);
  await page.locator('#gs-ended-count', { hasText: /^2$/ }).waitFor(); // the two killed, not listed
  check(await page.locator(`[role=grid] [role=row][data-key="${victim}"]`).count() === 0, 'an ended server is listed before "Show the ended" is ticked');
  await page.locator('#gs-ended').check();
  await page.locator(`[role=grid] [role=row][data-key="${victim}"]`).waitFor();

  // The keyboard reaches the first victim's row and opens its page.
  const table = page.locator('[role=grid]');
  await table.focus();
  await page.keyboard.press('Home');
  const rowCount = Number(await table.getAttribute('aria-rowcount')) - 1; // less the header row
  for (let i = 0; i < rowCount; i++) {
    const active = await table.getAttribute('aria-activedescendant');
    if (active && await page.locator(`#${active}`).getAttribute('data-key') === victim) break;
    await page.keyboard.press('ArrowDown');
  }
  await page.keyboard.press('Enter');
  await page.waitForURL((u) => u.hash === `#/${victim}`);

  // Its timeline shows the events, and the explanation says why.
  const timeline = page.locator('ol.timeline');
  for (const type of ['GameServerScheduled', 'ProcessStarted', 'GameServerReady', 'ProcessExited', 'GameServerTerminated']) {
    await timeline.locator(`li[data-type=${type}]`).first().waitFor();
  }
  await timeline.locator('li.cause[data-type=GameServerTerminated]').waitFor();
  const why = page.locator('section.why');
  await why.getByRole('heading', { name: 'Why it is TERMINATED' }).waitFor();
  await why.locator('.reason', { hasText: 'PROCESS_EXITED' }).waitFor();
  await why.locator('.evidence li', { hasText: 'killed' }).waitFor();
  log('its timeline shows its events and the explanation');

  // Its state after an event, from :stateAt.
  await timeline.locator('li[data-type=ProcessStarted]').getByRole('button', { name: 'state after' }).click();
  await page.locator('section.side .badge', { hasText: /^STARTING$/ }).waitFor();
  log('state after ProcessStarted: STARTING');
  if (shots) {
    await page.setViewportSize({ width: 1366, height: 1080 }); // the whole timeline (main scrolls, not the page)
    await page.screenshot({ path: path.join(shots, 'console-timeline.png') });
  }

  check(errors.length === 0, `errors in the page: ${errors.join('; ')}`);
  log('ok');
} catch (e) {
  failed = true;
  process.stdout.write(`FAIL ${e instanceof Error ? e.stack ?? e.message : e}\n`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
