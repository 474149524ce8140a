// The Lending page's links editor: one anchor model (lane, node, model) at a time, the links
// the router holds for it, and its candidates with eligibility, ticks for both directions and
// each link's flags. Save replaces the anchor's links (POST), Remove all deletes them; after
// either the listing is read again, so the table shows what the router now holds.
import { h, replace } from './dom.js';
import { focusIfLost } from './focus.js';
import { readModels } from './lending-live.js';
import { laneModels, linkRows, linksBody, modelRef, reasonText } from './lending.js';
import { actionButton, badge, confirmDialog, errorBox, table } from './ui.js';

const LANES = [['text', 'Text', '/site/text-routing-groups'], ['image', 'Image', '/site/routing-groups']];

function routeOf(lane) {
  return (LANES.find(([id]) => id === lane) || LANES[0])[2];
}

function laneButtons(lane, onpick) {
  return h('div', { class: 'segmented', role: 'group', 'aria-label': 'Lane' },
    LANES.map(([id, label]) => h('button', {
      type: 'button', 'aria-pressed': id === lane ? 'true' : 'false', onclick: () => onpick(id),
    }, label)));
}

function anchorPicker(options, anchor, onpick) {
  const value = anchor ? `${anchor.node_id}/${anchor.model_id}` : '';
  const select = h('select', {
    id: 'links-anchor',
    onchange: (ev) => {
      const picked = options.find((o) => `${o.node_id}/${o.model_id}` === ev.target.value);
      onpick(picked || null);
    },
  }, h('option', { value: '' }, options.length ? 'Pick a model…' : 'No model on this lane'),
  options.map((o) => {
    const key = `${o.node_id}/${o.model_id}`;
    return h('option', { value: key, selected: key === value }, `${o.model_id} on ${o.node_id}`);
  }));
  return h('div', { class: 'filters' }, h('label', { for: 'links-anchor' }, 'Anchor model'), select);
}

function heldTable(listing) {
  return table({
    caption: `Links the router holds for ${modelRef(listing.anchor.node_id, listing.anchor.model_id)}`,
    rows: listing.links,
    rowKey: (l) => `${modelRef(l.owner.node_id, l.owner.model_id)}>${modelRef(l.helper.node_id, l.helper.model_id)}`,
    empty: 'No links yet: tick a model below under "Lends work to" or "Borrows work from", then Save.',
    columns: [
      { key: 'owner', label: 'Owner (lends its backlog)', rowHeader: true, cell: (l) => modelRef(l.owner.node_id, l.owner.model_id) },
      { key: 'helper', label: 'Helper (serves it)', cell: (l) => modelRef(l.helper.node_id, l.helper.model_id) },
      { key: 'load', label: 'Load if not loaded', cell: (l) => (l.load_if_unloaded ? 'yes' : 'no') },
      { key: 'restore', label: 'Reload displaced model', cell: (l) => (l.restore_after_borrow ? 'yes' : 'no') },
    ],
  });
}

// One direction's tick and its two flags; the flags only mean something while it is ticked.
function directionCell(row, side, label, candidate, name) {
  const on = `${side}`;
  const load = `${side}Load`;
  const restore = `${side}Restore`;
  // An ineligible candidate cannot be ticked; one the router still links can be unticked.
  const locked = !candidate.eligible && !row[on];
  const flags = [];
  const tick = h('input', {
    type: 'checkbox', checked: row[on], disabled: locked, 'aria-label': `${label} ${name}`,
    'data-field': on,
    onchange: (ev) => {
      row[on] = ev.target.checked;
      for (const f of flags) f.disabled = !row[on];
    },
  });
  const flag = (field, text) => {
    const box = h('input', {
      type: 'checkbox', checked: row[field], disabled: !row[on], 'aria-label': `${text} (${label.toLowerCase()} ${name})`,
      'data-field': field, onchange: (ev) => { row[field] = ev.target.checked; },
    });
    flags.push(box);
    return h('label', { class: 'flag' }, box, ` ${text}`);
  };
  // A locked row has nothing to set: its flags would only be noise.
  return h('div', { class: 'direction' },
    h('label', {}, tick, ` ${label}`),
    locked ? null : [flag(load, 'load if not loaded'), flag(restore, 'reload displaced model')]);
}

function candidatesTable(listing, rows) {
  const byKey = new Map(listing.candidates.map((c) => [`${c.node_id}/${c.model_id}`, c]));
  return table({
    caption: 'Candidates: every other model on this lane the router knows',
    rows,
    rowKey: (r) => `${r.node_id}/${r.model_id}`,
    empty: 'No other model on this lane: lending needs a model on another node (a master with slaves).',
    columns: [
      { key: 'model', label: 'Model', rowHeader: true, cell: (r) => {
        const c = byKey.get(`${r.node_id}/${r.model_id}`);
        return [`${r.model_id} on ${r.node_id}`, c.filename ? [h('br'), h('span', { class: 'muted hash' }, c.filename)] : null];
      } },
      { key: 'context', label: 'Context', class: 'num', cell: (r) => byKey.get(`${r.node_id}/${r.model_id}`).context_size ?? '—' },
      { key: 'weights', label: 'Weights', cell: (r) => (byKey.get(`${r.node_id}/${r.model_id}`).weights_match
        ? badge('ok', 'same weights') : badge('neutral', 'different weights')) },
      { key: 'eligible', label: 'Eligible', class: 'wrap', cell: (r) => {
        const c = byKey.get(`${r.node_id}/${r.model_id}`);
        return c.eligible ? badge('available', 'eligible')
          : [badge('disabled', 'not eligible'), ' ', h('span', { class: 'reason' }, reasonText(c.ineligible_reason))];
      } },
      { key: 'lends', label: 'Lends work to', cell: (r) => directionCell(r, 'lends', 'Lends work to',
        byKey.get(`${r.node_id}/${r.model_id}`), r.model_id) },
      { key: 'borrows', label: 'Borrows work from', cell: (r) => directionCell(r, 'borrows', 'Borrows work from',
        byKey.get(`${r.node_id}/${r.model_id}`), r.model_id) },
    ],
  });
}

