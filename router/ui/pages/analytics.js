// Analytics: requests, errors, latency p50/p95, tokens and queue wait over a chosen range.
// ONE aggregate call per range (the store aggregates; the browser never sees raw rows): the
// totals, the per-model and per-lane tables and the timeline all come from that one answer.
// Flush and Download the store act on the same node. First load: one API call.
import { h, replace } from '../lib/dom.js';
import { timeline, timelinePlan } from '../lib/chart.js';
import { formatCount, formatDateTime, formatMs } from '../lib/fmt.js';
import { preserveFocus } from '../lib/focus.js';
import { actionButton, navPage, pageHeader, showError, sortRows, table } from '../lib/ui.js';

// The ranges the store aggregates (router/store/ranges.py); the server picks the window and
// the buckets of each, so the page never computes a time.
export const RANGES = {
  '1h': { label: 'Last hour' },
  '24h': { label: 'Last 24 hours' },
  '7d': { label: 'Last 7 days' },
  '30d': { label: 'Last 30 days' },
};

// The bucket length in words, from the answer (the server may choose its own buckets).
export function bucketWords(seconds) {
  const units = [[86400, 'day'], [3600, 'hour'], [60, 'minute'], [1, 'second']];
  for (const [size, name] of units) {
    if (seconds % size === 0) {
      const n = seconds / size;
      return n === 1 ? name : `${n} ${name}s`;
    }
  }
  return `${seconds} seconds`;
}

export const DEFAULT_RANGE = '24h';

// The one query of a range: `?range=<id>`, answered from the store's rollups in one call.
export function rangeQuery(range) {
  return { range: RANGES[range] ? range : DEFAULT_RANGE };
}

const pct = (cell, metric, q) => (cell && cell[metric] ? cell[metric][q] : null);
const tokens = (cell) => (cell && cell.tokens ? cell.tokens.total : null);

export function errorRate(cell) {
  if (!cell || !cell.requests) return null;
  return cell.errors / cell.requests;
}

function metricColumns(keyLabel, key) {
  return [
    { key, label: keyLabel, sortable: true, rowHeader: true, class: 'wrap', cell: (r) => r[key] ?? '(none)' },
    { key: 'requests', label: 'Requests', sortable: true, class: 'num', cell: (r) => formatCount(r.requests) },
    { key: 'errors', label: 'Errors', sortable: true, class: 'num', cell: (r) => formatCount(r.errors) },
    { key: 'aborted', label: 'Aborted', sortable: true, class: 'num', cell: (r) => formatCount(r.aborted) },
    { key: 'p50', label: 'Latency p50', sortable: true, class: 'num', cell: (r) => formatMs(pct(r, 'duration_ms', 'p50')) },
    { key: 'p95', label: 'Latency p95', sortable: true, class: 'num', cell: (r) => formatMs(pct(r, 'duration_ms', 'p95')) },
    { key: 'queue_p50', label: 'Queue wait p50', sortable: true, class: 'num', cell: (r) => formatMs(pct(r, 'queue_wait_ms', 'p50')) },
    { key: 'queue_p95', label: 'Queue wait p95', sortable: true, class: 'num', cell: (r) => formatMs(pct(r, 'queue_wait_ms', 'p95')) },
    { key: 'tokens', label: 'Tokens', sortable: true, class: 'num', cell: (r) => formatCount(tokens(r)) },
  ];
}

function sortValue(row, key) {
  switch (key) {
    case 'p50': case 'p95': return pct(row, 'duration_ms', key);
    case 'queue_p50': return pct(row, 'queue_wait_ms', 'p50');
    case 'queue_p95': return pct(row, 'queue_wait_ms', 'p95');
    case 'tokens': return tokens(row);
    default: return row[key];
  }
}

