// Config: view, create and edit a .kcpps through the config-file routes. Every check is the
// router's own parser (preview); stripped keys are listed; a diff is shown before saving;
// after a save the catalog's `catalog` event refreshes the file list without a reload.
import { ApiError } from '../lib/api.js';
import { changed, lineDiff } from '../lib/diff.js';
import { h, replace } from '../lib/dom.js';
import { RESYNC, liveState } from '../lib/sse.js';
import { badge, confirmDialog, errorBox, navPage, pageHeader, showError, table } from '../lib/ui.js';
import { pageHref } from '../lib/url.js';

const NEW_TEMPLATE = { backend_mode: 'llama_sdcpp', model_param: '/path/to/model.gguf', contextsize: 4096 };
const STRIPPED = new Set(['refused_key', 'router_owned_key']);

export const pretty = (options) => JSON.stringify(options, null, 2);
// Trailing commas dropped, so adding a key does not mark the line before it as changed.
const diffable = (options) => (options ? pretty(options).replace(/,$/gm, '') : '');

// Pure: the textarea's text as an options object, or an Error saying why not.
export function parseOptions(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (exc) {
    return new Error(`The text is not JSON: ${exc.message}`);
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    return new Error('A .kcpps file is one JSON object ({"key": value, ...}).');
  }
  return value;
}

function findingsList(findings) {
  if (!findings.length) return h('p', { class: 'ok-box' }, 'The router accepts this configuration.');
  return h('ul', { class: 'findings', 'aria-label': 'What the router says' }, findings.map((f) =>
    h('li', { 'data-code': f.code },
      badge(f.severity === 'error' ? 'error' : f.severity === 'warning' ? 'busy' : 'neutral', STRIPPED.has(f.code) ? 'stripped' : f.severity),
      ' ', h('code', {}, f.field || ''), ' ', f.message)));
}

function diffView(diff) {
  return h('div', { class: 'diff', 'aria-label': 'Changes to be written' },
    diff.map((d) => h('span', { class: d.op }, `${d.op === 'add' ? '+ ' : d.op === 'del' ? '- ' : '  '}${d.line}`)));
}

export default navPage('config', 'Config', {
  async mount(root, ctx) {
    const id = ctx.params.id || '';
    const creating = ctx.params.new === '1' || !!ctx.params.new;
    const listSlot = h('div', {}, h('p', { class: 'muted' }, 'Reading the catalog…'));
    const editorSlot = h('div');
    root.append(
      pageHeader('Config', h('div', { class: 'actions' },
        h('a', { href: pageHref('config', { new: 1 }), class: 'button-link' }, 'New configuration'))),
      editorSlot,
      h('section', { 'aria-labelledby': 'files-h' }, h('h2', { id: 'files-h' }, 'Configuration files'), listSlot));

    const renderList = (answer) => {
      const rows = (answer.data || []).map((m) => ({ id: m.config_file.replace(/\.kcpps$/, ''), ...m }));
      const unique = [...new Map(rows.map((r) => [r.id, r])).values()];
      const broken = Object.entries(answer.errors || {}).map(([file, reason]) => ({ file, reason }));
      replace(listSlot,
        table({
          caption: 'Files the catalog serves', rows: unique, rowKey: (r) => r.id,
          columns: [
            { key: 'config_file', label: 'File', rowHeader: true,
              cell: (r) => h('a', { href: pageHref('config', { id: r.id }), 'aria-current': r.id === id ? 'true' : null }, r.config_file) },
            { key: 'backend_mode', label: 'Family' },
            { key: 'capabilities', label: 'Lanes', cell: (r) => (r.capabilities || []).join(', ') },
            { key: 'state', label: 'State', cell: (r) => badge(r.disabled ? 'disabled' : r.status) },
          ],
        }),
        broken.length ? table({
          caption: 'Files the catalog refuses', rows: broken, rowKey: (r) => r.file,
          columns: [
            { key: 'file', label: 'File', rowHeader: true },
            { key: 'reason', label: 'Why', class: 'wrap' },
          ],
        }) : null);
    };

    const live = liveState(ctx.events, {
      load: () => ctx.api.get('/models'),
      reduce: (state, event) => (event.event === 'catalog' ? RESYNC : state),
      render: renderList,
      onerror: (exc) => replace(listSlot, errorBox(exc, { title: 'The catalog could not be read' })),
    });

    if (id || creating) await mountEditor(editorSlot, ctx, { id, creating });
    return () => live.close();
  },
});

