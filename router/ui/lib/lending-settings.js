// The Lending page's settings: every lending key with its default, the config file's value,
// the value saved from here and the effective one, an input per key by type, Save (POST of the
// changed keys only; a refused batch names its key and keeps what was typed), Default per key
// (POST null) and Default for all (DELETE). GET/POST/DELETE /site/offload/settings.
import { h, replace } from './dom.js';
import { focusIfLost } from './focus.js';
import { missingRoute } from './lending-live.js';
import { keyOfError, settingText, settingsBody } from './lending.js';
import { actionButton, confirmDialog, errorBox, showError, table } from './ui.js';

const ROUTE = '/site/offload/settings';

function inputFor(row, inputs) {
  const id = `setting-${row.key}`;
  if (row.type === 'boolean') {
    return h('input', {
      id, type: 'checkbox', checked: Boolean(inputs[row.key]), 'aria-describedby': `${id}-error`,
      onchange: (ev) => { inputs[row.key] = ev.target.checked; },
    });
  }
  const attrs = row.type === 'integer'
    ? { type: 'number', step: 1, min: row.min ?? null, max: row.max ?? null, inputmode: 'numeric' }
    : { type: 'text', placeholder: 'e.g. 45s, 10m, 2h', spellcheck: 'false' };
  return h('input', {
    id, ...attrs, value: inputs[row.key], size: 10, 'aria-describedby': `${id}-error`,
    oninput: (ev) => { inputs[row.key] = ev.target.value; },
  });
}

function shown(row, value) {
  return value === null || value === undefined ? '—' : settingText(row.type, value);
}

export async function mountSettings(root, ctx) {
  const status = h('p', { role: 'status', class: 'muted', tabindex: '-1' });
  const note = h('div');
  const slot = h('div');
  const body = h('div');
  replace(root, h('h2', {}, 'Settings'),
    h('p', { class: 'muted' }, 'The lending keys (cluster.* in router.yaml). A value saved here overrides the config file '
      + "until Default puts the file's value back; the master passes the values in force to every slave."),
    note, status, slot, body);
  let inputs = {};

  function render(answer, keep = {}) {
    const settings = answer.settings || [];
    inputs = Object.fromEntries(settings.map((s) => [s.key,
      s.key in keep ? keep[s.key] : s.type === 'boolean' ? Boolean(s.effective) : settingText(s.type, s.effective)]));
    replace(note, answer.hot_reload === false
      ? h('p', { class: 'muted' }, 'This router reads some of these at start: a saved value applies after a restart.') : null);
    const formError = h('div', { id: 'settings-error' });
    const save = actionButton('Save settings', async () => {
      status.textContent = '';
      const batch = settingsBody(settings, inputs);
      if (!Object.keys(batch.settings).length) {
        status.textContent = 'Nothing changed: every input holds the value in force.';
        return;
      }
      try {
        const next = await ctx.api.post(ROUTE, batch);
        status.textContent = `Saved ${Object.keys(batch.settings).join(', ')}.`;
        render(next);
        focusIfLost(body.querySelector('button.primary'));
      } catch (exc) {
        const key = mark(settings, exc);
        if (!key) throw exc;
        replace(formError, errorBox(`Nothing was saved: the router refused ${key} (see its row).`));
      }
    }, { slot: formError, cls: 'primary' });
    const resetAll = actionButton('Default for all', async () => {
      const ok = await confirmDialog({
        title: 'Put every lending setting back to the config file?',
        message: 'Every value saved here is removed.', confirmLabel: 'Default for all',
      });
      if (!ok) return;
      render(await ctx.api.del(ROUTE));
      status.textContent = 'Every setting is back to the config file\'s value.';
      focusIfLost(status);
    }, { slot: formError, cls: 'danger' });
    replace(body, h('form', { class: 'settings-form', 'aria-label': 'Lending settings', onsubmit: (ev) => ev.preventDefault() },
      table({
        caption: `${settings.length} lending settings`,
        rows: settings, rowKey: (s) => s.key,
        columns: [
          { key: 'key', label: 'Key', rowHeader: true, class: 'wrap', cell: (s) => [
            h('label', { for: `setting-${s.key}`, class: 'hash' }, s.key),
            s.description ? [h('br'), h('span', { class: 'muted' }, s.description)] : null] },
          { key: 'default', label: 'Default', cell: (s) => shown(s, s.default) },
          { key: 'config', label: 'Config file', cell: (s) => shown(s, s.config) },
          { key: 'saved', label: 'Saved here', cell: (s) => shown(s, s.saved) },
          { key: 'effective', label: 'In force', cell: (s) => h('strong', {}, shown(s, s.effective)) },
          { key: 'input', label: 'New value', cell: (s) => [inputFor(s, inputs),
            h('div', { id: `setting-${s.key}-error`, class: 'field-error' })] },
          { key: 'reset', label: 'Default', cell: (s) => {
            const button = actionButton('Default', async () => {
              const next = await ctx.api.post(ROUTE, { settings: { [s.key]: null } });
              status.textContent = `${s.key} is back to the config file's value.`;
              render(next, others(settings, s.key));
              focusIfLost(status);
            }, { slot: formError });
            button.setAttribute('aria-label', `Default for ${s.key}`);
            button.disabled = s.saved === null || s.saved === undefined;
            return button;
          } },
        ],
      }),
      formError, h('div', { class: 'actions' }, save, resetAll)));
  }

  // What the user typed in the other rows survives a per-key Default.
  function others(settings, key) {
    return Object.fromEntries(settings.filter((s) => s.key !== key).map((s) => [s.key, inputs[s.key]]));
  }

  function mark(settings, exc) {
    for (const el of body.querySelectorAll('.field-error')) replace(el);
    for (const el of body.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
    const key = keyOfError(settings, exc);
    if (!key) return null;
    replace(body.querySelector(`#setting-${key}-error`), errorBox(exc));
    body.querySelector(`#setting-${key}`).setAttribute('aria-invalid', 'true');
    return key;
  }

  try {
    render(await ctx.api.get(ROUTE));
  } catch (exc) {
    if (missingRoute(exc)) {
      replace(body, h('p', { class: 'unavailable' }, 'Lending settings are not available on this router: this version '
        + 'has no settings route. The cluster.* keys in router.yaml apply, read at start.'));
    } else {
      showError(slot, exc, { title: 'The lending settings could not be read' });
    }
  }
}
