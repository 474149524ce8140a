// Overview: every lane with its runtime, live from /router/v1/events; load progress; failures
// with exit code and output tail; Unload per lane and Unload all behind a confirm dialog;
// the memory of each device as a bar split by runtime (lib/memory.js).
import { h, replace } from '../lib/dom.js';
import { memoryBars, memoryPlan } from '../lib/memory.js';
import { RESYNC, liveState } from '../lib/sse.js';
import {
  actionButton, badge, confirmDialog, errorBox, formatBytes, formatSeconds, formatTime, navPage,
  pageHeader, progressBar, showError, table,
} from '../lib/ui.js';
import { pageHref } from '../lib/url.js';

export const LANES = ['text', 'image', 'voice', 'embeddings', 'music'];
// The status is reread this often: no event carries a runtime's memory figures.
const REFRESH_MS = 5000;
// A load's memory is measured just after `ready`, off the event loop, and no event says when
// it is in: the status is reread once this long after each `ready` (docs/residency.md).
const MEASURED_MS = 3000;
const ANNOUNCE_MS = 1000; // screen readers hear at most one progress update a second

function exitCodeOf(reason) {
  const found = /exited with code (-?\d+)/.exec(reason || '');
  return found ? Number(found[1]) : null;
}

// Pure: the runtimes map from a /status answer.
export function fromStatus(status) {
  const runtimes = new Map();
  for (const rt of status.runtimes || []) runtimes.set(rt.runtime, rt);
  return {
    runtimes, queued: status.queued || {}, queue: status.queue || {}, devices: status.devices || [],
    remote: status.remote_devices || [],
  };
}

// Memory lent by other nodes over llama.cpp's RPC engine (docs/cluster.md, "Pooled memory"):
// one row per lending node and runtime, with the lease's budget and what its layers use.
function remoteTable(rows) {
  if (!rows.length) return null;
  return table({
    caption: 'Remote devices (memory lent by other nodes)',
    rowKey: (d) => `${d.runtime}:${d.node_id}`,
    rows,
    columns: [
      { key: 'device', label: 'Device', rowHeader: true, class: 'wrap', cell: (d) => d.device },
      { key: 'node', label: 'Lending node', cell: (d) => d.node_id },
      { key: 'runtime', label: 'Runtime', class: 'wrap', cell: (d) => d.runtime },
      { key: 'budget', label: 'Budget', class: 'num', cell: (d) => formatBytes(d.budget) },
      { key: 'used', label: 'Used', class: 'num', cell: (d) => (d.used == null ? '—' : formatBytes(d.used)) },
      { key: 'layers', label: 'Layers', class: 'num', cell: (d) => d.layers ?? '—' },
    ],
  });
}

function loadingRecord(event) {
  return {
    runtime: event.runtime, model: event.model, family: event.family, lanes: event.lanes,
    state: 'loading', since: event.time, pid: null, port: null, in_flight: 0, queued: {},
    usual: event.usual_load_seconds ?? null, phase: null, percent: null,
  };
}

function withActivity(state, event) {
  const runtimes = new Map();
  for (const [key, rt] of state.runtimes) {
    runtimes.set(key, { ...rt, in_flight: (event.in_flight || {})[key] ?? 0 });
  }
  return { ...state, runtimes, queued: { ...state.queued, ...(event.queued || {}) } };
}

// Pure: one event applied to the state (a new object), or RESYNC when only the server knows.
export function reduce(state, event) {
  if (event.event === 'activity') return withActivity(state, event);
  if (event.event === 'queue_position') return { ...state, queue: event.queue || {} };
  const runtimes = new Map(state.runtimes);
  const old = runtimes.get(event.runtime);
  switch (event.event) {
    case 'state':
      // The stream opens with one per runtime, without the memory only /status carries:
      // what the event lacks is kept, or the bars would read "0 B used" until a snapshot.
      runtimes.set(event.runtime, { ...old, ...event });
      break;
    case 'loading':
      runtimes.set(event.runtime, loadingRecord(event));
      break;
    case 'load_progress':
      if (!old) return RESYNC;
      runtimes.set(event.runtime, { ...old, phase: event.phase, percent: event.percent ?? null });
      break;
    case 'ready':
      return RESYNC; // the PID and port come with the snapshot
    case 'unloading':
    case 'sleeping': // a vLLM runtime put to sleep instead of stopped (docs/swaps.md)
      if (!old) return RESYNC;
      runtimes.set(event.runtime, { ...old, state: event.event, since: event.time });
      break;
    case 'failed':
    case 'unloaded':
      runtimes.delete(event.runtime);
      break;
    default:
      return state;
  }
  return { ...state, runtimes };
}

