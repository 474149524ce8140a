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

// The inputs' values: what is in force, or what the user typed (`keep`) where it survives.
function initialInputs(settings, keep) {
  return Object.fromEntries(settings.map((s) => [s.key,
    s.key in keep ? keep[s.key] : s.type === 'boolean' ? Boolean(s.effective) : settingText(s.type, s.effective)]));
}

function columns(inputs, resetButton) {
  return [
    { key: 'key', label: 'Key', rowHeader: true, class: 'wrap', cell: (s) => [
      h('label', { for: `setting-${s.key}`, class: 'hash' }, s.key),
      s.description ? [h('br'), h('span', { class: 'muted' }, s.description)] : null] },
    { key: 'default', label: 'Default', cell: (s) => shown(s, s.default) },
    { key: 'config', label: 'Config file', cell: (s) => shown(s, s.config) },
    { key: 'saved', label: 'Saved here', cell: (s) => shown(s, s.saved) },
    { key: 'effective', label: 'In force', cell: (s) => h('strong', {}, shown(s, s.effective)) },
    { key: 'input', label: 'New value', cell: (s) => [inputFor(s, inputs),
      h('div', { id: `setting-${s.key}-error`, class: 'field-error' })] },
    { key: 'reset', label: 'Default', cell: resetButton },
  ];
}

// A refused batch: the message under the input of the key it names (marked invalid).
function markRefused(view, exc) {
  for (const el of view.body.querySelectorAll('.field-error')) replace(el);
  for (const el of view.body.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  const key = keyOfError(view.settings, exc);
  if (!key) return null;
  replace(view.body.querySelector(`#setting-${key}-error`), errorBox(exc));
  view.body.querySelector(`#setting-${key}`).setAttribute('aria-invalid', 'true');
  return key;
}

async function saveChanged(view, formError) {
  view.status.textContent = '';
  const batch = settingsBody(view.settings, view.inputs);
  if (!Object.keys(batch.settings).length) {
    view.status.textContent = 'Nothing changed: every input holds the value in force.';
    return;
  }
  try {
    const next = await view.ctx.api.post(ROUTE, batch);
    view.status.textContent = `Saved ${Object.keys(batch.settings).join(', ')}.`;
    view.render(next);
    focusIfLost(view.body.querySelector('button.primary'));
  } catch (exc) {
    const key = markRefused(view, exc);
    if (!key) throw exc;
    replace(formError, errorBox(`Nothing was saved: the router refused ${key} (see its row).`));
  }
}

async function resetEverything(view) {
  const ok = await confirmDialog({
    title: 'Put every lending setting back to the config file?',
    message: 'Every value saved here is removed.', confirmLabel: 'Default for all',
  });
  if (!ok) return;
  view.render(await view.ctx.api.del(ROUTE));
  view.status.textContent = 'Every setting is back to the config file\'s value.';
  focusIfLost(view.status);
}

// Default for one key; what the user typed in the other rows survives it.
async function resetOne(view, key) {
  const next = await view.ctx.api.post(ROUTE, { settings: { [key]: null } });
  const typed = Object.fromEntries(Object.entries(view.inputs).filter(([k]) => k !== key));
  view.status.textContent = `${key} is back to the config file's value.`;
  view.render(next, typed);
  focusIfLost(view.status);
}

function render(view, answer, keep = {}) {
  view.settings = answer.settings || [];
  view.inputs = initialInputs(view.settings, keep);
  replace(view.note, answer.hot_reload === false
    ? h('p', { class: 'muted' }, 'This router reads some of these at start: a saved value applies after a restart.') : null);
  const formError = h('div', { id: 'settings-error' });
  const save = actionButton('Save settings', () => saveChanged(view, formError), { slot: formError, cls: 'primary' });
  const resetAll = actionButton('Default for all', () => resetEverything(view), { slot: formError, cls: 'danger' });
  const resetButton = (s) => {
    const button = actionButton('Default', () => resetOne(view, s.key), { slot: formError });
    button.setAttribute('aria-label', `Default for ${s.key}`);
    button.disabled = s.saved === null || s.saved === undefined;
    return button;
  };
  replace(view.body, h('form', { class: 'settings-form', 'aria-label': 'Lending settings', onsubmit: (ev) => ev.preventDefault() },
    table({
      caption: `${view.settings.length} lending settings`, rows: view.settings, rowKey: (s) => s.key,
      columns: columns(view.inputs, resetButton),
    }),
    formError, h('div', { class: 'actions' }, save, resetAll)));
}

export async function mountSettings(root, ctx) {
  const view = {
    ctx, settings: [], inputs: {},
    status: h('p', { role: 'status', class: 'muted', tabindex: '-1' }), note: h('div'), body: h('div'),
  };
  view.render = (answer, keep) => render(view, answer, keep);
  const slot = h('div');
  replace(root, h('h2', {}, 'Settings'),
    h('p', { class: 'muted' }, 'The lending keys (cluster.* in router.yaml). A value saved here overrides the config file '
      + "until Default puts the file's value back; the master passes the values in force to every slave."),
    view.note, view.status, slot, view.body);
  try {
    view.render(await ctx.api.get(ROUTE));
  } catch (exc) {
    if (missingRoute(exc)) {
      replace(view.body, h('p', { class: 'unavailable' }, 'Lending settings are not available on this router: this '
        + 'version has no settings route. The cluster.* keys in router.yaml apply, read at start.'));
    } else {
      showError(slot, exc, { title: 'The lending settings could not be read' });
    }
  }
}
