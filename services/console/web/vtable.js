// A virtualised table: all rows scroll, only the visible ones (and a few
// around them) are in the DOM, so a fleet of 10,000 servers scrolls as
// fast as one of ten. It is an ARIA grid the keyboard drives: arrows,
// Page Up/Down, Home/End move the active row, Enter opens it.

import { h, replace } from './dom.js';

/**
 * @template T
 * @typedef {{key: string, title: string, width: string, cell: (row: T) => Node | string,
 *   sort?: (row: T) => string | number}} Column
 */

let tables = 0;

/** @template T */
export class VirtualTable {
  /**
   * @param {{label: string, columns: Column<T>[], rowKey: (row: T) => string,
   *   rowHref: (row: T) => string, signal: AbortSignal, rowHeight?: number, overscan?: number}} opts
   */
  constructor({ label, columns, rowKey, rowHref, signal, rowHeight = 30, overscan = 8 }) {
    this.columns = columns;
    this.rowKey = rowKey;
    this.rowHref = rowHref;
    this.rowHeight = rowHeight;
    this.overscan = overscan;
    this.id = `vt${++tables}`;
    /** @type {T[]} */
    this.rows = [];
    /** @type {{key: string, dir: 1 | -1} | null} */
    this.sortBy = null;
    this.active = -1;
    this.drawn = '';
    this.frame = 0;

    this.body = h('div', { class: 'vt-rows', role: 'rowgroup' });
    this.head = h('div', { class: 'vt-head', role: 'row', 'aria-rowindex': 1 },
      columns.map((c) => h('div', { role: 'columnheader', 'data-col': c.key },
        c.sort ? h('button', { type: 'button', onclick: () => this.sort(c.key) }, c.title) : c.title)));
    this.el = h('div', { class: 'vt', role: 'grid', tabindex: 0, 'aria-label': label, 'aria-colcount': columns.length },
      this.head, this.body);
    this.el.style.setProperty('--vt-cols', columns.map((c) => c.width).join(' '));
    this.el.style.setProperty('--vt-row', `${rowHeight}px`);
    this.el.addEventListener('scroll', () => this.schedule());
    this.el.addEventListener('keydown', (e) => this.key(e));
    this.el.addEventListener('focus', () => {
      if (this.active < 0 && this.rows.length) this.activate(this.firstVisible());
    });
    const resized = new ResizeObserver(() => this.schedule());
    resized.observe(this.el);
    signal.addEventListener('abort', () => { resized.disconnect(); cancelAnimationFrame(this.frame); }, { once: true });
  }

  /**
   * Sets the rows (in the table's sort order if one is chosen) and draws
   * the visible ones on the next frame. The active row stays on the same
   * key.
   * @param {T[]} rows
   */
  setRows(rows) {
    const activeKey = this.active >= 0 && this.rows[this.active] ? this.rowKey(this.rows[this.active]) : '';
    this.rows = this.sortBy ? this.sorted(rows) : rows;
    if (activeKey) this.active = this.rows.findIndex((r) => this.rowKey(r) === activeKey);
    this.el.setAttribute('aria-rowcount', String(this.rows.length + 1));
    this.drawn = '';
    this.schedule();
  }

  /** @param {T[]} rows */
  sorted(rows) {
    const { key, dir } = /** @type {{key: string, dir: 1 | -1}} */ (this.sortBy);
    const by = /** @type {(row: T) => string | number} */ (this.columns.find((c) => c.key === key)?.sort);
    return rows.map((r) => [by(r), r]).sort(([a], [b]) => (a < b ? -dir : a > b ? dir : 0)).map(([, r]) => /** @type {T} */ (r));
  }

  /** Sorts by a column; a second time, the other way. @param {string} key */
  sort(key) {
    this.sortBy = { key, dir: this.sortBy?.key === key && this.sortBy.dir === 1 ? -1 : 1 };
    for (const th of this.head.children) {
      const col = th.getAttribute('data-col');
      if (col === key) th.setAttribute('aria-sort', this.sortBy.dir === 1 ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    }
    this.setRows(this.rows);
  }

  /** Draws the visible rows again (their cells may show the time). */
  refresh() {
    this.drawn = '';
    this.schedule();
  }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
  }

  firstVisible() {
    return Math.min(this.rows.length - 1, Math.floor(this.el.scrollTop / this.rowHeight));
  }

  visibleCount() {
    return Math.max(1, Math.floor((this.el.clientHeight - this.head.offsetHeight) / this.rowHeight));
  }

  /** Draws the rows in view, if they changed. */
  draw() {
    const n = this.rows.length;
    this.body.style.height = `${n * this.rowHeight}px`;
    const first = Math.max(0, Math.floor(this.el.scrollTop / this.rowHeight) - this.overscan);
    const last = Math.min(n, first + this.visibleCount() + 2 * this.overscan + 1);
    const what = `${first}:${last}:${this.active}`;
    if (what === this.drawn) return;
    this.drawn = what;
    const rows = [];
    for (let i = first; i < last; i++) {
      const row = this.rows[i];
      const el = h('div', {
        role: 'row', class: i === this.active ? 'vt-row active' : 'vt-row', id: `${this.id}-r${i}`,
        'aria-rowindex': i + 2, 'aria-selected': i === this.active ? 'true' : null, 'data-key': this.rowKey(row),
      }, this.columns.map((c) => h('div', { role: 'gridcell', 'data-col': c.key }, c.cell(row))));
      el.style.transform = `translateY(${i * this.rowHeight}px)`;
      el.addEventListener('click', () => { this.active = i; this.drawn = ''; this.schedule(); });
      for (const a of el.querySelectorAll('a')) a.setAttribute('tabindex', '-1'); // the grid has the focus
      rows.push(el);
    }
    replace(this.body, rows);
    if (this.active >= 0 && this.active < n) this.el.setAttribute('aria-activedescendant', `${this.id}-r${this.active}`);
    else this.el.removeAttribute('aria-activedescendant');
  }

  /** Makes row i active and scrolls it into view. @param {number} i */
  activate(i) {
    if (this.rows.length === 0) return;
    this.active = Math.max(0, Math.min(this.rows.length - 1, i));
    const top = this.active * this.rowHeight;
    const view = this.el.clientHeight - this.head.offsetHeight;
    if (top < this.el.scrollTop) this.el.scrollTop = top;
    else if (top + this.rowHeight > this.el.scrollTop + view) this.el.scrollTop = top + this.rowHeight - view;
    this.drawn = '';
    this.draw();
  }

  /** @param {KeyboardEvent} e */
  key(e) {
    if (e.target !== this.el) return; // keys of the header's buttons are theirs
    const page = this.visibleCount();
    /** @type {Record<string, number>} */
    const moves = {
      ArrowDown: this.active + 1, ArrowUp: this.active - 1, PageDown: this.active + page,
      PageUp: this.active - page, Home: 0, End: this.rows.length - 1,
    };
    if (e.key in moves) {
      e.preventDefault();
      this.activate(moves[e.key]);
    } else if (e.key === 'Enter' && this.rows[this.active]) {
      e.preventDefault();
      location.hash = this.rowHref(this.rows[this.active]);
    }
  }
}