// Pure: median load seconds per model from successful load captures.
export function usualLoadSeconds(captures) {
  const byModel = new Map();
  for (const c of captures || []) {
    if (c.status !== 'ok' || !c.duration_ms || !c.model) continue;
    if (!byModel.has(c.model)) byModel.set(c.model, []);
    byModel.get(c.model).push(c.duration_ms / 1000);
  }
  const out = {};
  for (const [model, values] of byModel) {
    values.sort((a, b) => a - b);
    out[model] = values[Math.floor(values.length / 2)];
  }
  return out;
}

function captureLink(attemptId) {
  if (!attemptId) return null;
  return h('a', { href: pageHref('captures', { attempt: attemptId }) }, 'Open its load capture');
}

function failureBox(failure) {
  const code = failure.exit_code ?? exitCodeOf(failure.reason);
  const tail = Array.isArray(failure.output_tail) ? failure.output_tail.join('\n') : failure.output_tail;
  const what = failure.during === 'serving' ? `${failure.model} exited while serving` : `Load of ${failure.model} failed`;
  return h('div', { class: 'error-box', role: 'alert' },
    h('strong', {}, what),
    code !== null && code !== undefined ? ` — exit code ${code}` : '',
    h('div', { class: 'wrap' }, failure.reason || ''),
    tail ? h('pre', { class: 'tail', 'aria-label': `Output tail of ${failure.model}` }, tail) : null,
    captureLink(failure.attempt_id));
}

// The progress block of a loading runtime: determinate only when the backend printed a
// percentage; the phase, the elapsed time (ticked by the page) and the usual load time.
function progressBlock(rt, usual) {
  const elapsed = Math.max(0, Date.now() / 1000 - rt.since);
  const value = rt.percent === null || rt.percent === undefined ? null : rt.percent / 100;
  return h('div', { class: 'progress' },
    progressBar(`Loading ${rt.model}`, value),
    h('div', { class: 'muted wrap' }, rt.phase || 'starting the backend',
      value === null ? '' : ` (${rt.percent}%)`, ' · elapsed ',
      h('span', { 'data-elapsed-since': rt.since }, formatSeconds(elapsed)),
      usual ? ` · usually ${formatSeconds(usual)}` : ' · usual load time unknown'));
}

// Pure: one waiting request as text; an ETA only when the router measured every part of it.
export function queueText(row) {
  const eta = row.eta_s === null || row.eta_s === undefined ? 'ETA unknown' : `ETA ${formatSeconds(row.eta_s)}`;
  return `${row.position}. ${row.model} · waiting ${formatSeconds(row.waiting_s)} · ${eta}`;
}

// The lane's queue in serve order (GET /status `queue`, `queue_position` events).
function queueList(lane, rows) {
  if (!rows || !rows.length) return null;
  return h('ol', { class: 'queue', 'aria-label': `Waiting for the ${lane} lane` },
    ...rows.map((row) => h('li', {}, queueText(row))));
}

function laneRows(state) {
  const rows = [];
  for (const lane of LANES) {
    const here = [...state.runtimes.values()].filter((rt) => (rt.lanes || []).includes(lane));
    if (!here.length) rows.push({ lane, rt: null });
    for (const rt of here) rows.push({ lane, rt });
  }
  return rows;
}