async function mountEditor(slot, ctx, { id, creating }) {
  let current = creating ? null : await readFile(slot, ctx, id);
  if (!creating && current === null) return;
  let checked = null; // the text the last preview accepted
  const nameInput = h('input', { id: 'config-id', value: id, required: true, readonly: !creating, autocomplete: 'off' });
  const text = h('textarea', {
    id: 'config-text', rows: 16, spellcheck: 'false', 'aria-describedby': 'config-findings',
    value: pretty(current ? current.options : NEW_TEMPLATE),
    oninput: () => {
      checked = null;
      save.disabled = true;
    },
  });
  const findingsSlot = h('div', { id: 'config-findings', 'aria-live': 'polite' });
  const diffSlot = h('div');
  const errorSlot = h('div');
  const check = h('button', { type: 'button', onclick: () => preview() }, 'Check');
  const save = h('button', { type: 'button', class: 'primary', disabled: true, onclick: () => apply() }, 'Save');
  const title = creating ? 'New configuration' : `Edit ${current.filename}`;
  replace(slot, h('section', { class: 'card editor', 'aria-labelledby': 'editor-h' },
    h('h2', { id: 'editor-h' }, title),
    h('div', { class: 'filters' }, h('label', { for: 'config-id' }, 'Configuration id'), nameInput),
    h('label', { for: 'config-text' }, 'Options (.kcpps JSON)'), text,
    h('div', { class: 'actions' }, check, save),
    errorSlot, findingsSlot, diffSlot,
    current && current.validation.length ? h('div', {},
      h('h3', {}, 'Keys in the file the router never uses'), findingsList(current.validation)) : null));

  const body = (options) => ({ id: nameInput.value.trim(), overwrite: !creating, options });

  async function preview() {
    showError(errorSlot, null);
    replace(findingsSlot);
    replace(diffSlot);
    save.disabled = true;
    const options = parseOptions(text.value);
    if (options instanceof Error) {
      showError(errorSlot, options, { title: 'Not saved' });
      return null;
    }
    try {
      const answer = await ctx.api.post('/site/config-file/preview', body(options));
      replace(findingsSlot, findingsList(answer.validation));
      const diff = lineDiff(diffable(current && current.options), diffable(answer.options));
      replace(diffSlot, h('h3', {}, changed(diff) ? 'What will be written' : 'No change to write'), diffView(diff));
      const refused = answer.validation.some((f) => f.severity === 'error');
      if (creating && answer.would_overwrite) {
        showError(errorSlot, new Error(`${answer.filename} exists already: open it to edit it.`), { title: 'Not saved' });
        return answer;
      }
      if (!refused && changed(diff)) {
        checked = text.value;
        save.disabled = false;
      }
      return answer;
    } catch (exc) {
      showError(errorSlot, exc, { title: 'The check failed' });
      return null;
    }
  }

  async function apply() {
    if (checked !== text.value) return;
    const ok = await confirmDialog({
      title: `Save ${nameInput.value.trim()}.kcpps?`, confirmLabel: 'Save', danger: false,
      message: 'The file is written and the catalog reloads. A running model keeps its old settings until it is loaded again.',
    });
    if (!ok) return;
    try {
      const answer = await ctx.api.post('/site/config-file/apply', body(parseOptions(text.value)));
      current = { ...answer, options: answer.options };
      replace(errorSlot, h('p', { class: 'ok-box', role: 'status' }, `Saved ${answer.filename}.`));
      save.disabled = true;
      if (creating) ctx.setParams({ id: answer.id });
    } catch (exc) {
      showError(errorSlot, exc, { title: 'Not saved' });
    }
  }
}

async function readFile(slot, ctx, id) {
  try {
    return await ctx.api.get(`/site/config-file/${encodeURIComponent(id)}`);
  } catch (exc) {
    const message = exc instanceof ApiError && exc.status === 404 ? new Error(`There is no file ${id}.kcpps on this node.`) : exc;
    replace(slot, errorBox(message, { title: 'The file could not be read' }));
    return null;
  }
}
