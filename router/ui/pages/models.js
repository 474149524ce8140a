// Models: every configuration with lanes, family, capabilities, availability, enabled state,
// hashes, runtime state and last benchmark; search/sort/filters in the URL; Load, Unload,
// Enable, Disable per row; a detail view (?model=) with the sanitized .kcpps and its files.
import { h, replace } from '../lib/dom.js';
import { askedLoad } from '../lib/load-plan.js';
import { RESYNC, liveState } from '../lib/sse.js';
import { actionButton, badge, formatTime, navPage, pageHeader, showError, sortRows, table } from '../lib/ui.js';
import { renderDetail } from './model_detail.js';
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

function modelColumns(params, rowActions) {
  return [
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
}

// Load, Unload, Enable/Disable for one row; each button stays busy until the router answered,
// and its error shows beside it. `enabled(row, answer)` applies an enable/disable answer.
function rowActionsFor(ctx, enabled) {
  return (row) => {
    const slot = h('div');
    const act = (label, fn) => actionButton(label, fn, { slot });
    const buttons = [];
    if (!row.disabled && !['ready', 'loading'].includes(stateOf(row))) {
      // A load that would stop other runtimes asks first (lib/load-plan.js).
      buttons.push(act('Load', () => askedLoad(ctx.api, row.id)));
    }
    if (['ready', 'loading', 'unloading'].includes(row.status)) {
      buttons.push(act('Unload', () => ctx.api.post('/site/nodes/unload', { model: row.id })));
    }
    const toggle = async () => enabled(row, await ctx.api.post('/site/models/state', { local_id: row.id, enabled: !!row.disabled }));
    buttons.push(act(row.disabled ? 'Enable' : 'Disable', toggle));
    return h('div', { class: 'row-actions' },
      h('div', { class: 'actions', 'aria-label': `Actions for ${row.id}`, role: 'group' }, buttons), slot);
  };
}

// The search box and the three filters; `set(change, push)` writes them into the URL.
function filterBar(params, set) {
  let typing = false;
  const search = h('input', {
    type: 'search', id: 'model-search', value: params.q || '', placeholder: 'id or file',
    // One history entry per search: the first keystroke pushes, the rest replace it.
    oninput: () => {
      set({ q: search.value }, !typing);
      typing = true;
    },
    onchange: () => {
      typing = false;
    },
  });
  const select = (key) => h('select', { id: `filter-${key}`, onchange: (e) => set({ [key]: e.target.value }, true) });
  const selects = { lane: select('lane'), state: select('state'), family: select('family') };
  const el = h('div', { class: 'filters', role: 'search' },
    h('label', { for: 'model-search' }, 'Search'), search,
    h('label', { for: 'filter-lane' }, 'Lane'), selects.lane,
    h('label', { for: 'filter-state' }, 'State'), selects.state,
    h('label', { for: 'filter-family' }, 'Family'), selects.family);
  const fill = (rows, current) => {
    const distinct = (f) => [...new Set(rows.flatMap(f))].sort();
    const states = [...new Set([...rows.map(stateOf), 'ready', 'loading', 'unloaded', 'disabled'])].sort();
    replace(selects.lane, options(distinct((r) => r.capabilities || []), current.lane, 'every lane'));
    replace(selects.state, options(states, current.state, 'every state'));
    replace(selects.family, options(distinct((r) => [r.backend_mode]), current.family, 'every family'));
  };
  return { el, fill };
}

export default navPage('models', 'Models', {
  async mount(root, ctx) {
    let params = { ...ctx.params };
    const errorSlot = h('div');
    const tableSlot = h('div', {}, h('p', { class: 'muted' }, 'Reading the catalog…'));
    const detailSlot = h('div');
    const count = h('p', { class: 'muted', role: 'status' });
    const showDetail = () => renderDetail(detailSlot, ctx, params, () => params.model);
    const setParams = (change, push) => {
      params = { ...params, ...change };
      ctx.setParams(params, { push });
      if ('model' in change) showDetail();
      if (live.state) render(live.state);
    };
    const filters = filterBar(params, setParams);
    root.append(pageHeader('Models'), filters.el, errorSlot, count, detailSlot, tableSlot);

    const rowActions = rowActionsFor(ctx, (row, answer) => {
      const current = live.state && live.state.get(row.id);
      if (!current) return;
      const next = new Map(live.state);
      next.set(row.id, { ...current, disabled: !answer.enabled });
      live.set(next);
    });
    const render = (rowsById) => {
      const rows = [...rowsById.values()];
      const shown = visibleRows(rows, params);
      count.textContent = `${shown.length} of ${rows.length} configurations`;
      replace(tableSlot, table({
        caption: 'Configurations on this node',
        columns: modelColumns(params, rowActions), rows: shown, rowKey: (r) => r.id,
        sort: { key: SORTABLE.includes(params.sort) ? params.sort : 'id', dir: params.dir === 'desc' ? 'desc' : 'asc' },
        onsort: (key, dir) => setParams({ sort: key, dir }, true),
        empty: 'No configuration matches these filters.',
      }));
    };
    const live = liveState(ctx.events, {
      load: async () => {
        const answer = await ctx.api.get('/models');
        filters.fill(answer.data, params);
        showError(errorSlot, null);
        return new Map(answer.data.map((r) => [r.id, r]));
      },
      reduce,
      render,
      onerror: (exc) => showError(errorSlot, exc, { title: 'The catalog could not be read' }),
    });
    showDetail();
    return () => live.close();
  },
});