function totalsView(totals) {
  const rate = errorRate(totals);
  const item = (label, value, id) => h('div', { class: 'stat', 'data-stat': id },
    h('dt', {}, label), h('dd', {}, value));
  return h('dl', { class: 'stats' },
    item('Requests', formatCount(totals.requests), 'requests'),
    item('Errors', `${formatCount(totals.errors)}${rate === null ? '' : ` (${(rate * 100).toFixed(1)} %)`}`, 'errors'),
    item('Aborted by the client', formatCount(totals.aborted), 'aborted'),
    item('Latency p50 / p95', `${formatMs(pct(totals, 'duration_ms', 'p50'))} / ${formatMs(pct(totals, 'duration_ms', 'p95'))}`, 'latency'),
    item('Queue wait p50 / p95', `${formatMs(pct(totals, 'queue_wait_ms', 'p50'))} / ${formatMs(pct(totals, 'queue_wait_ms', 'p95'))}`, 'queue'),
    item('Tokens (prompt + completion)', `${formatCount(tokens(totals))} (${formatCount(totals.tokens?.prompt)} + ${formatCount(totals.tokens?.completion)})`, 'tokens'));
}

function bucketTable(summary) {
  return table({
    caption: 'Requests per time bucket',
    columns: [
      { key: 'start', label: 'From', rowHeader: true, cell: (b) => formatDateTime(b.start) },
      { key: 'requests', label: 'Requests', class: 'num', cell: (b) => formatCount(b.requests) },
      { key: 'errors', label: 'Errors', class: 'num', cell: (b) => formatCount(b.errors) },
      { key: 'p50', label: 'Latency p50', class: 'num', cell: (b) => formatMs(pct(b, 'duration_ms', 'p50')) },
      { key: 'p95', label: 'Latency p95', class: 'num', cell: (b) => formatMs(pct(b, 'duration_ms', 'p95')) },
      { key: 'queue', label: 'Queue wait p95', class: 'num', cell: (b) => formatMs(pct(b, 'queue_wait_ms', 'p95')) },
      { key: 'tokens', label: 'Tokens', class: 'num', cell: (b) => formatCount(tokens(b)) },
    ],
    rows: summary.buckets || [],
    empty: 'No request in this range.',
  });
}

function chartView(summary, range) {
  const r = RANGES[range];
  const unit = bucketWords(summary.bucket_seconds);
  const buckets = summary.buckets || [];
  const busy = buckets.filter((b) => b.requests > 0);
  const plan = timelinePlan({ buckets, from: summary.from, to: summary.to, bucketSeconds: summary.bucket_seconds });
  const busiest = buckets.reduce((a, b) => (b.requests > (a ? a.requests : -1) ? b : a), null);
  const summaryText = busy.length
    ? `${formatCount(summary.totals.requests)} requests and ${formatCount(summary.totals.errors)} errors; requests came in ${busy.length} of ${Math.round((summary.to - summary.from) / summary.bucket_seconds)} buckets (${unit} each); the busiest began ${formatDateTime(busiest.start)} with ${formatCount(busiest.requests)} requests.`
    : 'No request in this range.';
  const long = summary.to - summary.from > 2 * 86400;
  const legend = h('p', { class: 'chart-legend' },
    h('span', {}, h('span', { class: 'swatch swatch-requests' }), 'Requests'),
    h('span', {}, h('span', { class: 'swatch swatch-errors' }), 'Errors (the lower part of a bar)'));
  return [legend, timeline(plan, {
    id: 'analytics-timeline',
    label: `Requests and errors per ${unit}, ${r.label.toLowerCase()}`,
    summary: summaryText,
    tickLabel: (t) => (long ? formatDateTime(t).slice(5, 10) : formatDateTime(t).slice(11, 16)),
    barLabel: (b) => `${formatDateTime(b.start)}: ${formatCount(b.requests)} requests, ${formatCount(b.errors)} errors`,
  })];
}

