// Keys: the scoped keys (docs/configuration.md, "Scoped keys"). Create (the secret is shown
// once, here, and never again), list with today's token use against the quota, change (the
// form filled from the row; PATCH of what changed), revoke (confirmed; the key's next request
// is refused). GET/POST /keys, PATCH/DELETE /keys/{name}. Below the list, each key's use over
// the last 24 hours (requests, errors, tokens, queue wait) from the analytics summary's per-key
// grouping (GET /site/analytics). First load: these two calls.
import { h, replace } from '../lib/dom.js';
import { formatCount, formatDateTime, formatMs } from '../lib/fmt.js';
import { formOf, keyBody, modelsText, usageText } from '../lib/keys.js';
import { actionButton, badge, confirmDialog, navPage, pageHeader, progressBar, showError, table } from '../lib/ui.js';

const EMPTY = { name: '', models: '', priority: 'interactive', max_concurrent: '', daily_tokens: '' };

function field(id, label, input, hint) {
  return h('div', { class: 'key-field' }, h('label', { for: id }, label), input,
    hint ? h('span', { class: 'muted', id: `${id}-hint` }, hint) : null);
}

const quantile = (row, q) => (row.queue_wait_ms ? row.queue_wait_ms[q] : null);

// Issue 35's analytics per key; the row with no key name is the traffic no scoped key sent.
function useTable(rows) {
  return h('section', { 'aria-labelledby': 'key-use-h' },
    h('h2', { id: 'key-use-h' }, 'Use per key, last 24 hours'),
    table({
      caption: 'Requests, errors, tokens and queue wait per key',
      columns: [
        { key: 'key', label: 'Key', rowHeader: true, cell: (r) => r.key ?? '(no scoped key)' },
        { key: 'requests', label: 'Requests', class: 'num', cell: (r) => formatCount(r.requests) },
        { key: 'errors', label: 'Errors', class: 'num', cell: (r) => formatCount(r.errors) },
        { key: 'tokens', label: 'Tokens', class: 'num', cell: (r) => formatCount(r.tokens ? r.tokens.total : null) },
        { key: 'p50', label: 'Queue wait p50', class: 'num', cell: (r) => formatMs(quantile(r, 'p50')) },
        { key: 'p95', label: 'Queue wait p95', class: 'num', cell: (r) => formatMs(quantile(r, 'p95')) },
      ],
      rows,
      rowKey: (r) => r.key ?? '',
      empty: 'No request in the last 24 hours.',
    }));
}

function usage(key) {
  const quota = key.daily_tokens;
  return [usageText(key), quota ? [h('br'), progressBar(`${key.name}: tokens used today`,
    (key.tokens_today || 0) / quota)] : null];
}

