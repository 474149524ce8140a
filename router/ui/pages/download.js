// Download: search the hub, pick a repository's files, see the plan (sizes against free
// space) before anything starts, then follow jobs live (bytes, rate, ETA) from each job's
// event stream, with pause, resume and cancel; the library lists what was downloaded.
// The search and the chosen repository are in the URL (`q`, `repo`).
// First load: capabilities and the library (two calls), plus the repository when `repo` is set.
import { h, replace } from '../lib/dom.js';
import { createEvents } from '../lib/sse.js';
import { formatCount } from '../lib/fmt.js';
import {
  STREAM_ENDS, applyJobEvent, formatEta, fraction, jobActions, planVerdict, remainingBlockers,
} from '../lib/jobs.js';
import {
  actionButton, badge, confirmDialog, formatBytes, pageHeader, progressBar, showError, table,
} from '../lib/ui.js';

const JOB_EVENTS = ['state', 'progress', 'file', 'resumed'];
// A browser opens at most six HTTP/1.1 connections per origin; the shell's stream and the
// page's fetches need some, so only this many job streams are open at once (the newest jobs).
const MAX_STREAMS = 3;
const JOB_STATE = { running: 'loading', queued: 'starting', completed: 'ready', paused: 'stopped',
  interrupted: 'error', failed: 'failed', cancelled: 'disabled' }; // fmt: badge colours

function unavailableText(exc) {
  if (exc.status === 501) return 'Downloads are not available on this router: this version does not offer them.';
  if (exc.code === 'downloads_disabled') return 'Downloads are off on this router: set downloads.enabled to true in router.yaml.';
  return null;
}

function jobProgress(job) {
  const rate = job.rate_bytes_per_second > 0 ? `${formatBytes(job.rate_bytes_per_second)}/s` : '—';
  const file = job.file ? `file ${job.file.index + 1} of ${job.file.count}: ${job.file.path}` : '';
  return h('div', { class: 'job-progress' },
    progressBar(`Download of ${job.repository}`, fraction(job)),
    h('div', { class: 'muted' },
      `${formatBytes(job.bytes_done)} of ${formatBytes(job.bytes_total)} · ${rate} · ETA ${formatEta(job.eta_seconds)}`),
    file ? h('div', { class: 'muted wrap' }, file) : null,
    job.error ? h('div', { class: 'wrap' }, job.error) : null);
}

