// Download: search the hub, pick a repository's files, see the plan (sizes against free
// space) before anything starts, then follow jobs live (lib/download-jobs.js: bytes, rate,
// ETA from each job's event stream; pause, resume, cancel) and the library.
// The search and the chosen repository are in the URL (`q`, `repo`).
// First load: capabilities and the library (two calls), plus the search and the repository
// when the URL names them.
import { h, replace } from '../lib/dom.js';
import { jobsPanel } from '../lib/download-jobs.js';
import { formatCount } from '../lib/fmt.js';
import { planVerdict, remainingBlockers } from '../lib/jobs.js';
import { actionButton, badge, formatBytes, navPage, pageHeader, showError, table } from '../lib/ui.js';

function unavailableText(exc) {
  if (exc.status === 501) return 'Downloads are not available on this router: this version does not offer them.';
  if (exc.code === 'downloads_disabled') return 'Downloads are off on this router: set downloads.enabled to true in router.yaml.';
  return null;
}

function resultsTable(query, rows, onpick) {
  return table({
    caption: `Repositories matching “${query}”`,
    columns: [
      { key: 'id', label: 'Repository', rowHeader: true, class: 'wrap' },
      { key: 'downloads', label: 'Downloads', class: 'num', cell: (r) => formatCount(r.downloads) },
      { key: 'likes', label: 'Likes', class: 'num', cell: (r) => formatCount(r.likes) },
      { key: 'gated', label: 'Access', cell: (r) => (r.gated ? `gated (${r.gated})` : 'open') },
      {
        key: 'pick', label: 'Files',
        cell: (r) => h('button', { type: 'button', 'aria-label': `Choose files of ${r.id}`, onclick: () => onpick(r.id) }, 'Choose files'),
      },
    ],
    rows, rowKey: (r) => r.id, empty: 'No repository matches.',
  });
}

function fileTable(state, onchange) {
  const flagged = new Set((state.repo.security && state.repo.security.flagged) || []);
  return table({
    caption: `Files of ${state.repo.repository} at ${String(state.repo.commit).slice(0, 12)}`,
    columns: [
      {
        key: 'pick', label: 'Pick',
        cell: (f) => h('input', {
          type: 'checkbox', 'aria-label': `Pick ${f.path}`, checked: state.selected.has(f.path),
          onchange: (ev) => onchange(f.path, ev.target.checked),
        }),
      },
      { key: 'path', label: 'File', rowHeader: true, class: 'wrap', cell: (f) => [f.path, flagged.has(f.path) ? [' ', badge('failed', 'flagged unsafe')] : null] },
      { key: 'size', label: 'Size', class: 'num', cell: (f) => formatBytes(f.size) },
      { key: 'sha256', label: 'SHA-256 (LFS)', cell: (f) => h('span', { class: 'hash' }, f.sha256 || '—') },
    ],
    rows: state.repo.files || [], rowKey: (f) => f.path, empty: 'The repository lists no file.',
  });
}

// The plan card: the verdict in words, the confirmations it needs, and Start (enabled only
// once nothing blocks it). `start(confirm)` posts the job.
function planCard(plan, start) {
  const slot = h('div');
  const replaceBox = h('input', { type: 'checkbox', name: 'confirm_replace' });
  const unsafeBox = h('input', { type: 'checkbox', name: 'confirm_unsafe' });
  const blockers = h('ul', {});
  const button = actionButton('Start download',
    () => start({ confirm_replace: replaceBox.checked, confirm_unsafe: unsafeBox.checked }),
    { slot, busyLabel: 'Starting…' });
  const update = () => {
    const left = remainingBlockers(plan, { confirmReplace: replaceBox.checked, confirmUnsafe: unsafeBox.checked });
    replace(blockers, left.map((b) => h('li', {}, b)));
    button.disabled = left.length > 0;
  };
  replaceBox.addEventListener('change', update);
  unsafeBox.addEventListener('change', update);
  update();
  return h('section', { 'aria-labelledby': 'plan-title', class: 'card' },
    h('h2', { id: 'plan-title' }, 'Plan'),
    h('p', { role: 'status' }, badge(plan.fits ? 'ready' : 'failed', plan.fits ? 'fits' : 'does not fit'), ' ',
      planVerdict(plan, formatBytes)),
    h('p', {}, `${plan.files.length} files to fetch`,
      plan.skipped.length ? `; ${plan.skipped.length} already present (skipped)` : '', '.'),
    plan.replacements.length ? h('label', {}, replaceBox, `Replace ${plan.replacements.length} files that differ`) : null,
    plan.unsafe.length ? h('label', {}, unsafeBox, `Download the ${plan.unsafe.length} files the hub flags as unsafe`) : null,
    blockers, h('div', { class: 'actions' }, button), slot);
}