// The lanes table; `view` = {failures, usual, announce, unloadButton(lane, rt)}.
function lanesTable(state, view) {
  // The lane's queue goes under its state, next to the load progress.
  const stateCell = (r) => [laneState(r), queueList(r.lane, (state.queue || {})[r.lane])];
  const laneState = ({ lane, rt }) => {
    if (!rt) {
      const failure = view.failures.get(lane);
      return failure ? [badge('failed'), failureBox(failure)] : badge('empty', 'empty');
    }
    if (rt.state !== 'loading') return badge(rt.draining ? 'draining' : rt.state);
    view.announce(`Loading ${rt.model}${rt.percent == null ? '' : `: ${rt.percent}%`}`);
    return [badge('loading'), progressBlock(rt, rt.usual ?? view.usual[rt.model])];
  };
  const dash = (f) => (r) => (r.rt ? f(r.rt) ?? '—' : '—');
  return table({
    caption: 'Runtimes per lane',
    rowKey: (r) => `${r.lane}:${r.rt ? r.rt.runtime : ''}`,
    rows: laneRows(state),
    columns: [
      { key: 'lane', label: 'Lane', rowHeader: true, cell: (r) => r.lane },
      { key: 'model', label: 'Model', class: 'wrap', cell: dash((rt) => rt.model) },
      { key: 'state', label: 'State', class: 'wrap', cell: stateCell },
      { key: 'since', label: 'Since', cell: dash((rt) => formatTime(rt.since)) },
      { key: 'in_flight', label: 'In flight', class: 'num', cell: dash((rt) => rt.in_flight ?? 0) },
      { key: 'queued', label: 'Queued', class: 'num', cell: (r) => state.queued[r.lane] ?? 0 },
      { key: 'pid', label: 'PID', class: 'num', cell: dash((rt) => rt.pid || null) },
      { key: 'port', label: 'Port', class: 'num', cell: dash((rt) => rt.port || null) },
      { key: 'actions', label: 'Actions', cell: (r) => (r.rt ? view.unloadButton(r.lane, r.rt) : '') },
    ],
  });
}

function failuresTable(errors) {
  return table({
    caption: 'The newest load errors of this node',
    empty: 'No load has failed.',
    rows: errors.slice(0, 5),
    columns: [
      { key: 'time', label: 'Time', cell: (e) => formatTime(e.time) },
      { key: 'model', label: 'Model', class: 'wrap' },
      { key: 'exit_code', label: 'Exit code', class: 'num', cell: (e) => e.exit_code ?? '—' },
      { key: 'reason', label: 'Output tail', class: 'wrap',
        cell: (e) => [h('pre', { class: 'tail' }, e.output_tail || e.reason), captureLink(e.attempt_id)] },
    ],
  });
}

function throttled(el, ms) {
  let last = 0;
  return (text) => {
    const now = Date.now();
    if (now - last < ms) return;
    last = now;
    el.textContent = text;
  };
}

function confirmedUnload(ctx, slot, { title, message, label, target }) {
  return actionButton(label, async () => {
    if (await confirmDialog({ title, message, confirmLabel: label })) {
      await ctx.api.post('/unload', { target });
    }
  }, { slot, busyLabel: 'Unloading…' });
}

// A failed event: shown in its lanes at once, then completed from the load-errors table.
async function onFailed(event, view, refreshErrors) {
  const failure = {
    model: event.model, reason: event.reason, time: event.time, during: event.during,
    exit_code: event.exit_code, output_tail: event.output_tail, attempt_id: event.attempt_id,
  };
  for (const lane of event.lanes || []) view.failures.set(lane, failure);
  view.rerender();
  await refreshErrors();
  const match = view.errors.find((e) => e.model === event.model && Math.abs(e.time - event.time) < 5);
  if (match) {
    for (const key of ['exit_code', 'output_tail', 'attempt_id']) failure[key] = failure[key] ?? match[key];
  }
  view.rerender();
}