export default {
  id: 'download',
  title: 'Download',
  nav: true,
  async mount(root, ctx) {
    const topSlot = h('div');
    const intro = h('div');
    const main = h('div');
    replace(root, pageHeader('Download'), topSlot, intro, main);
    const streams = new Map(); // job id -> events client
    const jobs = new Map(); // job id -> job
    const jobsBody = h('div');
    const librarySlot = h('div');
    const libraryBody = h('div');
    const searchSlot = h('div');
    const results = h('div');
    const repoSlot = h('div');
    const repoBody = h('div');
    let repoState = null; // {repo, selected:Set, plan}

    // -- jobs -------------------------------------------------------------------------
    function follow(job) {
      if (STREAM_ENDS.has(job.state) || streams.has(job.id) || streams.size >= MAX_STREAMS) return;
      const events = createEvents({ path: `/site/download/jobs/${encodeURIComponent(job.id)}/events`, names: JOB_EVENTS });
      events.subscribe((event) => {
        const current = jobs.get(job.id);
        if (!current) return;
        const next = applyJobEvent(current, event);
        jobs.set(job.id, next);
        if (STREAM_ENDS.has(next.state)) {
          events.stop();
          streams.delete(job.id);
          if (next.state === 'completed') loadLibrary();
        }
        renderJobs();
      });
      streams.set(job.id, events);
      events.start();
    }

    function jobButtons(job) {
      const can = jobActions(job.state);
      const rowSlot = h('div');
      const act = (verb) => async () => {
        const path = `/site/download/jobs/${encodeURIComponent(job.id)}/${verb}`;
        const next = await ctx.api.post(path);
        jobs.set(job.id, next);
        renderJobs();
        follow(next);
      };
      const cancel = actionButton('Cancel', async () => {
        const ok = await confirmDialog({
          title: `Cancel the download of ${job.repository}?`,
          message: 'Files already verified stay; the partial file is removed.', confirmLabel: 'Cancel download',
        });
        if (ok) await act('cancel')();
      }, { slot: rowSlot });
      return h('div', {}, h('div', { class: 'actions' },
        can.pause ? actionButton('Pause', act('pause'), { slot: rowSlot }) : null,
        can.resume ? actionButton('Resume', act('resume'), { slot: rowSlot }) : null,
        can.cancel ? cancel : null), rowSlot);
    }

    function renderJobs() {
      const rows = [...jobs.values()].sort((a, b) => b.created_at - a.created_at);
      replace(jobsBody, table({
        caption: 'Download jobs, newest first',
        columns: [
          { key: 'repository', label: 'Repository', rowHeader: true, class: 'wrap' },
          { key: 'state', label: 'State', cell: (j) => badge(JOB_STATE[j.state] || j.state, j.state) },
          { key: 'progress', label: 'Progress', cell: jobProgress },
          { key: 'actions', label: 'Actions', cell: jobButtons },
        ],
        rows, rowKey: (j) => j.id, empty: 'No download job yet.',
      }));
    }

    async function loadLibrary() {
      showError(librarySlot, null);
      try {
        const library = await ctx.api.get('/site/download/library');
        for (const job of library.jobs || []) {
          jobs.set(job.id, job);
          follow(job);
        }
        renderJobs();
        replace(libraryBody, table({
          caption: `Downloaded files (in ${library.dir || 'the downloads folder'})`,
          columns: [
            { key: 'path', label: 'File', rowHeader: true, class: 'wrap' },
            { key: 'size', label: 'Size', class: 'num', cell: (a) => formatBytes(a.size) },
            { key: 'sha256', label: 'SHA-256', cell: (a) => h('span', { class: 'hash' }, a.sha256 || '—') },
            { key: 'origin', label: 'Origin', class: 'wrap' },
          ],
          rows: library.artifacts || [], rowKey: (a) => a.path, empty: 'Nothing has been downloaded yet.',
        }));
      } catch (exc) {
        showError(librarySlot, exc, { title: 'The library could not be read' });
      }
    }

    // -- search, repository, plan -----------------------------------------------------
    async function search(query, cursor) {
      showError(searchSlot, null);
      if (!cursor) ctx.setParams({ ...ctx.params, q: query });
      try {
        const answer = await ctx.api.post(cursor ? '/site/download/search-page' : '/site/download/search',
          { query, limit: 20, cursor: cursor || undefined });
        const rows = answer.results || [];
        const more = answer.next_cursor
          ? h('button', { type: 'button', onclick: () => search(query, answer.next_cursor) }, 'More results') : null;
        const list = table({
          caption: `Repositories matching “${query}”`,
          columns: [
            { key: 'id', label: 'Repository', rowHeader: true, class: 'wrap' },
            { key: 'downloads', label: 'Downloads', class: 'num', cell: (r) => formatCount(r.downloads) },
            { key: 'likes', label: 'Likes', class: 'num', cell: (r) => formatCount(r.likes) },
            { key: 'gated', label: 'Access', cell: (r) => (r.gated ? `gated (${r.gated})` : 'open') },
            {
              key: 'pick', label: 'Files',
              cell: (r) => h('button', { type: 'button', 'aria-label': `Choose files of ${r.id}`, onclick: () => openRepo(r.id) }, 'Choose files'),
            },
          ],
          rows, rowKey: (r) => r.id, empty: 'No repository matches.',
        });
        if (cursor) results.append(list, more || '');
        else replace(results, list, more);
      } catch (exc) {
        showError(searchSlot, exc, { title: 'The search failed' });
      }
    }

    async function openRepo(repoId) {
      ctx.setParams({ ...ctx.params, repo: repoId });
      showError(repoSlot, null);
      replace(repoBody, h('p', { class: 'muted' }, `Reading ${repoId}…`));
      try {
        const repo = await ctx.api.post('/site/download/repository', { repository: repoId });
        repoState = { repo, selected: new Set(), plan: null };
        renderRepo();
      } catch (exc) {
        replace(repoBody);
        showError(repoSlot, exc, { title: `${repoId} could not be read` });
      }
    }

    function planBody() {
      const s = repoState;
      return { repository: s.repo.repository, revision: s.repo.commit, files: [...s.selected], mode: 'explicit' };
    }

    async function makePlan() {
      repoState.plan = await ctx.api.post('/site/download/plan', planBody());
      renderRepo();
    }

    function fileTable() {
      const s = repoState;
      const flagged = new Set((s.repo.security && s.repo.security.flagged) || []);
      return table({
        caption: `Files of ${s.repo.repository} at ${String(s.repo.commit).slice(0, 12)}`,
        columns: [
          {
            key: 'pick', label: 'Pick',
            cell: (f) => h('input', {
              type: 'checkbox', 'aria-label': `Pick ${f.path}`, checked: s.selected.has(f.path),
              onchange: (ev) => {
                if (ev.target.checked) s.selected.add(f.path);
                else s.selected.delete(f.path);
                s.plan = null;
                renderRepo();
              },
            }),
          },
          { key: 'path', label: 'File', rowHeader: true, class: 'wrap', cell: (f) => [f.path, flagged.has(f.path) ? [' ', badge('failed', 'flagged unsafe')] : null] },
          { key: 'size', label: 'Size', class: 'num', cell: (f) => formatBytes(f.size) },
          { key: 'sha256', label: 'SHA-256 (LFS)', cell: (f) => h('span', { class: 'hash' }, f.sha256 || '—') },
        ],
        rows: s.repo.files || [], rowKey: (f) => f.path, empty: 'The repository lists no file.',
      });
    }

    function planView() {
      const plan = repoState.plan;
      const startSlot = h('div');
      const replaceBox = h('input', { type: 'checkbox', name: 'confirm_replace' });
      const unsafeBox = h('input', { type: 'checkbox', name: 'confirm_unsafe' });
      const blockers = h('ul', {});
      const start = actionButton('Start download', async () => {
        const job = await ctx.api.post('/site/download/jobs', {
          ...planBody(), confirm_replace: replaceBox.checked, confirm_unsafe: unsafeBox.checked,
        });
        jobs.set(job.id, job);
        renderJobs();
        follow(job);
        repoState.plan = null;
        repoState.selected.clear();
        renderRepo();
      }, { slot: startSlot, busyLabel: 'Starting…' });
      const update = () => {
        const left = remainingBlockers(plan, { confirmReplace: replaceBox.checked, confirmUnsafe: unsafeBox.checked });
        replace(blockers, left.map((b) => h('li', {}, b)));
        start.disabled = left.length > 0;
      };
      replaceBox.addEventListener('change', update);
      unsafeBox.addEventListener('change', update);
      update();
      return h('section', { 'aria-labelledby': 'plan-title', class: 'card' },
        h('h2', { id: 'plan-title' }, 'Plan'),
        h('p', { role: 'status' }, badge(plan.fits ? 'ready' : 'failed', plan.fits ? 'fits' : 'does not fit'), ' ',
          planVerdict(plan, formatBytes)),
        h('p', {}, `${plan.files.length} files to fetch`, plan.skipped.length ? `; ${plan.skipped.length} already present (skipped)` : '', '.'),
        plan.replacements.length ? h('label', {}, replaceBox, `Replace ${plan.replacements.length} files that differ`) : null,
        plan.unsafe.length ? h('label', {}, unsafeBox, `Download the ${plan.unsafe.length} files the hub flags as unsafe`) : null,
        blockers, h('div', { class: 'actions' }, start), startSlot);
    }

    function renderRepo() {
      const s = repoState;
      const planSlot = h('div');
      const planButton = actionButton('Plan download', makePlan, { slot: planSlot, busyLabel: 'Planning…' });
      planButton.disabled = s.selected.size === 0;
      const refused = s.repo.refused_names || [];
      replace(repoBody,
        h('h2', {}, s.repo.repository),
        h('p', { class: 'muted' }, `License ${s.repo.license || 'not stated'} · ${s.repo.gated ? `gated (${s.repo.gated})` : 'open'} · `
          + `${formatBytes(s.repo.total_bytes)} in ${(s.repo.files || []).length} files`),
        fileTable(),
        refused.length ? h('p', {}, `Not offered (unsafe names): ${refused.map((r) => `${r.path} (${r.reason})`).join(', ')}`) : null,
        h('div', { class: 'actions' }, planButton), planSlot,
        s.plan ? planView() : null);
    }

    function renderMain() {
      const input = h('input', { type: 'search', name: 'q', id: 'download-q', value: ctx.params.q || '', required: true });
      const form = h('form', { role: 'search', class: 'filters' },
        h('label', { for: 'download-q' }, 'Search the hub'), input,
        h('button', { type: 'submit', class: 'primary' }, 'Search'));
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        if (input.value.trim()) search(input.value.trim());
      });
      const rescan = actionButton('Rescan', async () => {
        await ctx.api.post('/site/download/rescan');
        await loadLibrary();
      }, { slot: librarySlot, busyLabel: 'Rescanning…' });
      replace(main,
        h('section', { 'aria-label': 'Search' }, form, searchSlot, results),
        h('section', { 'aria-label': 'Repository' }, repoSlot, repoBody),
        h('section', { 'aria-labelledby': 'jobs-title' }, h('h2', { id: 'jobs-title' }, 'Jobs'), jobsBody),
        h('section', { 'aria-labelledby': 'library-title' },
          h('div', { class: 'section-head' }, h('h2', { id: 'library-title' }, 'Library'), rescan), librarySlot, libraryBody));
    }

    try {
      const caps = await ctx.api.get('/site/download/capabilities');
      const node = (caps.nodes || [])[0] || {};
      const cap = node.capability || {};
      if (!cap.enabled) {
        replace(intro, h('p', { class: 'unavailable' },
          `Downloads are off on this router: ${cap.reason || 'set downloads.enabled to true in router.yaml'}.`));
        return undefined;
      }
      replace(intro, h('p', { class: 'muted' }, `Source: ${cap.endpoint || 'Hugging Face'}`,
        cap.reachable === false ? ` (not reachable: ${cap.reason})` : ''));
    } catch (exc) {
      const words = unavailableText(exc);
      if (words) replace(intro, h('p', { class: 'unavailable' }, words));
      else showError(topSlot, exc, { title: 'The download capabilities could not be read' });
      return undefined;
    }
    renderMain();
    await Promise.all([
      loadLibrary(),
      ctx.params.q ? search(ctx.params.q) : null,
      ctx.params.repo ? openRepo(ctx.params.repo) : null,
    ]);
    return () => {
      for (const events of streams.values()) events.stop();
      streams.clear();
    };
  },
};
