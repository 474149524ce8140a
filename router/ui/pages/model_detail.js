// The Models page's detail view (?model=): the sanitized .kcpps, its components and files with
// hashes, the KV cache probe's verdict with the last save and restore, the saved conversations
// (with a Drop button), and the prompt cache hit rate, from the site inventory and the config-file read (two calls, once per opened model).
import { h, replace } from '../lib/dom.js';
import { actionButton, badge, confirmDialog, errorBox, formatBytes, table } from '../lib/ui.js';
import { pageHref } from '../lib/url.js';
import { formatDateTime } from '../lib/fmt.js';

function filesTable(id, components) {
  return table({
    caption: `Files of ${id}`, rows: components || [], rowKey: (c) => `${c.field}${c.position ?? ''}`,
    columns: [
      { key: 'field', label: 'Field', cell: (c) => (c.position === null || c.position === undefined ? c.field : `${c.field}[${c.position}]`) },
      { key: 'filename', label: 'File', class: 'wrap' },
      { key: 'present', label: 'Present', cell: (c) => (c.present ? 'yes' : badge('missing')) },
      { key: 'size', label: 'Size', class: 'num', cell: (c) => formatBytes(c.size) },
      { key: 'sha256', label: 'SHA-256', class: 'hash', cell: (c) => c.sha256 || '—' },
    ],
  });
}

function facts(record) {
  return h('dl', { class: 'facts' },
    h('dt', {}, 'File'), h('dd', {}, record.filename),
    h('dt', {}, 'Config hash'), h('dd', { class: 'hash' }, record.config_hash),
    h('dt', {}, 'Model hash'), h('dd', { class: 'hash' }, record.model_hash || '—'),
    h('dt', {}, 'State'), h('dd', {}, badge(record.enabled ? record.state : 'disabled')));
}

// KV persistence (docs/swaps.md): the `.kcpps` mode, whether it is on, and the stored probe
// verdict for the configuration as it would launch now (`auto` only). Null: never applies.
const PERSIST_NOTE = {
  on: 'On (router_kv_persist: on): no probe needed.',
  off: 'Off (router_kv_persist: off).',
};

function probeFacts(probe) {
  if (!probe) return [h('p', {}, 'Not probed yet: the probe runs at the next load, before the first request.')];
  const verdict = probe.passed ? badge('passed') : badge('failed', 'rejected');
  const rows = [h('dt', {}, 'Probe'), h('dd', {}, verdict), h('dt', {}, 'Probed at'), h('dd', {}, formatDateTime(probe.at))];
  if (probe.error) rows.push(h('dt', {}, 'Error'), h('dd', { class: 'wrap' }, probe.error));
  else {
    rows.push(h('dt', {}, 'Cached after restore'), h('dd', {}, `${probe.cached_tokens} of ${probe.prompt_tokens} prompt tokens`),
      h('dt', {}, 'Same greedy answer'), h('dd', {}, probe.same_answer ? 'yes' : 'no'));
  }
  return [h('dl', { class: 'facts', 'aria-label': 'KV cache probe' }, ...rows)];
}

// The last save and restore of this run (kv_cache events): result, what moved, why not.
function movedText(entry) {
  const parts = [];
  if (entry.conversations !== undefined) parts.push(`${entry.conversations} conversation${entry.conversations === 1 ? '' : 's'}`);
  else if (entry.slots !== undefined) parts.push(`${entry.slots} slot${entry.slots === 1 ? '' : 's'}`);
  if (entry.tokens !== undefined) parts.push(`${entry.tokens} tokens`);
  return parts.join(', ');
}

function lastFacts(label, entry) {
  if (!entry) return [h('dt', {}, label), h('dd', {}, 'none since the router started')];
  const kind = entry.result === 'ok' ? 'passed' : (entry.result === 'none' ? 'unloaded' : 'failed');
  const text = [movedText(entry), entry.reason, formatDateTime(entry.time)].filter(Boolean).join(' · ');
  return [h('dt', {}, label), h('dd', { class: 'wrap' }, badge(kind, entry.result), ' ', text)];
}

function kvHistory(kv) {
  const rows = [...lastFacts('Last save', kv.save), ...lastFacts('Last restore', kv.restore)];
  const warning = kv.warning ? [h('div', { class: 'error-box', role: 'alert' }, kv.warning)] : [];
  return [...warning, h('dl', { class: 'facts', 'aria-label': 'KV cache saves and restores' }, ...rows)];
}

function kvSection(kv) {
  if (!kv) return [];
  const head = h('h3', {}, 'KV cache persistence');
  if (kv.mode !== 'auto') return [head, h('p', {}, PERSIST_NOTE[kv.mode] || kv.mode), ...(kv.mode === 'off' ? [] : kvHistory(kv))];
  const state = kv.enabled ? 'On: the probe passed.' : 'Off until a probe passes (router_kv_persist: auto).';
  return [head, h('p', {}, state), ...probeFacts(kv.probe), ...kvHistory(kv)];
}

