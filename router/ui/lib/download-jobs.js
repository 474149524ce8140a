// The Download page's jobs and library panel. Each job row is updated in place from its event
// stream: the progress cell on every event, the state and the buttons only when the state
// changes, so a button under the pointer or the keyboard focus is never swapped mid-click.
import { h, replace } from './dom.js';
import { createEvents } from './sse.js';
import { STREAM_ENDS, applyJobEvent, formatEta, fraction, jobActions } from './jobs.js';
import { actionButton, badge, confirmDialog, formatBytes, showError, table } from './ui.js';

const JOB_EVENTS = ['state', 'progress', 'file', 'resumed'];
// A browser opens at most six HTTP/1.1 connections per origin; the shell's stream and the
// page's fetches need some, so only this many job streams are open at once.
const MAX_STREAMS = 3;
const JOB_STATE = {
  running: 'loading', queued: 'starting', completed: 'ready', paused: 'stopped',
  interrupted: 'error', failed: 'failed', cancelled: 'disabled',
};
const COLUMNS = ['Repository', 'State', 'Progress', 'Actions'];

function progressText(job) {
  const rate = job.rate_bytes_per_second > 0 ? `${formatBytes(job.rate_bytes_per_second)}/s` : '—';
  return `${formatBytes(job.bytes_done)} of ${formatBytes(job.bytes_total)} · ${rate} · ETA ${formatEta(job.eta_seconds)}`;
}

function fileText(job) {
  if (job.error) return job.error;
  return job.file ? `file ${job.file.index + 1} of ${job.file.count}: ${job.file.path}` : '';
}

function libraryTable(library) {
  return table({
    caption: `Downloaded files (in ${library.dir || 'the downloads folder'})`,
    columns: [
      { key: 'path', label: 'File', rowHeader: true, class: 'wrap' },
      { key: 'size', label: 'Size', class: 'num', cell: (a) => formatBytes(a.size) },
      { key: 'sha256', label: 'SHA-256', cell: (a) => h('span', { class: 'hash' }, a.sha256 || '—') },
      { key: 'origin', label: 'Origin', class: 'wrap' },
    ],
    rows: library.artifacts || [], rowKey: (a) => a.path, empty: 'Nothing has been downloaded yet.',
  });
}

