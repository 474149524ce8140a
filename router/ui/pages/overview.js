// Overview: every lane with its runtime, live from /router/v1/events; load progress; failures
// with exit code and output tail; Unload per lane and Unload all behind a confirm dialog.
import { h, replace } from '../lib/dom.js';
import { RESYNC, liveState } from '../lib/sse.js';
import {
  actionButton, badge, confirmDialog, errorBox, formatSeconds, formatTime, pageHeader,
  progressBar, showError, table,
} from '../lib/ui.js';
import { pageHref } from '../lib/url.js';

export const LANES = ['text', 'image', 'voice', 'embeddings', 'music'];
const REFRESH_MS = 5000; // in-flight and queue counts have no events: refreshed while visible
const ANNOUNCE_MS = 1000; // screen readers hear at most one progress update a second

function exitCodeOf(reason) {
  const found = /exited with code (-?\d+)/.exec(reason || '');
  return found ? Number(found[1]) : null;
}

// Pure: the runtimes map from a /status answer.
export function fromStatus(status) {
  const runtimes = new Map();
  for (const rt of status.runtimes || []) runtimes.set(rt.runtime, rt);
  return { runtimes, queued: status.queued || {} };
}

// Pure: one event applied to the state (a new object), or RESYNC when only the server knows.
export function reduce(state, event) {
  const runtimes = new Map(state.runtimes);
  const old = runtimes.get(event.runtime);
  switch (event.event) {
    case 'state':
      runtimes.set(event.runtime, { ...event });
      break;
    case 'loading':
      runtimes.set(event.runtime, {
        runtime: event.runtime, model: event.model, family: event.family, lanes: event.lanes,
        state: 'loading', since: event.time, pid: null, port: null, in_flight: 0, queued: {},
        usual: event.usual_load_seconds ?? null, phase: null, percent: null,
      });
      break;
    case 'load_progress':
      if (!old) return RESYNC;
      runtimes.set(event.runtime, { ...old, phase: event.phase, percent: event.percent ?? null });
      break;
    case 'activity':
      for (const [key, rt] of runtimes) {
        const count = (event.in_flight || {})[key];
        runtimes.set(key, { ...rt, in_flight: count ?? 0 });
      }
      return { ...state, runtimes, queued: { ...state.queued, ...(event.queued || {}) } };
    case 'ready':
      return RESYNC; // the PID and port come with the snapshot
    case 'unloading':
      if (!old) return RESYNC;
      runtimes.set(event.runtime, { ...old, state: 'unloading', since: event.time });
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

export default {
  id: 'overview',
  title: 'Overview',
  nav: true,
  async mount(root, ctx) {
    const live = { usual: {}, failures: new Map(), errors: [] }; // failures: lane -> record
    const errorSlot = h('div');
    const announcer = h('p', { class: 'visually-hidden', role: 'status', 'aria-live': 'polite' });
    const lanesSlot = h('div', {}, h('p', { class: 'muted' }, 'Reading the runtimes…'));
    const failuresSlot = h('div');
    const unloadAll = actionButton('Unload all', async () => {
      const ok = await confirmDialog({
        title: 'Unload every model?', confirmLabel: 'Unload all',
        message: 'Every lane is stopped once its running requests finish.',
      });
      if (ok) await ctx.api.post('/unload', { target: 'all' });
    }, { slot: errorSlot, busyLabel: 'Unloading…' });
    root.append(
      pageHeader('Overview', h('div', { class: 'actions' }, unloadAll)),
      errorSlot, announcer,
      h('section', { 'aria-labelledby': 'lanes-h' }, h('h2', { id: 'lanes-h' }, 'Lanes'), lanesSlot),
      h('section', { 'aria-labelledby': 'failures-h' },
        h('h2', { id: 'failures-h' }, 'Recent load failures'), failuresSlot));

    let lastAnnounce = 0;
    const announce = (text) => {
      const now = Date.now();
      if (now - lastAnnounce < ANNOUNCE_MS) return;
      lastAnnounce = now;
      announcer.textContent = text;
    };

    const unloadLane = (lane, rt) => actionButton('Unload', async () => {
      const ok = await confirmDialog({
        title: `Unload ${rt.model}?`, confirmLabel: 'Unload',
        message: `The ${lane} lane stops ${rt.model} once its running requests finish.`,
      });
      if (ok) await ctx.api.post('/unload', { target: lane });
    }, { slot: errorSlot, busyLabel: 'Unloading…' });

    const stateCell = (lane, rt) => {
      if (!rt) {
        const failure = live.failures.get(lane);
        return failure ? [badge('failed'), failureBox(failure)] : badge('empty', 'empty');
      }
      const cell = [badge(rt.draining ? 'draining' : rt.state)];
      if (rt.state === 'loading') {
        const usual = rt.usual ?? live.usual[rt.model];
        const elapsed = Math.max(0, Date.now() / 1000 - rt.since);
        // Determinate only when the backend printed a percentage; else indeterminate.
        const value = rt.percent === null || rt.percent === undefined ? null : rt.percent / 100;
        cell.push(h('div', { class: 'progress' },
          progressBar(`Loading ${rt.model}`, value),
          h('div', { class: 'muted wrap' }, rt.phase || 'starting the backend',
            value === null ? '' : ` (${rt.percent}%)`, ' · elapsed ',
            h('span', { 'data-elapsed-since': rt.since }, formatSeconds(elapsed)),
            usual ? ` · usually ${formatSeconds(usual)}` : ' · usual load time unknown')));
        announce(`Loading ${rt.model}${value === null ? '' : `: ${rt.percent}%`}`);
      }
      return cell;
    };

    const renderLanes = (state) => {
      const rows = [];
      for (const lane of LANES) {
        const here = [...state.runtimes.values()].filter((rt) => (rt.lanes || []).includes(lane));
        if (!here.length) rows.push({ lane, rt: null });
        for (const rt of here) rows.push({ lane, rt });
      }
      replace(lanesSlot, table({
        caption: 'Runtimes per lane',
        rowKey: (r) => `${r.lane}:${r.rt ? r.rt.runtime : ''}`,
        rows,
        columns: [
          { key: 'lane', label: 'Lane', rowHeader: true, cell: (r) => r.lane },
          { key: 'model', label: 'Model', cell: (r) => (r.rt ? r.rt.model : '—'), class: 'wrap' },
          { key: 'state', label: 'State', cell: (r) => stateCell(r.lane, r.rt) },
          { key: 'since', label: 'Since', cell: (r) => (r.rt ? formatTime(r.rt.since) : '—') },
          { key: 'in_flight', label: 'In flight', class: 'num', cell: (r) => (r.rt ? r.rt.in_flight ?? 0 : '—') },
          { key: 'queued', label: 'Queued', class: 'num', cell: (r) => state.queued[r.lane] ?? 0 },
          { key: 'pid', label: 'PID', class: 'num', cell: (r) => (r.rt && r.rt.pid) || '—' },
          { key: 'port', label: 'Port', class: 'num', cell: (r) => (r.rt && r.rt.port) || '—' },
          { key: 'actions', label: 'Actions', cell: (r) => (r.rt ? unloadLane(r.lane, r.rt) : '') },
        ],
      }));
    };

    const renderFailures = () => {
      replace(failuresSlot, table({
        caption: 'The newest load errors of this node',
        empty: 'No load has failed.',
        rows: live.errors.slice(0, 5),
        columns: [
          { key: 'time', label: 'Time', cell: (e) => formatTime(e.time) },
          { key: 'model', label: 'Model', class: 'wrap' },
          { key: 'exit_code', label: 'Exit code', class: 'num', cell: (e) => e.exit_code ?? '—' },
          { key: 'reason', label: 'Output tail', class: 'wrap',
            cell: (e) => [h('pre', { class: 'tail' }, e.output_tail || e.reason), captureLink(e.attempt_id)] },
        ],
      }));
    };

    const loadErrors = async () => {
      try {
        const answer = await ctx.api.get('/site/load-errors');
        live.errors = answer.errors || [];
        renderFailures();
      } catch (exc) {
        replace(failuresSlot, errorBox(exc, { title: 'Load errors could not be read' }));
      }
    };

    const state = liveState(ctx.events, {
      load: async () => fromStatus(await ctx.api.get('/status')),
      reduce,
      render: renderLanes,
      onerror: (exc) => showError(errorSlot, exc, { title: 'The runtimes could not be read' }),
    });

    const offEvents = ctx.events.subscribe(async (event) => {
      if (event.event === 'loading') {
        for (const lane of event.lanes || []) live.failures.delete(lane);
      } else if (event.event === 'ready' && event.load_seconds) {
        live.usual[event.model] = event.load_seconds;
      } else if (event.event === 'failed') {
        const failure = {
          model: event.model, reason: event.reason, time: event.time, exit_code: event.exit_code,
          output_tail: event.output_tail, attempt_id: event.attempt_id,
        };
        for (const lane of event.lanes || []) live.failures.set(lane, failure);
        if (state.state) renderLanes(state.state);
        await loadErrors(); // the failures table, and the tail when the event had none
        const match = live.errors.find((e) => e.model === event.model && Math.abs(e.time - event.time) < 5);
        if (match) {
          for (const key of ['exit_code', 'output_tail', 'attempt_id']) failure[key] = failure[key] ?? match[key];
        }
        if (state.state) renderLanes(state.state);
      }
    });

    const tick = setInterval(() => {
      for (const span of root.querySelectorAll('[data-elapsed-since]')) {
        span.textContent = formatSeconds(Math.max(0, Date.now() / 1000 - Number(span.dataset.elapsedSince)));
      }
    }, 1000);
    const refresh = setInterval(() => {
      if (document.visibilityState === 'visible' && ctx.events.status === 'connected') state.resync();
    }, REFRESH_MS);

    await Promise.all([
      loadErrors(),
      ctx.api.get('/site/load-captures', { status: 'ok', limit: 100 })
        .then((answer) => { live.usual = { ...usualLoadSeconds(answer.captures), ...live.usual }; })
        .catch(() => {}), // usual load times are a nicety: without them the bar is indeterminate
    ]);
    return () => {
      clearInterval(tick);
      clearInterval(refresh);
      offEvents();
      state.close();
    };
  },
};
