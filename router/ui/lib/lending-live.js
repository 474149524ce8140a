// The Lending page's live parts: the leases in force with each node's held / lent / borrowed
// requests (GET /site/offload/summary, read again every few seconds while the tab is shown),
// and the decision log (GET /site/offload/decisions: newest first, filters, older pages by
// `next_before`, consecutive identical rows folded with a count, a row's detail on demand).
import { h, replace } from './dom.js';
import { formatDateTime } from './fmt.js';
import { foldRepeats, modelRef, reasonText } from './lending.js';
import { badge, errorBox, table } from './ui.js';

// The models the Lending editors pick from (GET /models), or null once `slot` says why not.
export async function readModels(ctx, slot) {
  try {
    return (await ctx.api.get('/models')).data || [];
  } catch (exc) {
    replace(slot, errorBox(exc, { title: 'The models could not be read' }));
    return null;
  }
}

export const SUMMARY_REFRESH_MS = 3000;
const DECISION_PAGE = 100;
const KINDS = ['plan', 'dispatch', 'helper'];
const LANES = ['text', 'image'];
const OUTCOME_STATE = { granted: 'ready', probe: 'loading', skipped: 'off', lent: 'ready', returned: 'busy',
  lease_refused: 'bad', relay_refused: 'bad', lease_cleared: 'off' };

// A route this router does not have (404), or has without a handler (501): said in words.
export function missingRoute(exc) {
  return Boolean(exc && (exc.status === 404 || exc.status === 501));
}

function unavailableNote(what) {
  return h('p', { class: 'unavailable' }, `${what} is not available on this router: this version has no `
    + 'such route (it comes with the lending scheduler). The links and guardian sections work without it.');
}

function expiresIn(lease, now) {
  const ms = Number.isFinite(lease.ttl_ms) ? lease.ttl_ms : (lease.expires_at - now) * 1000;
  if (!Number.isFinite(ms)) return '—';
  return ms <= 0 ? 'expiring' : `${Math.ceil(ms / 1000)} s`;
}

function summaryView(summary) {
  const now = Date.now() / 1000;
  const leases = summary.leases || [];
  return [
    table({
      caption: 'Requests per node: held here for a linked owner, lent out to helpers, borrowed and served',
      rows: summary.nodes || [], rowKey: (n) => n.node_id,
      empty: 'No node reports lending counts yet.',
      columns: [
        { key: 'node_id', label: 'Node', rowHeader: true },
        { key: 'held', label: 'Held', class: 'num' },
        { key: 'lent', label: 'Lent', class: 'num' },
        // null: the node did not answer the status poll just now.
        { key: 'borrowed', label: 'Borrowed', class: 'num', cell: (n) => n.borrowed ?? '—' },
      ],
    }),
    table({
      caption: `${leases.length} lease(s) in force`,
      rows: leases, rowKey: (l) => `${l.lane}/${l.owner_node_id}/${l.owner_model_id}>${l.helper_node_id}/${l.helper_model_id}`,
      empty: 'No lease now: one appears while a linked owner has a backlog and a helper takes part of it.',
      columns: [
        { key: 'owner', label: 'Owner', rowHeader: true, cell: (l) => modelRef(l.owner_node_id, l.owner_model_id) },
        { key: 'helper', label: 'Helper', cell: (l) => modelRef(l.helper_node_id, l.helper_model_id) },
        { key: 'lane', label: 'Lane' },
        { key: 'slots', label: 'Slots in use', class: 'num', cell: (l) => `${l.in_use ?? 0} of ${l.helper_slots ?? '—'}` },
        { key: 'probe', label: 'Kind', cell: (l) => (l.probe ? badge('loading', 'probe') : badge('ready', 'lease')) },
        { key: 'flags', label: 'Helper may', class: 'wrap', cell: (l) => [
          l.load_helper_model ? 'load the model' : 'not load', ', ', l.restore_helper_model ? 'reload the displaced one' : 'not reload'] },
        { key: 'expires', label: 'Expires in', class: 'num', cell: (l) => expiresIn(l, now) },
      ],
    }),
    (summary.costs || []).length ? table({
      caption: 'Cost estimates the scheduler plans with',
      rows: summary.costs, rowKey: (c) => `${c.node_id}/${c.model_id}/${c.lane}`,
      columns: [
        { key: 'model', label: 'Model', rowHeader: true, cell: (c) => modelRef(c.node_id, c.model_id) },
        { key: 'lane', label: 'Lane' },
        { key: 'job_s', label: 'Per job', class: 'num', cell: (c) => (c.job_s == null ? '—' : `${Number(c.job_s).toFixed(2)} s`) },
        { key: 'load_s', label: 'Load', class: 'num', cell: (c) => (c.load_s == null ? '—' : `${Number(c.load_s).toFixed(1)} s`) },
        { key: 'samples', label: 'Samples', class: 'num' },
        { key: 'fitted', label: 'Fitted', cell: (c) => (c.fitted ? 'yes' : 'not yet') },
      ],
    }) : null,
  ];
}

