// Models: every configuration with lanes, family, capabilities, availability, enabled state,
// hashes, runtime state and last benchmark; search/sort/filters in the URL; Load, Unload,
// Enable, Disable per row; a detail view (?model=) with the sanitized .kcpps and its files.
import { h, replace } from '../lib/dom.js';
import { RESYNC, liveState } from '../lib/sse.js';
import {
  actionButton, badge, errorBox, formatBytes, formatTime, pageHeader, showError, sortRows, table,
} from '../lib/ui.js';
import { pageHref } from '../lib/url.js';

const RUNTIME_EVENTS = { loading: 'loading', ready: 'ready', unloading: 'unloading', unloaded: 'unloaded', failed: 'failed' };
const SORTABLE = ['id', 'lanes', 'family', 'state', 'available', 'enabled', 'benchmark'];

export function stateOf(row) {
  return row.disabled ? 'disabled' : row.status || 'unloaded';
}

function benchmarkText(b) {
  if (!b) return '';
  const metric = (b.metrics || []).find((m) => m.value !== null && m.value !== undefined);
  const what = metric ? `${metric.name} ${metric.value} ${metric.unit || ''}`.trim() : b.status;
  return `${what} (${formatTime(b.finished_at || b.started_at)})`;
}

const VALUE = {
  id: (r) => r.id,
  lanes: (r) => (r.capabilities || []).join(' '),
  family: (r) => r.backend_mode,
  state: stateOf,
  available: (r) => (r.available ? 'yes' : 'no'),
  enabled: (r) => (r.disabled ? 'no' : 'yes'),
  benchmark: (r) => benchmarkText(r.benchmark),
};

// Pure: the rows a view shows for its params {q, lane, state, family, sort, dir}.
export function visibleRows(rows, params) {
  const q = (params.q || '').trim().toLowerCase();
  const out = rows.filter((r) =>
    (!q || [r.id, r.image_id, r.config_file].some((v) => v && v.toLowerCase().includes(q)))
    && (!params.lane || (r.capabilities || []).includes(params.lane))
    && (!params.state || stateOf(r) === params.state)
    && (!params.family || r.backend_mode === params.family));
  const key = SORTABLE.includes(params.sort) ? params.sort : 'id';
  return sortRows(out, key, params.dir === 'desc' ? 'desc' : 'asc', (r, k) => VALUE[k](r));
}

// Pure: a runtime event applied to the rows (a new Map), or RESYNC for a catalog change.
export function reduce(rows, event) {
  if (event.event === 'catalog') return RESYNC;
  const status = event.event === 'state' ? event.state : RUNTIME_EVENTS[event.event];
  const row = rows.get(event.model);
  if (!status || !row) return rows;
  const next = new Map(rows);
  next.set(event.model, { ...row, status });
  return next;
}

function options(values, current, label) {
  return [h('option', { value: '' }, label),
    ...values.map((v) => h('option', { value: v, selected: v === current }, v))];
}

function hashCell(hashes) {
  const entries = Object.entries(hashes || {});
  return entries.map(([k, v]) => h('div', { class: 'hash', title: `${k} ${v}` }, `${k}: ${String(v).slice(0, 12)}…`));
}