export default navPage('analytics', 'Analytics', {
  async mount(root, ctx) {
    let summary = null;
    const slot = h('div');
    const actionSlot = h('div');
    const actionStatus = h('p', { role: 'status', class: 'muted' });
    const content = h('div');
    const rangeGroup = h('div', { class: 'segmented', role: 'group', 'aria-label': 'Range' });
    const download = h('a', { href: ctx.api.url('/site/store/download'), download: '', class: 'button' }, 'Download the store');
    const flush = actionButton('Flush to disk', async () => {
      const answer = await ctx.api.post('/site/analytics/flush');
      const failed = answer.failed || [];
      if (failed.length) throw new Error(failed.map((f) => `${f.node_id}: ${f.error}`).join('; '));
      actionStatus.textContent = `Flushed: buffered events are on disk on ${(answer.persisted || []).join(', ')}.`;
    }, { slot: actionSlot, busyLabel: 'Flushing…' });
    replace(root,
      pageHeader('Analytics', h('div', { class: 'actions' }, flush, download)),
      actionSlot, actionStatus, rangeGroup, slot, content);

    const state = () => ({
      range: RANGES[ctx.params.range] ? ctx.params.range : DEFAULT_RANGE,
      view: ctx.params.view === 'table' ? 'table' : 'chart',
      msort: ctx.params.msort || 'requests', mdir: ctx.params.mdir === 'asc' ? 'asc' : 'desc',
      lsort: ctx.params.lsort || 'requests', ldir: ctx.params.ldir === 'asc' ? 'asc' : 'desc',
    });
    const setParam = (patch) => ctx.setParams({ ...ctx.params, ...patch });

    function renderRanges() {
      const current = state().range;
      preserveFocus(rangeGroup, () => replace(rangeGroup, Object.entries(RANGES).map(([id, r]) => h('button', {
        type: 'button', 'aria-pressed': id === current ? 'true' : 'false',
        onclick: () => {
          if (id === state().range) return;
          setParam({ range: id });
          renderRanges();
          load();
        },
      }, r.label))));
    }

    function breakdown(title, rows, key, keyLabel, sortKey, dirKey) {
      const s = state();
      return h('section', { 'aria-label': title },
        h('h2', {}, title),
        table({
          columns: metricColumns(keyLabel, key),
          rows: sortRows(rows, s[sortKey], s[dirKey], sortValue),
          sort: { key: s[sortKey], dir: s[dirKey] },
          onsort: (k, dir) => { setParam({ [sortKey]: k, [dirKey]: dir }); render(); },
          rowKey: (r) => r[key] ?? '',
          empty: 'No request in this range.',
        }));
    }

    function render() {
      if (summary) preserveFocus(content, draw);
    }

    function draw() {
      const s = state();
      const toggle = h('button', {
        type: 'button', 'aria-pressed': s.view === 'table' ? 'true' : 'false', 'aria-controls': 'timeline-view',
        onclick: () => { setParam({ view: s.view === 'table' ? '' : 'table' }); render(); },
      }, 'Show as table');
      const lanes = summary.lanes ? ['Per lane', summary.lanes, 'lane', 'Lane']
        : ['Per route', summary.routes || [], 'route', 'Route'];
      // The rollups estimate percentiles from histograms; say so where the numbers are.
      const note = summary.percentiles === 'histogram'
        ? h('p', { class: 'muted' }, 'Percentiles are estimated from latency histograms (within about 5 %); counts and tokens are exact.')
        : null;
      replace(content,
        totalsView(summary.totals), note,
        h('section', { 'aria-label': 'Timeline' },
          h('div', { class: 'section-head' }, h('h2', {}, 'Timeline'), toggle),
          h('div', { id: 'timeline-view' }, s.view === 'table' ? bucketTable(summary) : chartView(summary, s.range))),
        breakdown('Per model', summary.models || [], 'model', 'Model', 'msort', 'mdir'),
        breakdown(lanes[0], lanes[1], lanes[2], lanes[3], 'lsort', 'ldir'));
    }

    async function load() {
      showError(slot, null);
      const range = state().range;
      try {
        const answer = await ctx.api.get('/site/analytics', rangeQuery(range));
        if (range !== state().range) return; // a newer range was picked meanwhile
        summary = answer;
        render();
      } catch (exc) {
        showError(slot, exc, { title: 'The analytics could not be read' });
      }
    }

    renderRanges();
    await load();
  },
});