export async function mountLeases(root, ctx) {
  const body = h('div', {}, h('p', { class: 'muted' }, 'Reading the leases…'));
  const stamp = h('p', { class: 'muted', role: 'status' });
  replace(root, h('h2', {}, 'Live leases'),
    h('p', { class: 'muted' }, `Read again every ${SUMMARY_REFRESH_MS / 1000} s while this tab is shown.`), stamp, body);
  let timer = null;
  let stopped = false;

  async function tick() {
    timer = null;
    if (stopped) return;
    if (document.visibilityState === 'hidden') return; // resumed by onVisibility
    try {
      replace(body, summaryView(await ctx.api.get('/site/offload/summary')));
      stamp.textContent = `As of ${formatDateTime(Date.now() / 1000)}.`;
    } catch (exc) {
      if (missingRoute(exc)) {
        replace(body, unavailableNote('The live lease summary'));
        return; // nothing to poll for
      }
      replace(body, errorBox(exc, { title: 'The lease summary could not be read' }));
    }
    if (!stopped) timer = setTimeout(tick, SUMMARY_REFRESH_MS);
  }
  const onVisibility = () => {
    if (document.visibilityState !== 'hidden' && !timer && !stopped) tick();
  };
  document.addEventListener('visibilitychange', onVisibility);
  await tick();
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisibility);
  };
}

// `nodes`: the other nodes whose own log (the helper side) the master relays by node_id.
function decisionFilters(params, nodes, onchange) {
  const choice = (label, name, values, any = 'Any') => h('label', {}, label,
    h('select', { name, onchange: (ev) => onchange({ [name]: ev.target.value }) },
      h('option', { value: '' }, any), values.map((v) => h('option', { value: v, selected: params[name] === v }, v))));
  return h('div', { class: 'filters', role: 'group', 'aria-label': 'Filters' },
    nodes.length ? choice('Log of', 'node', nodes, 'this router') : null,
    choice('Kind', 'kind', KINDS), choice('Lane', 'lane', LANES),
    h('label', {}, 'Model', h('input', {
      type: 'search', name: 'model', value: params.model || '', placeholder: 'model id',
      onchange: (ev) => onchange({ model: ev.target.value.trim() }),
    })));
}

function decisionDetail(fold) {
  const d = fold.row;
  const facts = [
    ['Id', fold.count > 1 ? `${d.id} (and ${fold.count - 1} identical older: ${fold.ids.slice(1).join(', ')})` : d.id],
    ['At', fold.count > 1 ? `${formatDateTime(d.at)} (first ${formatDateTime(fold.oldest)})` : formatDateTime(d.at)],
    ['Kind', d.kind], ['Trigger', d.trigger || '—'], ['Outcome', d.outcome], ['Lane', d.lane],
    ['Owner', modelRef(d.owner_node_id, d.owner_model_id) || '—'],
    ['Helper', modelRef(d.helper_node_id, d.helper_model_id) || '—'],
    ['Reasons', (d.reasons || []).map((r) => `${r}: ${reasonText(r)}`).join('; ') || '—'],
    ['Router version', d.router_version || '—'],
  ];
  return h('div', { class: 'card detail', id: 'decision-detail', tabindex: '-1', 'aria-label': `Decision ${d.id}` },
    h('h3', {}, `Decision ${d.id}`),
    h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))])),
    h('pre', { class: 'tail' }, JSON.stringify(d.detail || {}, null, 2)));
}