export default {
  id: 'models',
  title: 'Models',
  nav: true,
  async mount(root, ctx) {
    let params = { ...ctx.params };
    let typing = false;
    const errorSlot = h('div');
    const tableSlot = h('div', {}, h('p', { class: 'muted' }, 'Reading the catalog…'));
    const detailSlot = h('div');
    const count = h('p', { class: 'muted', role: 'status' });
    const search = h('input', {
      type: 'search', id: 'model-search', value: params.q || '', placeholder: 'id or file',
      // One history entry per search: the first keystroke pushes, the rest replace it.
      oninput: () => {
        setParams({ q: search.value }, !typing);
        typing = true;
      },
      onchange: () => {
        typing = false;
      },
    });
    const selects = {
      lane: h('select', { id: 'filter-lane', onchange: (e) => setParams({ lane: e.target.value }, true) }),
      state: h('select', { id: 'filter-state', onchange: (e) => setParams({ state: e.target.value }, true) }),
      family: h('select', { id: 'filter-family', onchange: (e) => setParams({ family: e.target.value }, true) }),
    };
    root.append(
      pageHeader('Models'),
      h('div', { class: 'filters', role: 'search' },
        h('label', { for: 'model-search' }, 'Search'), search,
        h('label', { for: 'filter-lane' }, 'Lane'), selects.lane,
        h('label', { for: 'filter-state' }, 'State'), selects.state,
        h('label', { for: 'filter-family' }, 'Family'), selects.family),
      errorSlot, count, detailSlot, tableSlot);

    function setParams(change, push) {
      params = { ...params, ...change };
      ctx.setParams(params, { push });
      if ('model' in change) renderDetail();
      if (live.state) render(live.state);
    }

    const rowActions = (row) => {
      const slot = h('div');
      const act = (label, fn) => actionButton(label, fn, { slot });
      const buttons = [];
      const state = stateOf(row);
      if (!row.disabled && !['ready', 'loading'].includes(state)) {
        buttons.push(act('Load', () => ctx.api.post('/load', { model: row.id })));
      }
      if (['ready', 'loading', 'unloading'].includes(row.status)) {
        buttons.push(act('Unload', () => ctx.api.post('/site/nodes/unload', { model: row.id })));
      }
      buttons.push(row.disabled
        ? act('Enable', () => setEnabled(row, true))
        : act('Disable', () => setEnabled(row, false)));
      return h('div', { class: 'row-actions' }, h('div', { class: 'actions', 'aria-label': `Actions for ${row.id}`, role: 'group' }, buttons), slot);
    };

    async function setEnabled(row, enabled) {
      const answer = await ctx.api.post('/site/models/state', { local_id: row.id, enabled });
      const current = live.state.get(row.id);
      if (current) {
        const next = new Map(live.state);
        next.set(row.id, { ...current, disabled: !answer.enabled });
        live.set(next);
      }
    }

    const columns = [
      { key: 'id', label: 'Model', sortable: true, rowHeader: true, class: 'wrap',
        cell: (r) => [h('a', { href: pageHref('models', { ...params, model: r.id }) }, r.id),
          r.image_id ? h('div', { class: 'muted' }, `image: ${r.image_id}`) : null] },
      { key: 'lanes', label: 'Lanes', sortable: true, cell: (r) => (r.capabilities || []).join(', ') },
      { key: 'family', label: 'Family', sortable: true, cell: (r) => r.backend_mode },
      { key: 'state', label: 'State', sortable: true, cell: (r) => badge(stateOf(r)) },
      { key: 'available', label: 'Files', sortable: true,
        cell: (r) => (r.available ? 'present' : [badge('missing'), h('div', { class: 'wrap' }, (r.missing_files || []).join(', '))]) },
      { key: 'enabled', label: 'Enabled', sortable: true, cell: (r) => (r.disabled ? 'no' : 'yes') },
      { key: 'hashes', label: 'Hashes', cell: (r) => hashCell(r.hashes) },
      { key: 'benchmark', label: 'Last benchmark', sortable: true, class: 'wrap', cell: (r) => benchmarkText(r.benchmark) || '—' },
      { key: 'actions', label: 'Actions', cell: rowActions },
    ];

    function fillSelects(rows) {
      const distinct = (f) => [...new Set(rows.flatMap(f))].sort();
      replace(selects.lane, options(distinct((r) => r.capabilities || []), params.lane, 'every lane'));
      replace(selects.state, options([...new Set([...rows.map(stateOf), 'ready', 'loading', 'unloaded', 'disabled'])].sort(), params.state, 'every state'));
      replace(selects.family, options(distinct((r) => [r.backend_mode]), params.family, 'every family'));
    }

    function render(rowsById) {
      const rows = [...rowsById.values()];
      const shown = visibleRows(rows, params);
      count.textContent = `${shown.length} of ${rows.length} configurations`;
      replace(tableSlot, table({
        caption: 'Configurations on this node',
        columns, rows: shown, rowKey: (r) => r.id,
        sort: { key: SORTABLE.includes(params.sort) ? params.sort : 'id', dir: params.dir === 'desc' ? 'desc' : 'asc' },
        onsort: (key, dir) => setParams({ sort: key, dir }, true),
        empty: 'No configuration matches these filters.',
      }));
    }

    async function renderDetail() {
      replace(detailSlot);
      const id = params.model;
      if (!id) return;
      const close = h('a', { href: pageHref('models', { ...params, model: '' }) }, 'Close');
      const box = h('section', { class: 'card detail', 'aria-labelledby': 'detail-h' },
        h('h2', { id: 'detail-h' }, `Configuration ${id}`), close, h('p', { class: 'muted' }, 'Reading…'));
      replace(detailSlot, box);
      try {
        const inventory = await ctx.api.get('/site/inventory');
        const record = (inventory.models || []).find((m) => m.id === id || m.image_id === id);
        if (!record) throw new Error(`${id} is not a configuration on this node`);
        const file = await ctx.api.get(`/site/config-file/${encodeURIComponent(record.filename.replace(/\.kcpps$/, ''))}`);
        if (params.model !== id) return;
        replace(box, h('h2', { id: 'detail-h' }, `Configuration ${id}`), close,
          h('dl', { class: 'facts' },
            h('dt', {}, 'File'), h('dd', {}, record.filename),
            h('dt', {}, 'Config hash'), h('dd', { class: 'hash' }, record.config_hash),
            h('dt', {}, 'Model hash'), h('dd', { class: 'hash' }, record.model_hash || '—'),
            h('dt', {}, 'State'), h('dd', {}, badge(record.enabled ? record.state : 'disabled'))),
          h('h3', {}, 'Components and files'),
          table({
            caption: `Files of ${id}`, rows: record.components || [], rowKey: (c) => `${c.field}${c.position ?? ''}`,
            columns: [
              { key: 'field', label: 'Field', cell: (c) => (c.position === null || c.position === undefined ? c.field : `${c.field}[${c.position}]`) },
              { key: 'filename', label: 'File', class: 'wrap' },
              { key: 'present', label: 'Present', cell: (c) => (c.present ? 'yes' : badge('missing')) },
              { key: 'size', label: 'Size', class: 'num', cell: (c) => formatBytes(c.size) },
              { key: 'sha256', label: 'SHA-256', class: 'hash', cell: (c) => c.sha256 || '—' },
            ],
          }),
          h('h3', {}, 'Sanitized .kcpps'),
          h('pre', { 'aria-label': `Sanitized ${record.filename}` }, JSON.stringify(file.sanitized, null, 2)),
          h('p', {}, h('a', { href: pageHref('config', { id: file.id }) }, `Edit ${file.filename}`)));
      } catch (exc) {
        if (params.model === id) box.append(errorBox(exc, { title: 'The detail could not be read' }));
      }
    }

    const live = liveState(ctx.events, {
      load: async () => {
        const answer = await ctx.api.get('/models');
        const rows = new Map(answer.data.map((r) => [r.id, r]));
        fillSelects(answer.data);
        showError(errorSlot, null);
        return rows;
      },
      reduce,
      render,
      onerror: (exc) => showError(errorSlot, exc, { title: 'The catalog could not be read' }),
    });
    renderDetail();
    return () => live.close();
  },
};