// The conversation library's saved states of this configuration (counts, never a prompt) and
// the way to erase them: the unload API's forget_conversations (admin) with no target, so
// nothing is unloaded; a loaded model forgets them too and never saves them again
// (docs/swaps.md, "Erasing").
function librarySection(ctx, id, saved, again) {
  if (!saved) return [];
  const head = h('h3', {}, 'Saved conversations');
  if (!saved.count) return [head, h('p', {}, 'None saved.')];
  const slot = h('div');
  const drop = actionButton('Drop saved conversations', async () => {
    const ok = await confirmDialog({
      title: `Drop the saved conversations of ${id}?`,
      message: 'Their KV states are erased from disk. Loaded models stay loaded and will not save them again.',
      confirmLabel: 'Drop',
    });
    if (!ok) return;
    await ctx.api.post('/unload', { forget_conversations: id });
    again();
  }, { slot, cls: 'danger' });
  const plural = saved.count === 1 ? '' : 's';
  return [head, h('dl', { class: 'facts', 'aria-label': 'Saved conversations' },
    h('dt', {}, 'Conversations'), h('dd', {}, `${saved.count} conversation${plural}, ${saved.tokens} tokens`),
    h('dt', {}, 'On disk'), h('dd', {}, formatBytes(saved.bytes)),
    h('dt', {}, 'Last used'), h('dd', {}, formatDateTime(saved.last_used))),
  h('div', { class: 'actions' }, drop), slot];
}

// The share of prompt tokens the backend took from its cache over recent requests (those whose
// answer reported a cached count: OpenAI and Anthropic shapes; Ollama's has no field).
function promptCacheSection(share) {
  if (!share) return [];
  const head = h('h3', {}, 'Prompt cache');
  if (!share.requests) return [head, h('p', {}, 'No recent request reported a cached count.')];
  const rate = share.share === null ? '—' : `${(share.share * 100).toFixed(1)} %`;
  return [head, h('dl', { class: 'facts', 'aria-label': 'Prompt cache hit rate' },
    h('dt', {}, 'Cache hit rate'), h('dd', {}, rate),
    h('dt', {}, 'Cached prompt tokens'), h('dd', {}, `${share.cached_tokens} of ${share.prompt_tokens}, last ${share.requests} requests`))];
}

// The Lending page's links editor with this model as the anchor (its lane: image for an
// image-only configuration, else text).
function lendingHref(ctx, record, id) {
  const node = record.node_id || (ctx.session && ctx.session.node && ctx.session.node.node_id) || '';
  const lanes = record.capabilities || [];
  const lane = lanes.includes('image') && !lanes.includes('text') ? 'image' : 'text';
  return pageHref('lending', { section: 'links', lane, node, model: id });
}

// Fills `slot` for params.model; `current()` tells whether that model is still the one asked
// for when the answers arrive (the user may have moved on).
export async function renderDetail(slot, ctx, params, current) {
  replace(slot);
  const id = params.model;
  if (!id) return;
  const close = h('a', { href: pageHref('models', { ...params, model: '' }) }, 'Close');
  const title = () => h('h2', { id: 'detail-h' }, `Configuration ${id}`);
  const box = h('section', { class: 'card detail', 'aria-labelledby': 'detail-h' },
    title(), close, h('p', { class: 'muted' }, 'Reading…'));
  replace(slot, box);
  try {
    const inventory = await ctx.api.get('/site/inventory');
    const record = (inventory.models || []).find((m) => m.id === id || m.image_id === id);
    if (!record) throw new Error(`${id} is not a configuration on this node`);
    const stem = record.filename.replace(/\.kcpps$/, '');
    const file = await ctx.api.get(`/site/config-file/${encodeURIComponent(stem)}`);
    if (current() !== id) return;
    replace(box, title(), close, facts(record),
      h('h3', {}, 'Components and files'), filesTable(id, record.components),
      ...kvSection(record.kv_persist),
      ...librarySection(ctx, record.id, record.kv_persist && record.kv_persist.conversations,
        () => renderDetail(slot, ctx, params, current)),
      ...promptCacheSection(record.prompt_cache),
      h('h3', {}, 'Sanitized .kcpps'),
      h('pre', { 'aria-label': `Sanitized ${record.filename}` }, JSON.stringify(file.sanitized, null, 2)),
      h('p', {}, h('a', { href: pageHref('config', { id: file.id }) }, `Edit ${file.filename}`), ' · ',
        h('a', { href: lendingHref(ctx, record, id) }, `Lending links of ${id}`)));
  } catch (exc) {
    if (current() === id) box.append(errorBox(exc, { title: 'The detail could not be read' }));
  }
}