// Ticked models with other weights answer differently from the anchor: the operator says so.
async function acknowledged(listing, rows) {
  const other = rows.filter((r) => (r.lends || r.borrows)
    && !listing.candidates.find((c) => c.node_id === r.node_id && c.model_id === r.model_id).weights_match);
  if (!other.length) return true;
  return confirmDialog({
    title: 'Link models with different weights?',
    message: `${other.map((r) => `${r.model_id} on ${r.node_id}`).join(', ')} ${other.length === 1 ? 'has' : 'have'} `
      + `other weights than ${listing.anchor.model_id}: a lent request can get a different answer.`,
    confirmLabel: 'Save anyway', danger: false,
  });
}

async function saveLinks(view, listing, rows) {
  view.status.textContent = '';
  if (!(await acknowledged(listing, rows))) return;
  const answer = await view.ctx.api.post(routeOf(view.lane), linksBody(listing.anchor, rows));
  view.status.textContent = `Saved: ${answer.links.length} link(s) for ${listing.anchor.model_id}.`;
  await view.read();
  focusIfLost(view.formSlot.querySelector('button.primary'));
}

async function removeLinks(view, listing) {
  const ok = await confirmDialog({
    title: `Remove every ${view.lane} link of ${listing.anchor.model_id}?`,
    message: 'Both directions are removed; requests already lent finish where they are.',
    confirmLabel: 'Remove all',
  });
  if (!ok) return;
  const { node_id, model_id } = listing.anchor;
  const answer = await view.ctx.api.del(routeOf(view.lane), { node_id, model_id });
  view.status.textContent = `Removed ${answer.removed} link(s) of ${model_id}.`;
  await view.read();
  focusIfLost(view.status);
}

function render(view, listing) {
  replace(view.heldSlot, heldTable(listing));
  const rows = linkRows(listing);
  const formError = h('div', { id: 'links-error' });
  const save = actionButton('Save links', () => saveLinks(view, listing, rows), { slot: formError, cls: 'primary' });
  const remove = actionButton('Remove all links', () => removeLinks(view, listing), { slot: formError, cls: 'danger' });
  remove.disabled = !listing.links.length;
  replace(view.formSlot, h('form', { class: 'links-form', 'aria-label': 'Edit links', onsubmit: (ev) => ev.preventDefault() },
    candidatesTable(listing, rows), formError, h('div', { class: 'actions' }, save, remove)));
}

export async function mountLinks(root, ctx) {
  const lane = ctx.params.lane === 'image' ? 'image' : 'text';
  const anchor = ctx.params.model ? { node_id: ctx.params.node || '', model_id: ctx.params.model } : null;
  const view = {
    ctx, lane, pickSlot: h('div'), heldSlot: h('div'), formSlot: h('div'),
    status: h('p', { role: 'status', class: 'muted', tabindex: '-1' }),
  };
  replace(root, h('h2', { id: 'links-h' }, 'Links'),
    h('p', { class: 'muted' }, 'A linked owner lends its backlog to a helper model on another node while the owner is busy. '
      + 'Pick the model to edit; its links in both directions are shown.'),
    laneButtons(lane, (id) => ctx.setSection({ lane: id, node: '', model: '' })),
    view.pickSlot, view.status, view.heldSlot, view.formSlot);
  const models = await readModels(ctx, view.pickSlot);
  if (!models) return;
  const pick = (listing) => replace(view.pickSlot, anchorPicker(laneModels(models, lane, listing), anchor,
    (picked) => ctx.setSection({ lane, node: picked ? picked.node_id : '', model: picked ? picked.model_id : '' })));
  pick(null);
  if (!anchor) {
    replace(view.heldSlot, h('p', { class: 'empty-state' }, `No model picked: pick a ${lane} model above to see and edit its links.`));
    return;
  }
  // After every change the listing is read again: the tables show what the router holds.
  view.read = async () => {
    const listing = await ctx.api.get(routeOf(lane), { node_id: anchor.node_id, model_id: anchor.model_id });
    pick(listing);
    render(view, listing);
  };
  try {
    await view.read();
  } catch (exc) {
    const title = exc.status === 404 ? `${anchor.model_id} on ${anchor.node_id} is not a ${lane} model the router knows`
      : 'The links could not be read';
    replace(view.heldSlot, errorBox(exc, { title }));
  }
}
