// Web UIs: the backend web interfaces this node can offer (llama-server's, KoboldCpp Lite,
// sd-server's, ...), each with Enable/Disable (POST /site/webuis/session), a Load of a
// compatible model when none is serving, and Open: a link to /router/webuis/<kind>/, which
// redirects to the backend-UI listener's own origin (never this page's). First load: one call.
import { h, replace } from '../lib/dom.js';
import { preserveFocus } from '../lib/focus.js';
import { actionButton, badge, navPage, pageHeader, showError, table } from '../lib/ui.js';

// A route this router version does not implement answers 501 (app.py's dispatcher): the page
// then says so in words instead of showing an error.
export function unavailable(exc) {
  return Boolean(exc && exc.status === 501);
}

// A node may hold hundreds of compatible configurations: name a few, count the rest (the
// Load select lists them all).
const SHOWN_MODELS = 8;

export function modelList(models) {
  const names = models.map((m) => m.image_id || m.model_id);
  if (!names.length) return '—';
  const rest = names.length - SHOWN_MODELS;
  return names.slice(0, SHOWN_MODELS).join(', ') + (rest > 0 ? ` and ${rest} more` : '');
}

function stateOf(entry) {
  if (!entry.enabled) return ['disabled', 'disabled'];
  if (entry.active) return ['ready', `serving ${entry.active_model_id || ''}`.trim()];
  return ['unloaded', 'no model loaded'];
}

export default navPage('webuis', 'Web UIs', {
  async mount(root, ctx) {
    const slot = h('div');
    const body = h('div');
    const status = h('p', { role: 'status', class: 'muted' });
    replace(root, pageHeader('Web UIs'),
      h('p', { class: 'muted' }, 'Each backend ships its own web interface. Enable one to open it; it opens on the '
        + "backend-UI listener's own address, apart from this admin UI."),
      status, slot, body);

    // The pressed button is disabled while it works (the browser then drops its focus) and
    // redrawn after: the keyboard goes back to the row's Enable/Disable button.
    function refocus(id) {
      const active = document.activeElement;
      if (active && active !== document.body && active.isConnected) return;
      const button = body.querySelector(`button[data-toggle="${CSS.escape(id)}"]`);
      if (button) button.focus();
    }

    function actions(entry) {
      const rowSlot = h('div');
      const toggle = actionButton(entry.enabled ? 'Disable' : 'Enable', async () => {
        await ctx.api.post('/site/webuis/session', { id: entry.id, enabled: !entry.enabled });
        status.textContent = `${entry.name} is now ${entry.enabled ? 'disabled' : 'enabled'}.`;
        await load();
        refocus(entry.id);
      }, { slot: rowSlot });
      toggle.dataset.toggle = entry.id;
      toggle.setAttribute('aria-label', `${entry.enabled ? 'Disable' : 'Enable'} ${entry.name}`);
      const models = entry.compatible_models || [];
      const select = h('select', { 'aria-label': `Model for ${entry.name}` },
        models.map((m) => h('option', { value: m.model_id, selected: m.active }, m.image_id || m.model_id)));
      const loadButton = actionButton('Load', async () => {
        const answer = await ctx.api.post('/site/webuis/load', { id: entry.id, model_id: select.value });
        status.textContent = `${answer.model_id} is loaded for ${entry.name}.`;
        await load();
        refocus(entry.id);
      }, { slot: rowSlot, busyLabel: 'Loading…' });
      loadButton.setAttribute('aria-label', `Load a model for ${entry.name}`);
      const open = entry.enabled
        ? h('a', { href: entry.url, target: '_blank', rel: 'noopener noreferrer', class: 'button' },
          'Open', h('span', { class: 'visually-hidden' }, ` ${entry.name} (new tab)`))
        : h('span', { class: 'muted' }, 'Enable it to open');
      return h('div', {},
        h('div', { class: 'actions' }, toggle, entry.active ? null : [select, loadButton], open), rowSlot);
    }

    function render(entries) {
      preserveFocus(body, () => replace(body, table({
        caption: `${entries.length} web interfaces on this node`,
        columns: [
          { key: 'name', label: 'Interface', rowHeader: true, cell: (e) => [e.name, h('br'), h('span', { class: 'muted hash' }, e.url)] },
          { key: 'backend', label: 'Backend' },
          { key: 'lane', label: 'Lane' },
          { key: 'state', label: 'State', cell: (e) => badge(...stateOf(e)) },
          {
            key: 'models', label: 'Compatible models', class: 'wrap',
            cell: (e) => modelList(e.compatible_models || []),
          },
          { key: 'actions', label: 'Actions', cell: actions },
        ],
        rows: entries,
        rowKey: (e) => e.id,
        empty: 'No model configuration on this node has a backend with a web interface.',
      })));
    }

    async function load() {
      showError(slot, null);
      try {
        const answer = await ctx.api.get('/site/webuis');
        render(answer.data || []);
      } catch (exc) {
        if (unavailable(exc)) {
          replace(body, h('p', { class: 'unavailable' },
            'Backend web UIs are not available on this router: this version does not offer them.'));
        } else {
          showError(slot, exc, { title: 'The web UI catalog could not be read' });
        }
      }
    }

    await load();
  },
});
