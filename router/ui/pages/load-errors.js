// Load errors: every failed load (and every backend that died while serving), newest first,
// filterable by model and phase, sortable; Clear all behind a confirm dialog.
// First load: one API call (GET /site/load-errors). A `failed` event on the shared stream
// (a load that just failed) reads the list again, once per burst.
import { h, replace } from '../lib/dom.js';
import { formatDateTime } from '../lib/fmt.js';
import { preserveFocus } from '../lib/focus.js';
import { pageHref } from '../lib/url.js';
import { badge, confirmDialog, navPage, pageHeader, showError, sortRows, table } from '../lib/ui.js';

const LIMIT = 1000; // the route's maximum: one page holds every error a node keeps in practice
const SORTS = new Set(['time', 'model', 'phase', 'backend', 'exit_code']);

// The phase a load error happened in. The store keeps no phase column, so it is read from
// what the runtime records (docs/decisions.md, "WebUI: load error phase"): a backend that
// stopped after it was ready says "while serving"; everything else failed during the load.
export function phaseOf(error) {
  if (error.phase) return String(error.phase);
  return /while serving/i.test(error.reason || '') ? 'serving' : 'load';
}

export function filterErrors(errors, { model, phase }) {
  return errors.filter((e) => (!model || e.model === model) && (!phase || phaseOf(e) === phase));
}

function tailText(tail) {
  if (Array.isArray(tail)) return tail.join('\n');
  return tail || '';
}

function columns() {
  return [
    { key: 'time', label: 'Time', sortable: true, rowHeader: true, cell: (e) => formatDateTime(e.time) },
    { key: 'model', label: 'Model', sortable: true, class: 'wrap', cell: (e) => e.model || '—' },
    { key: 'phase', label: 'Phase', sortable: true, cell: (e) => badge(phaseOf(e) === 'load' ? 'failed' : 'error', phaseOf(e)) },
    { key: 'backend', label: 'Backend', sortable: true, cell: (e) => e.backend || '—' },
    { key: 'exit_code', label: 'Exit code', sortable: true, class: 'num', cell: (e) => (e.exit_code ?? '—') },
    { key: 'reason', label: 'Reason', class: 'wrap', cell: (e) => e.reason },
    {
      key: 'output', label: 'Output',
      cell: (e) => (tailText(e.output_tail)
        ? h('details', {}, h('summary', {}, 'Output tail'), h('pre', { class: 'tail' }, tailText(e.output_tail)))
        : '—'),
    },
    {
      key: 'attempt_id', label: 'Capture',
      cell: (e) => (e.attempt_id
        ? h('a', { href: pageHref('captures', { attempt: e.attempt_id }) }, 'Open capture')
        : '—'),
    },
  ];
}

function sortValue(error, key) {
  return key === 'phase' ? phaseOf(error) : error[key];
}

export default navPage('load-errors', 'Load errors', {
  async mount(root, ctx) {
    let errors = [];
    const status = h('p', { role: 'status', class: 'muted' });
    const clearSlot = h('div');
    const listSlot = h('div');
    const filters = h('div', { class: 'filters' });
    const body = h('div');
    const clearButton = h('button', { type: 'button', class: 'danger', onclick: clearAll }, 'Clear all');
    replace(root,
      pageHeader('Load errors', h('div', { class: 'actions' },
        h('button', { type: 'button', onclick: () => load() }, 'Refresh'), clearButton)),
      clearSlot, status, filters, listSlot, body);

    function params() {
      const p = ctx.params;
      return {
        model: p.model || '', phase: p.phase || '',
        sort: SORTS.has(p.sort) ? p.sort : 'time', dir: p.dir === 'asc' ? 'asc' : 'desc',
      };
    }

    function setParam(patch) {
      ctx.setParams({ ...ctx.params, ...patch });
      render();
    }

    function select(label, name, options, value) {
      return h('label', {}, label,
        h('select', { name, onchange: (ev) => setParam({ [name]: ev.target.value }) },
          h('option', { value: '' }, 'All'),
          options.map((o) => h('option', { value: o, selected: o === value }, o))));
    }

    function render() {
      preserveFocus(root, draw);
    }

    function draw() {
      const p = params();
      const models = [...new Set(errors.map((e) => e.model).filter(Boolean))].sort();
      replace(filters, select('Model', 'model', models, p.model),
        select('Phase', 'phase', ['load', 'serving'], p.phase));
      const shown = sortRows(filterErrors(errors, p), p.sort, p.dir, sortValue);
      clearButton.disabled = errors.length === 0;
      replace(body, table({
        columns: columns(),
        rows: shown,
        sort: { key: p.sort, dir: p.dir },
        onsort: (key, dir) => setParam({ sort: key, dir }),
        caption: `${shown.length} of ${errors.length} load errors`,
        rowKey: (e) => e.id,
        empty: errors.length ? 'No load error matches these filters.' : 'No load errors are recorded.',
      }));
    }

    async function load() {
      showError(listSlot, null);
      try {
        const answer = await ctx.api.get('/site/load-errors', { limit: LIMIT });
        errors = answer.errors || [];
      } catch (exc) {
        showError(listSlot, exc, { title: 'The load errors could not be read' });
      }
      render();
    }

    async function clearAll() {
      showError(clearSlot, null);
      const ok = await confirmDialog({
        title: 'Clear all load errors?',
        message: `This removes every recorded load error (${errors.length} shown here). It cannot be undone.`,
        confirmLabel: 'Clear all',
      });
      if (!ok) return;
      clearButton.disabled = true;
      try {
        const answer = await ctx.api.del('/site/load-errors');
        const failed = answer.failed || [];
        status.textContent = `Removed ${answer.removed} load error${answer.removed === 1 ? '' : 's'}.`;
        if (failed.length) {
          showError(clearSlot, new Error(failed.map((f) => `${f.node_id}: ${f.error}`).join('; ')),
            { title: 'Some nodes were not cleared' });
        }
      } catch (exc) {
        showError(clearSlot, exc, { title: 'Clear all failed' });
      }
      await load();
      // With nothing left the button stays disabled and cannot hold the focus: the keyboard
      // goes to the sentence that says what happened.
      if (clearButton.disabled && (!document.activeElement || document.activeElement === document.body)) {
        status.setAttribute('tabindex', '-1');
        status.focus();
      }
    }

    let timer = null;
    const off = ctx.events ? ctx.events.subscribe((event) => {
      if (event.event !== 'failed' || timer) return;
      timer = setTimeout(() => {
        timer = null;
        load();
      }, 500);
    }) : () => {};

    await load();
    return () => {
      off();
      clearTimeout(timer);
    };
  },
});
