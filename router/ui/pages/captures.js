// Load captures: what each backend load did. A list with filters (status, kind, backend, time;
// all in the URL) paged by the server's cursor, and a detail view (`?attempt=<id>`) with the
// sanitized .kcpps snapshot, the asset hashes, the argv, and the console output paged with
// `after_sequence`. First load: one call for the list, two for a detail (detail + output).
import { h, replace } from '../lib/dom.js';
import { createConsole } from '../lib/console.js';
import { formatDateTime, formatMs, fromLocalInput, toLocalInput } from '../lib/fmt.js';
import { badge, formatBytes, navPage, pageHeader, showError, table } from '../lib/ui.js';
import { traceView } from '../lib/trace.js';
import { pageHref } from '../lib/url.js';

const PAGE = 50;
const OUTPUT_PAGE = 200;
const FILTERS = ['status', 'kind', 'backend', 'from', 'to'];
const STATUSES = ['running', 'ok', 'failed'];
const KINDS = ['load', 'reuse'];
const BACKENDS = ['llamacpp', 'kobold', 'sdcpp', 'whisper', 'vllm'];
const STATUS_STATE = { ok: 'ready', running: 'loading', failed: 'failed' };

// The list query from the page's URL state (times are unix seconds in the URL).
export function listQuery(params, cursor) {
  const query = { limit: PAGE, cursor: cursor || null };
  for (const name of FILTERS) if (params[name]) query[name] = params[name];
  return query;
}

function filterState(params) {
  const out = {};
  for (const name of FILTERS) if (params[name]) out[name] = params[name];
  return out;
}

function statusBadge(status) {
  return badge(STATUS_STATE[status] || status, status);
}

function listColumns(params) {
  return [
    { key: 'started_at', label: 'Started', rowHeader: true, cell: (c) => formatDateTime(c.started_at) },
    { key: 'model', label: 'Model', class: 'wrap', cell: (c) => c.model || '—' },
    { key: 'kind', label: 'Kind' },
    { key: 'status', label: 'Status', cell: (c) => statusBadge(c.status) },
    { key: 'backend', label: 'Backend', cell: (c) => c.backend || '—' },
    { key: 'exit_code', label: 'Exit code', class: 'num', cell: (c) => c.exit_code ?? '—' },
    { key: 'duration_ms', label: 'Duration', class: 'num', cell: (c) => formatMs(c.duration_ms) },
    {
      key: 'output_bytes', label: 'Output', class: 'num',
      cell: (c) => [formatBytes(c.output_bytes), c.output_truncated ? [' ', badge('failed', 'truncated')] : null],
    },
    {
      key: 'open', label: 'Detail',
      cell: (c) => h('a', { href: pageHref('captures', { ...filterState(params), attempt: c.id }) },
        'Open', h('span', { class: 'visually-hidden' }, ` capture of ${c.model || c.id}`)),
    },
  ];
}

function filterForm(params, onchange) {
  const choice = (label, name, values) => h('label', {}, label,
    h('select', { name, onchange: (ev) => onchange({ [name]: ev.target.value }) },
      h('option', { value: '' }, 'Any'),
      values.map((v) => h('option', { value: v, selected: params[name] === v }, v))));
  const time = (label, name) => h('label', {}, label,
    h('input', {
      type: 'datetime-local', name, value: toLocalInput(Number(params[name])),
      onchange: (ev) => onchange({ [name]: fromLocalInput(ev.target.value) ?? '' }),
    }));
  return h('div', { class: 'filters', role: 'group', 'aria-label': 'Filters' },
    choice('Status', 'status', STATUSES), choice('Kind', 'kind', KINDS),
    choice('Backend', 'backend', BACKENDS), time('From', 'from'), time('To', 'to'));
}

async function mountList(root, ctx) {
  const slot = h('div');
  const note = h('div');
  const body = h('div');
  const more = h('div', { class: 'actions' });
  let captures = [];
  replace(root, pageHeader('Load captures'),
    filterForm(ctx.params, (patch) => {
      ctx.setParams({ ...ctx.params, ...patch });
      load(null);
    }), note, slot, body, more);

  function render(cursor) {
    replace(body, table({
      columns: listColumns(ctx.params), rows: captures, rowKey: (c) => c.id,
      caption: `${captures.length} load captures, newest first`,
      empty: 'No load capture matches these filters.',
    }));
    replace(more, cursor
      ? h('button', { type: 'button', onclick: () => load(cursor) }, 'Older captures')
      : null);
  }

  async function load(cursor) {
    showError(slot, null);
    try {
      const page = await ctx.api.get('/site/load-captures', listQuery(ctx.params, cursor));
      captures = cursor ? [...captures, ...page.captures] : page.captures;
      replace(note, page.enabled ? null : h('p', { class: 'muted' },
        'Load capture is off on this router: set analytics.load_capture_enabled to true in ',
        'router.yaml to record each load. Captures recorded earlier are still listed.'));
      render(page.next_cursor);
    } catch (exc) {
      showError(slot, exc, { title: 'The load captures could not be read' });
    }
  }

  await load(null);
}

function facts(pairs) {
  return h('dl', { class: 'facts' },
    pairs.filter(([, v]) => v !== undefined).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]));
}