export default navPage('keys', 'Keys', {
  async mount(root, ctx) {
    const slot = h('div');
    const secretSlot = h('div', { 'aria-live': 'polite' });
    const formSlot = h('div');
    const body = h('div');
    const use = h('div');
    const status = h('p', { role: 'status', class: 'muted' });
    let keys = [];
    replace(root, pageHeader('Keys'),
      h('p', { class: 'muted' }, 'Keys for people and agents: each may use the models it lists, waits in its '
        + 'class, and stops at its daily token quota. The keys in router.yaml keep working as before.'),
      secretSlot, formSlot, status, slot, body, use);

    function showSecret(made) {
      const done = h('button', { type: 'button', onclick: () => replace(secretSlot) }, 'I have copied it');
      replace(secretSlot, h('section', { class: 'card key-secret', 'aria-labelledby': 'secret-h' },
        h('h2', { id: 'secret-h' }, `The secret of ${made.name}`),
        h('p', {}, 'Copy it now: it is shown only this once (the router keeps only its digest).'),
        h('code', { class: 'hash', 'data-secret': '' }, made.secret), h('div', { class: 'actions' }, done)));
      done.focus();
    }

    function renderForm(editing = null) {
      const values = editing ? formOf(editing) : { ...EMPTY };
      const input = (name, attrs = {}) => h('input', {
        id: `key-${name}`, name, value: values[name], ...attrs,
        oninput: (ev) => { values[name] = ev.target.value; },
      });
      const priority = h('select', { id: 'key-priority', onchange: (ev) => { values.priority = ev.target.value; } },
        ['interactive', 'batch'].map((p) => h('option', { value: p, selected: values.priority === p }, p)));
      const errors = h('div', { class: 'field-error' });
      const save = actionButton(editing ? 'Save changes' : 'Create key', async () => {
        if (editing) {
          await ctx.api.request('PATCH', `/keys/${encodeURIComponent(editing.name)}`, { body: keyBody(values, editing) });
          status.textContent = `${editing.name} is changed.`;
          renderForm();
        } else {
          const made = await ctx.api.post('/keys', keyBody(values));
          status.textContent = `${made.name} is created.`;
          renderForm();
          showSecret(made);
        }
        await load();
      }, { slot: errors, cls: 'primary' });
      const cancel = editing ? h('button', { type: 'button', onclick: () => renderForm() }, 'Cancel') : null;
      replace(formSlot, h('section', { class: 'card key-form', 'aria-labelledby': 'key-form-h' },
        h('h2', { id: 'key-form-h' }, editing ? `Change ${editing.name}` : 'New key'),
        h('div', { class: 'filters' },
          field('key-name', 'Name', input('name', { readonly: Boolean(editing), autocomplete: 'off', spellcheck: 'false' })),
          field('key-models', 'Models', input('models', { placeholder: 'every model', spellcheck: 'false' }),
            'IDs or patterns (qwen3-*), comma-separated'),
          field('key-priority', 'Class', priority),
          field('key-max_concurrent', 'At once', input('max_concurrent', { type: 'number', min: 1, step: 1, placeholder: 'no cap' })),
          field('key-daily_tokens', 'Tokens per day', input('daily_tokens', { type: 'number', min: 1, step: 1, placeholder: 'no quota' }))),
        h('div', { class: 'actions' }, save, cancel), errors));
      if (editing) formSlot.querySelector('#key-models').focus();
    }

    function actions(key) {
      if (key.revoked) return h('span', { class: 'muted' }, `revoked ${formatDateTime(key.revoked)}`);
      const edit = h('button', { type: 'button', 'aria-label': `Change ${key.name}`, onclick: () => renderForm(key) }, 'Change');
      const revoke = actionButton('Revoke', async () => {
        const ok = await confirmDialog({
          title: `Revoke ${key.name}?`,
          message: 'Its next request is refused (401). This cannot be undone; the name stays taken.',
          confirmLabel: 'Revoke',
        });
        if (!ok) return;
        await ctx.api.del(`/keys/${encodeURIComponent(key.name)}`);
        status.textContent = `${key.name} is revoked.`;
        await load();
      }, { slot });
      revoke.setAttribute('aria-label', `Revoke ${key.name}`);
      return h('div', { class: 'actions' }, edit, revoke);
    }

    function render() {
      const live = keys.filter((k) => !k.revoked).length;
      replace(body, table({
        caption: `Live: ${live}, revoked: ${keys.length - live}`,
        columns: [
          { key: 'name', label: 'Name', rowHeader: true },
          { key: 'state', label: 'State', cell: (k) => badge(k.revoked ? 'disabled' : 'enabled', k.revoked ? 'revoked' : 'live') },
          { key: 'models', label: 'Models', class: 'wrap', cell: modelsText },
          { key: 'priority', label: 'Class' },
          { key: 'max_concurrent', label: 'At once', cell: (k) => (k.max_concurrent ?? 'no cap') },
          { key: 'usage', label: 'Usage', cell: usage },
          { key: 'created', label: 'Created', cell: (k) => formatDateTime(k.created) },
          { key: 'actions', label: 'Actions', cell: actions },
        ],
        rows: keys,
        rowKey: (k) => k.name,
        empty: 'No scoped keys yet: create one above.',
      }));
    }

    async function load() {
      showError(slot, null);
      try {
        const [listed, summary] = await Promise.all([ctx.api.get('/keys'), ctx.api.get('/site/analytics')]);
        keys = listed.data || [];
        render();
        replace(use, useTable(summary.keys || []));
      } catch (exc) {
        showError(slot, exc, { title: 'The keys could not be read' });
      }
    }

    renderForm();
    await load();
  },
});
