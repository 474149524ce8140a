// The Lending page's guardian models: the multimodal model that answers image requests for
// text-only models, assigned for the whole cluster, a node, or one model
// (GET/POST/DELETE /site/guardian-models). The most specific assignment wins.
import { h, replace } from './dom.js';
import { focusIfLost } from './focus.js';
import { readModels } from './lending-live.js';
import { laneModels } from './lending.js';
import { actionButton, confirmDialog, showError, table } from './ui.js';

const SCOPES = [['cluster', 'The whole cluster'], ['node', 'One node'], ['model', 'One model']];

function appliesTo(a) {
  if (a.scope === 'cluster') return 'every text-only model of the cluster';
  if (a.scope === 'node') return `every text-only model on ${a.node_id}`;
  return `${a.model_id} on ${a.node_id}`;
}

function clearQuery(a) {
  return { scope: a.scope, node_id: a.scope === 'cluster' ? null : a.node_id, model_id: a.scope === 'model' ? a.model_id : null };
}

function select(id, label, options, value) {
  return [h('label', { for: id }, label), h('select', { id },
    options.map(([v, text]) => h('option', { value: v, selected: v === value }, text)))];
}

// The assign form: scope first; the node and model pickers only where the scope needs them.
function assignForm(listing, textModels, nodes, onsave) {
  const guardians = listing.candidates.map((c) => [`${c.node_id}/${c.model_id}`, `${c.model_id} on ${c.node_id}`]);
  // A model scope names a text-only model: a multimodal one reads its own images.
  const vision = new Set(listing.candidates.map((c) => `${c.node_id}/${c.model_id}`));
  const models = textModels.filter((m) => !vision.has(`${m.node_id}/${m.model_id}`)).map((m) => [`${m.node_id}/${m.model_id}`, `${m.model_id} on ${m.node_id}`]);
  const error = h('div', { id: 'guardian-error' });
  const form = h('form', { class: 'filters guardian-form', 'aria-label': 'Assign a guardian', onsubmit: (ev) => ev.preventDefault() },
    ...select('guardian-scope', 'Scope', SCOPES, 'model'),
    h('span', { class: 'scope-node' }, ...select('guardian-node', 'Node', nodes.map((n) => [n, n]), nodes[0])),
    h('span', { class: 'scope-model' }, ...select('guardian-model', 'Model', models, models.length ? models[0][0] : '')),
    ...select('guardian-pick', 'Guardian', guardians, guardians.length ? guardians[0][0] : ''));
  const field = (id) => form.querySelector(`#${id}`);
  const sync = () => {
    const scope = field('guardian-scope').value;
    form.querySelector('.scope-node').hidden = scope !== 'node';
    form.querySelector('.scope-model').hidden = scope !== 'model';
  };
  field('guardian-scope').addEventListener('change', sync);
  sync();
  const save = actionButton('Assign', async () => {
    const scope = field('guardian-scope').value;
    const [gnode, ...gmodel] = field('guardian-pick').value.split('/');
    const body = { scope, guardian: { node_id: gnode, model_id: gmodel.join('/') } };
    if (scope === 'node') body.node_id = field('guardian-node').value;
    if (scope === 'model') {
      const [node, ...model] = field('guardian-model').value.split('/');
      body.node_id = node;
      body.model_id = model.join('/');
    }
    await onsave(body);
  }, { slot: error, cls: 'primary' });
  save.disabled = !guardians.length;
  form.append(save);
  return h('div', {}, form, error);
}

async function clear(view, a) {
  const ok = await confirmDialog({
    title: `Clear the ${a.scope} guardian?`,
    message: `${appliesTo(a)} will no longer be answered by ${a.guardian.model_id}.`,
    confirmLabel: 'Clear',
  });
  if (!ok) return;
  await view.ctx.api.del('/site/guardian-models', clearQuery(a));
  view.status.textContent = `Cleared the ${a.scope} guardian (${appliesTo(a)}).`;
  await view.read();
  focusIfLost(view.status);
}

async function assign(view, body) {
  view.status.textContent = '';
  const answer = await view.ctx.api.post('/site/guardian-models', body);
  view.status.textContent = `Assigned ${answer.assignment.guardian.model_id} as the ${answer.assignment.scope} guardian.`;
  await view.read();
  focusIfLost(view.formSlot.querySelector('button.primary'));
}

function render(view, listing) {
  const rowError = h('div', { id: 'guardian-clear-error' });
  const clearButton = (a) => {
    const button = actionButton('Clear', () => clear(view, a), { slot: rowError });
    button.setAttribute('aria-label', `Clear the ${a.scope} guardian for ${appliesTo(a)}`);
    return button;
  };
  replace(view.listSlot, table({
    caption: 'Guardian assignments',
    rows: listing.assignments,
    rowKey: (a) => `${a.scope}/${a.node_id}/${a.model_id}`,
    empty: 'No guardian assigned: an image chat to a text-only model is refused with a 400. Assign one below.',
    columns: [
      { key: 'scope', label: 'Scope', rowHeader: true },
      { key: 'applies', label: 'Applies to', cell: appliesTo },
      { key: 'guardian', label: 'Guardian', cell: (a) => `${a.guardian.model_id} on ${a.guardian.node_id}` },
      { key: 'clear', label: 'Clear', cell: clearButton },
    ],
  }), rowError);
  replace(view.formSlot, h('h3', {}, 'Assign a guardian'),
    listing.candidates.length ? null : h('p', { class: 'empty-state' },
      'No multimodal model to assign: a guardian needs a configuration with an mmproj (vision projector), '
      + 'or a vLLM configuration with "router_vision": true.'),
    assignForm(listing, view.textModels, view.nodes, (body) => assign(view, body)));
}

export async function mountGuardians(root, ctx) {
  const view = {
    ctx, status: h('p', { role: 'status', class: 'muted', tabindex: '-1' }), listSlot: h('div'), formSlot: h('div'),
  };
  replace(root, h('h2', {}, 'Guardian models'),
    h('p', { class: 'muted' }, 'A chat with images sent to a text-only model is answered by its guardian, a multimodal model. '
      + "The most specific assignment wins: the model's own, then its node's, then the cluster's."),
    view.status, view.listSlot, view.formSlot);
  const models = await readModels(ctx, view.listSlot);
  if (!models) return;
  const own = (ctx.session && ctx.session.node && ctx.session.node.node_id) || '';
  view.textModels = laneModels(models, 'text', null);
  view.nodes = [...new Set([own, ...view.textModels.map((m) => m.node_id)].filter(Boolean))];
  view.read = async () => render(view, await ctx.api.get('/site/guardian-models'));
  try {
    await view.read();
  } catch (exc) {
    showError(view.listSlot, exc, { title: 'The guardian assignments could not be read' });
  }
}