export function jobsPanel(ctx) {
  const rows = new Map(); // job id -> {job, tr, cells, state}
  const streams = new Map(); // job id -> events client
  const tbody = h('tbody');
  const empty = h('tr', {}, h('td', { colspan: COLUMNS.length, class: 'empty' }, 'No download job yet.'));
  const librarySlot = h('div');
  const libraryBody = h('div');
  tbody.append(empty);

  function cell(label, ...children) {
    return h('td', { 'data-label': label }, ...children);
  }

  function buttons(entry) {
    const { job } = entry;
    const can = jobActions(job.state);
    const act = (verb) => async () => {
      entry.acting = true; // the redraw gives the focus back to this row's buttons
      try {
        update(await ctx.api.post(`/site/download/jobs/${encodeURIComponent(job.id)}/${verb}`));
      } finally {
        entry.acting = false;
      }
    };
    const cancel = async () => {
      const ok = await confirmDialog({
        title: `Cancel the download of ${job.repository}?`,
        message: 'Files already verified stay; the partial file is removed.', confirmLabel: 'Cancel download',
      });
      if (ok) await act('cancel')();
    };
    const slot = entry.slot;
    return h('div', { class: 'actions' },
      can.pause ? actionButton('Pause', act('pause'), { slot }) : null,
      can.resume ? actionButton('Resume', act('resume'), { slot }) : null,
      can.cancel ? actionButton('Cancel', cancel, { slot }) : null);
  }

  function draw(entry, stateChanged) {
    const { job, parts } = entry;
    const value = fraction(job);
    if (value === null) parts.bar.removeAttribute('value');
    else parts.bar.value = value;
    parts.text.textContent = progressText(job);
    parts.file.textContent = fileText(job);
    if (!stateChanged) return;
    replace(parts.state, badge(JOB_STATE[job.state] || job.state, job.state));
    replace(parts.actions, buttons(entry), entry.slot);
    if (entry.acting) {
      // The button that was pressed is gone with the old state; keep the keyboard in the row.
      const next = parts.actions.querySelector('button') || entry.tr.querySelector('th');
      if (next.tagName === 'TH') next.setAttribute('tabindex', '-1');
      next.focus();
    }
  }

  function update(job) {
    let entry = rows.get(job.id);
    if (!entry) {
      const parts = {
        state: cell('State'), actions: cell('Actions'), text: h('div', { class: 'muted' }),
        file: h('div', { class: 'muted wrap' }),
        bar: h('progress', { 'aria-label': `Download of ${job.repository}`, max: 1 }),
      };
      const tr = h('tr', { 'data-key': job.id },
        h('th', { scope: 'row', class: 'wrap', 'data-label': 'Repository' }, job.repository), parts.state,
        cell('Progress', h('div', { class: 'job-progress' }, parts.bar, parts.text, parts.file)), parts.actions);
      entry = { job, parts, tr, slot: h('div') };
      rows.set(job.id, entry);
      empty.remove();
      tbody.prepend(tr); // the newest job first
      draw(entry, true);
    } else {
      const changed = entry.job.state !== job.state;
      entry.job = job;
      draw(entry, changed);
    }
    follow(entry.job);
  }

  function follow(job) {
    if (STREAM_ENDS.has(job.state) || streams.has(job.id) || streams.size >= MAX_STREAMS) return;
    // A job's stream replays its history first: a stream opened again after a resume starts
    // after the last event seen, or the replayed "paused" would end it at once.
    const seen = rows.get(job.id)?.lastEventId;
    const path = `/site/download/jobs/${encodeURIComponent(job.id)}/events${seen ? `?after=${seen}` : ''}`;
    const events = createEvents({ path, names: JOB_EVENTS });
    events.subscribe((event) => {
      const entry = rows.get(job.id);
      if (!entry) return;
      if (event.event_id) entry.lastEventId = event.event_id;
      const next = applyJobEvent(entry.job, event);
      if (STREAM_ENDS.has(next.state)) {
        events.stop();
        streams.delete(job.id);
      }
      update(next);
      if (next.state === 'completed') load();
    });
    streams.set(job.id, events);
    events.start();
  }

  async function load() {
    showError(librarySlot, null);
    try {
      const library = await ctx.api.get('/site/download/library');
      const jobs = [...(library.jobs || [])].sort((a, b) => a.created_at - b.created_at);
      for (const job of jobs) update(job);
      replace(libraryBody, libraryTable(library));
    } catch (exc) {
      showError(librarySlot, exc, { title: 'The library could not be read' });
    }
  }

  const rescan = actionButton('Rescan', async () => {
    await ctx.api.post('/site/download/rescan');
    await load();
  }, { slot: librarySlot, busyLabel: 'Rescanning…' });
  const element = [
    h('section', { 'aria-labelledby': 'jobs-title' }, h('h2', { id: 'jobs-title' }, 'Jobs'),
      h('div', { class: 'table-wrap' }, h('table', { class: 'stack' },
        h('caption', {}, 'Download jobs, newest first'),
        h('thead', {}, h('tr', {}, COLUMNS.map((c) => h('th', { scope: 'col' }, c)))), tbody))),
    h('section', { 'aria-labelledby': 'library-title' },
      h('div', { class: 'section-head' }, h('h2', { id: 'library-title' }, 'Library'), rescan),
      librarySlot, libraryBody),
  ];
  return {
    element,
    load,
    add: update,
    stop() {
      for (const events of streams.values()) events.stop();
      streams.clear();
    },
  };
}