// Search results and the chosen repository, with its files and plan.
function browser(ctx, jobs) {
  const searchSlot = h('div');
  const results = h('div');
  const repoSlot = h('div');
  const repoBody = h('div');
  let state = null; // {repo, selected: Set, plan}

  const body = () => ({ repository: state.repo.repository, revision: state.repo.commit, files: [...state.selected], mode: 'explicit' });

  async function start(confirm) {
    jobs.add(await ctx.api.post('/site/download/jobs', { ...body(), ...confirm }));
    state.plan = null;
    state.selected.clear();
    render();
  }

  function render() {
    const planSlot = h('div');
    const planButton = actionButton('Plan download', async () => {
      state.plan = await ctx.api.post('/site/download/plan', body());
      render();
    }, { slot: planSlot, busyLabel: 'Planning…' });
    planButton.disabled = state.selected.size === 0;
    const refused = state.repo.refused_names || [];
    const pick = (path, on) => {
      if (on) state.selected.add(path);
      else state.selected.delete(path);
      state.plan = null;
      render();
    };
    replace(repoBody,
      h('h2', {}, state.repo.repository),
      h('p', { class: 'muted' }, `License ${state.repo.license || 'not stated'} · ${state.repo.gated ? `gated (${state.repo.gated})` : 'open'} · `
        + `${formatBytes(state.repo.total_bytes)} in ${(state.repo.files || []).length} files`),
      fileTable(state, pick),
      refused.length ? h('p', {}, `Not offered (unsafe names): ${refused.map((r) => `${r.path} (${r.reason})`).join(', ')}`) : null,
      h('div', { class: 'actions' }, planButton), planSlot,
      state.plan ? planCard(state.plan, start) : null);
  }

  async function openRepo(repoId) {
    ctx.setParams({ ...ctx.params, repo: repoId });
    showError(repoSlot, null);
    replace(repoBody, h('p', { class: 'muted' }, `Reading ${repoId}…`));
    try {
      state = { repo: await ctx.api.post('/site/download/repository', { repository: repoId }), selected: new Set(), plan: null };
      render();
    } catch (exc) {
      replace(repoBody);
      showError(repoSlot, exc, { title: `${repoId} could not be read` });
    }
  }

  async function search(query, cursor) {
    showError(searchSlot, null);
    if (!cursor) ctx.setParams({ ...ctx.params, q: query });
    try {
      const answer = await ctx.api.post(cursor ? '/site/download/search-page' : '/site/download/search',
        { query, limit: 20, cursor: cursor || undefined });
      const list = resultsTable(query, answer.results || [], openRepo);
      const more = answer.next_cursor
        ? h('button', { type: 'button', onclick: () => search(query, answer.next_cursor) }, 'More results') : '';
      if (cursor) results.append(list, more);
      else replace(results, list, more);
    } catch (exc) {
      showError(searchSlot, exc, { title: 'The search failed' });
    }
  }

  const input = h('input', { type: 'search', name: 'q', id: 'download-q', value: ctx.params.q || '', required: true });
  const form = h('form', { role: 'search', class: 'filters' },
    h('label', { for: 'download-q' }, 'Search the hub'), input,
    h('button', { type: 'submit', class: 'primary' }, 'Search'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (input.value.trim()) search(input.value.trim());
  });
  return {
    element: [h('section', { 'aria-label': 'Search' }, form, searchSlot, results),
      h('section', { 'aria-label': 'Repository' }, repoSlot, repoBody)],
    search,
    openRepo,
  };
}

// The capability check: null when downloads can be used, else the words that say why not.
async function capability(ctx, intro, slot) {
  try {
    const caps = await ctx.api.get('/site/download/capabilities');
    const cap = ((caps.nodes || [])[0] || {}).capability || {};
    if (!cap.enabled) return `Downloads are off on this router: ${cap.reason || 'set downloads.enabled to true in router.yaml'}.`;
    replace(intro, h('p', { class: 'muted' }, `Source: ${cap.endpoint || 'Hugging Face'}`,
      cap.reachable === false ? ` (not reachable: ${cap.reason})` : ''));
    return null;
  } catch (exc) {
    const words = unavailableText(exc);
    if (!words) showError(slot, exc, { title: 'The download capabilities could not be read' });
    return words || '';
  }
}

export default navPage('download', 'Download', {
  async mount(root, ctx) {
    const slot = h('div');
    const intro = h('div');
    const main = h('div');
    replace(root, pageHeader('Download'), slot, intro, main);
    const off = await capability(ctx, intro, slot);
    if (off !== null) {
      if (off) replace(intro, h('p', { class: 'unavailable' }, off));
      return undefined;
    }
    const jobs = jobsPanel(ctx);
    const hub = browser(ctx, jobs);
    replace(main, hub.element, jobs.element);
    await Promise.all([
      jobs.load(),
      ctx.params.q ? hub.search(ctx.params.q) : null,
      ctx.params.repo ? hub.openRepo(ctx.params.repo) : null,
    ]);
    return () => jobs.stop();
  },
});
