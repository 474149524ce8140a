// Shared widgets. Everything is built with h(), so data is always text.
import { h, replace } from './dom.js';

const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: 'base' });

// Numeric-aware comparison: 'q4' before 'q10'; numbers compare as numbers; empty values last.
export function compareValues(a, b) {
  const emptyA = a === null || a === undefined || a === '';
  const emptyB = b === null || b === undefined || b === '';
  if (emptyA || emptyB) return emptyA === emptyB ? 0 : emptyA ? 1 : -1;
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  return collator.compare(String(a), String(b));
}

export function sortRows(rows, key, dir = 'asc', valueOf = (row, k) => row[k]) {
  const sign = dir === 'desc' ? -1 : 1;
  return [...rows].sort((x, y) => sign * compareValues(valueOf(x, key), valueOf(y, key)));
}

// A table with sortable header cells (stacked into one card per row on narrow screens). columns: [{key, label, sortable, cell(row) -> node|text,
// value(row) -> sort value}]. sort: {key, dir}; onsort(key, dir) is called on a header click.
export function table({ columns, rows, sort, onsort, caption, rowKey, empty = 'Nothing to show' }) {
  const head = h('tr', {}, columns.map((col) => headerCell(col, sort, onsort)));
  const body = rows.length
    ? rows.map((row) =>
        h('tr', { 'data-key': rowKey ? rowKey(row) : null },
          columns.map((col) => h(col.rowHeader ? 'th' : 'td',
            { scope: col.rowHeader ? 'row' : null, class: col.class || null, 'data-label': col.label },
            col.cell ? col.cell(row) : row[col.key]))))
    : [h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, empty))];
  return h('div', { class: 'table-wrap' },
    h('table', { class: 'stack' }, caption ? h('caption', {}, caption) : null,
      h('thead', {}, head), h('tbody', {}, body)));
}

function headerCell(col, sort, onsort) {
  if (!col.sortable || !onsort) return h('th', { scope: 'col' }, col.label);
  const active = sort && sort.key === col.key;
  const dir = active ? sort.dir : null;
  const next = active && dir === 'asc' ? 'desc' : 'asc';
  return h('th', { scope: 'col', 'aria-sort': active ? (dir === 'asc' ? 'ascending' : 'descending') : 'none' },
    h('button', { type: 'button', class: 'sort', onclick: () => onsort(col.key, next) },
      col.label, h('span', { 'aria-hidden': 'true', class: 'sort-mark' }, active ? (dir === 'asc' ? ' ▲' : ' ▼') : '')));
}

// Confirm with a native modal <dialog>; resolves true/false; focus goes back to the opener.
// `details`: an optional node shown under the message (a list of what the action affects).
export function confirmDialog({ title, message, details = null, confirmLabel = 'Confirm', danger = true }) {
  const opener = document.activeElement;
  return new Promise((resolve) => {
    const ok = h('button', { type: 'submit', value: 'ok', class: danger ? 'danger' : 'primary' }, confirmLabel);
    const dialog = h('dialog', { 'aria-labelledby': 'confirm-title', class: 'confirm' },
      h('form', { method: 'dialog' },
        h('h2', { id: 'confirm-title' }, title),
        message ? h('p', {}, message) : null,
        details,
        h('div', { class: 'actions' },
          h('button', { type: 'submit', value: 'cancel' }, 'Cancel'), ok)));
    dialog.addEventListener('close', () => {
      dialog.remove();
      if (opener && typeof opener.focus === 'function' && opener.isConnected) opener.focus();
      resolve(dialog.returnValue === 'ok');
    });
    document.body.append(dialog);
    dialog.showModal();
    ok.focus();
  });
}

// An error box placed next to what caused it; role=alert so it is announced.
export function errorBox(error, { title } = {}) {
  const message = error && error.message ? error.message : String(error);
  const code = error && error.code ? ` (${error.code})` : '';
  return h('div', { class: 'error-box', role: 'alert' },
    title ? h('strong', {}, `${title}: `) : null, `${message}${code}`);
}

// Put (or clear, with null) an error box into a slot element.
export function showError(slot, error, opts) {
  if (!error) replace(slot);
  else replace(slot, errorBox(error, opts));
}

// A named progress bar: value in 0..1, or null for indeterminate.
export function progressBar(label, value) {
  const attrs = { 'aria-label': label, max: 1 };
  if (value !== null && value !== undefined) attrs.value = Math.max(0, Math.min(1, value));
  return h('progress', attrs);
}

const STATE_CLASS = {
  ready: 'ok', loaded: 'ok', passed: 'ok', enabled: 'ok', available: 'ok', online: 'ok', connected: 'ok',
  loading: 'busy', starting: 'busy', unloading: 'busy', stopping: 'busy', draining: 'busy',
  failed: 'bad', error: 'bad', disconnected: 'bad', unreachable: 'bad', missing: 'bad',
  disabled: 'off', unloaded: 'off', stopped: 'off', sleeping: 'off',
};

// State as text and colour (never colour alone).
export function badge(state, label) {
  const key = String(state || 'unknown').toLowerCase();
  return h('span', { class: `badge badge-${STATE_CLASS[key] || 'neutral'}`, 'data-state': key }, label || key);
}

// A button that stays disabled and says so while its action runs; errors go to `slot`.
export function actionButton(label, action, { slot, busyLabel, cls } = {}) {
  const button = h('button', { type: 'button', class: cls || null }, label);
  button.addEventListener('click', async () => {
    const hadFocus = document.activeElement === button;
    button.disabled = true;
    button.setAttribute('aria-busy', 'true');
    button.textContent = busyLabel || `${label}…`;
    if (slot) showError(slot, null);
    try {
      await action(button);
    } catch (exc) {
      if (slot) showError(slot, exc, { title: label });
      else throw exc;
    } finally {
      button.disabled = false;
      button.removeAttribute('aria-busy');
      button.textContent = label;
      // A disabled button loses focus (a confirm dialog could not hand it back): restore it.
      const lost = !document.activeElement || document.activeElement === document.body;
      if (hadFocus && lost && button.isConnected) button.focus();
    }
  });
  return button;
}

export function formatSeconds(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const m = Math.floor(seconds / 60);
  const s = Math.round(seconds % 60);
  if (m < 60) return `${m} min ${s} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(bytes);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

export function formatTime(epochSeconds) {
  if (!epochSeconds) return '—';
  return new Date(epochSeconds * 1000).toLocaleTimeString();
}

// A page the nav lists (pages/index.js orders them): its id, the title the nav shows, and
// `methods`, its async mount(root, ctx) -> unmount?.
export function navPage(id, title, methods) {
  return { id, title, nav: true, ...methods };
}

// A page header with the one h1.
export function pageHeader(title, ...extra) {
  return h('header', { class: 'page-head' }, h('h1', {}, title), ...extra);
}