// What the read-ahead of the model's files had done when this load began (docs/swaps.md).
export function readaheadText(ra) {
  if (!ra) return 'none (no drain before this load, or runtime.readahead is off)';
  const of = ra.capped ? ` of ${formatBytes(ra.total)} (capped to what fits in host memory)` : '';
  return `${ra.result}: ${formatBytes(ra.bytes)}${of} read in ${formatMs(ra.seconds * 1000)}`;
}

// What a load spread over lending nodes sent to each (docs/cluster.md, "Pooled memory").
export function pooledText(pooled) {
  if (!pooled) return undefined;
  const each = (pooled.nodes || []).map((n) => `${n.node_id} ${formatBytes(n.bytes_sent)}`);
  return `${formatBytes(pooled.bytes_sent)} sent to lending nodes (${each.join(', ')})`;
}

function jsonCell(value) {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function detailBody(detail, session) {
  const hashes = Object.entries(detail.asset_hashes || {});
  const snapshot = Object.entries(detail.kcpps_snapshot || {});
  return [
    facts([
      ['Attempt', h('span', { class: 'hash' }, detail.id)], ['Node', detail.node_id],
      ['Model', detail.model], ['Kind', detail.kind], ['Status', statusBadge(detail.status)],
      ['Backend', detail.backend], ['Lane', detail.lane],
      ['Started', formatDateTime(detail.started_at)], ['Ended', formatDateTime(detail.ended_at)],
      ['Duration', formatMs(detail.duration_ms)],
      ['Read-ahead', detail.kind === 'load' ? readaheadText(detail.readahead) : undefined],
      ['RPC bytes sent', pooledText(detail.pooled)],
      ['Exit code', detail.exit_code],
      ['Error', detail.error], ['Output', formatBytes(detail.output_bytes)],
      ['Trace', traceView(session, detail.trace_id)],
    ]),
    h('h2', {}, 'Asset hashes'),
    table({
      columns: [
        { key: 'file', label: 'File', rowHeader: true, class: 'wrap', cell: ([k]) => k },
        { key: 'sha', label: 'SHA-256', cell: ([, v]) => h('span', { class: 'hash' }, v) },
      ],
      rows: hashes, empty: 'No asset hashes were recorded.',
    }),
    h('h2', {}, 'Configuration snapshot (sanitized)'),
    table({
      columns: [
        { key: 'key', label: 'Key', rowHeader: true, cell: ([k]) => k },
        { key: 'value', label: 'Value', class: 'wrap', cell: ([, v]) => jsonCell(v) },
      ],
      rows: snapshot, empty: 'The snapshot is empty.',
    }),
    h('h2', {}, 'Command line (secrets removed)'),
    h('pre', { class: 'tail', tabindex: '0', 'aria-label': 'Command line' }, (detail.argv || []).join(' ') || '—'),
  ];
}

async function mountDetail(root, ctx, attempt) {
  const back = h('a', { href: pageHref('captures', filterState(ctx.params)) }, 'All load captures');
  const slot = h('div');
  const outputSlot = h('div');
  const info = h('div');
  const out = h('div');
  const status = h('p', { class: 'muted', role: 'status' });
  const actions = h('div', { class: 'actions' });
  const section = h('section', { 'aria-labelledby': 'console-title' },
    h('h2', { id: 'console-title' }, 'Backend console output'), status, out, outputSlot, actions);
  replace(root, h('p', {}, back), pageHeader('Load capture'), slot, info, section);
  const view = createConsole({ label: 'Backend console output, stdout and stderr in order' });
  let after = 0;

  function renderActions(page) {
    const label = page.more ? 'Load more output' : 'Check for newer output';
    const wanted = page.more || !page.finished;
    replace(actions, wanted ? h('button', { type: 'button', onclick: () => loadOutput() }, label) : null);
    if (page.truncated && !page.more) view.markTruncated();
    status.textContent = `${view.count} output chunks shown${page.more ? '; more are stored' : ''}`
      + `${page.finished ? '' : '; the load is still running'}.`;
  }

  async function loadOutput() {
    showError(outputSlot, null);
    try {
      const page = await ctx.api.get(`/site/load-captures/${encodeURIComponent(attempt)}/output`,
        { after_sequence: after, limit: OUTPUT_PAGE });
      view.append(page.chunks);
      after = page.next_after_sequence;
      renderActions(page);
    } catch (exc) {
      showError(outputSlot, exc, { title: 'The output could not be read' });
    }
  }

  const path = `/site/load-captures/${encodeURIComponent(attempt)}`;
  const [detail] = await Promise.all([
    ctx.api.get(path).catch((exc) => {
      showError(slot, exc, { title: `Load capture ${attempt} could not be read` });
      return null;
    }),
    loadOutput(),
  ]);
  if (!detail) {
    // One error in words, not a second one for the output of a capture that is not there.
    section.remove();
    return;
  }
  replace(info, detailBody(detail, ctx.session));
  replace(out, view.element);
}

export default navPage('captures', 'Load captures', {
  async mount(root, ctx) {
    const attempt = ctx.params.attempt;
    if (attempt) await mountDetail(root, ctx, attempt);
    else await mountList(root, ctx);
  },
});