function decisionColumns(onopen) {
  return [
    { key: 'at', label: 'Time', rowHeader: true, cell: (f) => [formatDateTime(f.row.at),
      f.count > 1 ? [' ', h('span', { class: 'badge badge-neutral fold' }, `×${f.count}`)] : null] },
    { key: 'kind', label: 'Kind', cell: (f) => f.row.kind },
    { key: 'trigger', label: 'Trigger', cell: (f) => f.row.trigger || '—' },
    { key: 'outcome', label: 'Outcome', cell: (f) => badge(OUTCOME_STATE[f.row.outcome] || 'neutral', f.row.outcome) },
    { key: 'owner', label: 'Owner', cell: (f) => modelRef(f.row.owner_node_id, f.row.owner_model_id) || '—' },
    { key: 'helper', label: 'Helper', cell: (f) => modelRef(f.row.helper_node_id, f.row.helper_model_id) || '—' },
    { key: 'reasons', label: 'Reasons', class: 'wrap', cell: (f) => (f.row.reasons || []).map(reasonText).join('; ') || '—' },
    { key: 'open', label: 'Detail', cell: (f) => h('button', {
      type: 'button', class: 'link', 'aria-label': `Open decision ${f.row.id}`, onclick: () => onopen(f),
    }, 'Open') },
  ];
}

// The other nodes (the master relays their own logs by node_id); none when unknown.
async function otherNodes(ctx) {
  const own = (ctx.session && ctx.session.node && ctx.session.node.node_id) || '';
  try {
    const inventory = await ctx.api.get('/site/inventory');
    return (inventory.nodes || []).map((n) => n.node_id).filter((id) => id && id !== own);
  } catch {
    return []; // without the node list this router's own log is still shown
  }
}

export async function mountDecisions(root, ctx) {
  const params = ctx.params;
  const [slot, body, more, detail] = [h('div'), h('div'), h('div', { class: 'actions' }), h('div')];
  let rows = [];
  let asked = 0;
  const open = (fold) => {
    replace(detail, decisionDetail(fold));
    detail.firstChild.focus();
  };
  const render = (nextBefore) => {
    const folds = foldRepeats(rows);
    replace(body, table({
      caption: `${rows.length} decision(s) read, ${folds.length} row(s) after folding repeats`,
      rows: folds, rowKey: (f) => f.row.id, columns: decisionColumns(open),
      empty: 'No decision matches: rows appear once linked models have a backlog (Links section), or loosen the filters.',
    }));
    replace(more, nextBefore ? h('button', { type: 'button', onclick: () => load(nextBefore) }, 'Older decisions') : null);
  };
  // A filter changed while a page was on its way: only the newest question's answer is drawn.
  const load = async (before) => {
    const mine = ++asked;
    replace(slot);
    try {
      const page = await ctx.api.get('/site/offload/decisions', {
        limit: DECISION_PAGE, before, kind: params.kind, lane: params.lane, model_id: params.model, node_id: params.node,
      });
      if (mine !== asked) return;
      rows = before ? [...rows, ...page.decisions] : page.decisions;
      if (!before) replace(detail);
      render(page.next_before);
    } catch (exc) {
      if (mine !== asked) return;
      if (missingRoute(exc)) replace(body, unavailableNote('The decision log'));
      else replace(slot, errorBox(exc, { title: 'The decision log could not be read' }));
    }
  };
  const nodes = await otherNodes(ctx);
  replace(root, h('h2', {}, 'Decision log'),
    h('p', { class: 'muted' }, 'What the lending scheduler decided and why, newest first. Identical consecutive rows are '
      + "folded. Another node's log holds its side as a helper."),
    decisionFilters(params, nodes, (patch) => {
      Object.assign(params, patch);
      ctx.keepSection(params);
      load(null);
    }), slot, body, more, detail);
  await load(null);
}