export default navPage('overview', 'Overview', {
  async mount(root, ctx) {
    const errorSlot = h('div');
    const announcer = h('p', { class: 'visually-hidden', role: 'status', 'aria-live': 'polite' });
    const lanesSlot = h('div', {}, h('p', { class: 'muted' }, 'Reading the runtimes…'));
    const failuresSlot = h('div');
    const memorySlot = h('div', {}, h('p', { class: 'muted' }, 'Reading the devices…'));
    const view = {
      usual: {}, failures: new Map(), errors: [], announce: throttled(announcer, ANNOUNCE_MS),
      unloadButton: (lane, rt) => confirmedUnload(ctx, errorSlot, {
        title: `Unload ${rt.model}?`, label: 'Unload', target: lane,
        message: `The ${lane} lane stops ${rt.model} once its running requests finish.`,
      }),
      rerender: () => live.state && render(live.state),
    };
    // The bars follow the same state as the lanes: an `unloaded` event takes a runtime's
    // bytes off at once; a snapshot (after `loading` and `ready`) brings new figures.
    const render = (state) => {
      replace(lanesSlot, lanesTable(state, view));
      replace(memorySlot, memoryBars(memoryPlan(state.devices, state.runtimes.values())),
        remoteTable(state.remote || []));
    };
    const unloadAll = confirmedUnload(ctx, errorSlot, {
      title: 'Unload every model?', label: 'Unload all', target: 'all',
      message: 'Every lane is stopped once its running requests finish.',
    });
    root.append(
      pageHeader('Overview', h('div', { class: 'actions' }, unloadAll)), errorSlot, announcer,
      h('section', { 'aria-labelledby': 'lanes-h' }, h('h2', { id: 'lanes-h' }, 'Lanes'), lanesSlot),
      h('section', { 'aria-labelledby': 'memory-h' }, h('h2', { id: 'memory-h' }, 'Memory'), memorySlot),
      h('section', { 'aria-labelledby': 'failures-h' },
        h('h2', { id: 'failures-h' }, 'Recent load failures'), failuresSlot));

    const refreshErrors = async () => {
      try {
        view.errors = (await ctx.api.get('/site/load-errors')).errors || [];
        replace(failuresSlot, failuresTable(view.errors));
      } catch (exc) {
        replace(failuresSlot, errorBox(exc, { title: 'Load errors could not be read' }));
      }
    };
    const live = liveState(ctx.events, {
      load: async () => fromStatus(await ctx.api.get('/status')),
      reduce,
      render,
      onerror: (exc) => showError(errorSlot, exc, { title: 'The runtimes could not be read' }),
    });
    const measuredTimers = new Set();
    const offEvents = ctx.events.subscribe((event) => {
      if (event.event === 'loading') {
        for (const lane of event.lanes || []) view.failures.delete(lane);
        // The snapshot has no usual time: keep the event's for the progress line.
        if (event.usual_load_seconds && !view.usual[event.model]) view.usual[event.model] = event.usual_load_seconds;
        live.resync(); // the loading runtime's estimate is in the snapshot, not the event
      }
      else if (event.event === 'ready') {
        if (event.load_seconds) view.usual[event.model] = event.load_seconds;
        measuredTimers.add(setTimeout(() => live.resync(), MEASURED_MS));
      }
      else if (event.event === 'failed') onFailed(event, view, refreshErrors);
    });
    const timers = startTimers(root, ctx, live);
    await Promise.all([refreshErrors(), readUsualTimes(ctx, view)]);
    return () => {
      timers.forEach(clearInterval);
      measuredTimers.forEach(clearTimeout);
      offEvents();
      live.close();
    };
  },
});

// Usual load times from past load captures (a nicety: without them the text says unknown).
async function readUsualTimes(ctx, view) {
  try {
    const answer = await ctx.api.get('/site/load-captures', { status: 'ok', limit: 100 });
    view.usual = { ...usualLoadSeconds(answer.captures), ...view.usual };
  } catch {
    // captures off or unreadable: the bar stays without a usual time
  }
}

function startTimers(root, ctx, live) {
  const tick = setInterval(() => {
    for (const span of root.querySelectorAll('[data-elapsed-since]')) {
      span.textContent = formatSeconds(Math.max(0, Date.now() / 1000 - Number(span.dataset.elapsedSince)));
    }
  }, 1000);
  const refresh = setInterval(() => {
    // Also while `activity` events keep the counts live: they carry no memory figures, and
    // on a busy router they never stop, so skipping the reread then left the bars stale.
    if (document.visibilityState !== 'visible') return;
    if (ctx.events.status === 'connected') live.resync();
  }, REFRESH_MS);
  return [tick, refresh];
}
