// The Lending page's pure rules (no DOM, no fetch): eligibility and decision reasons in words,
// durations as text and back, the links and settings POST bodies, folding repeated decision
// rows. tests/ui/lending.test.mjs runs them under `node --test`.

// router/lending/links.py ineligible_reason() codes, and the decision reasons of
// docs/lending.md, said the way an operator reads them.
const REASONS = {
  same_node: 'on the same node (lending goes to another node)',
  wrong_lane: 'does not serve this lane',
  context_unknown: 'context window unknown (set contextsize in its .kcpps)',
  context_too_small: 'context window too small',
  multimodal_mismatch: 'one reads images and the other does not',
  parallel_slots: 'runs parallel slots (lending needs parallel 1)',
  owner_unpriced: 'the owner has no cost estimate yet',
  switch_unpriced: 'the model switch has no cost estimate yet',
  service_unpriced: 'the helper has no cost estimate yet',
  cost_rejected: 'lending would not finish sooner',
  outranked: 'another helper was better',
  helper_not_accepting: 'the helper does not accept borrowed work now',
  helper_claimed: 'the helper is already lent to another owner',
  load_forbidden: 'the helper would have to load the model and the link forbids it',
  restore_unpriced: 'reloading the displaced model has no cost estimate yet',
  helper_recently_busy: 'the helper was busy with its own work moments ago',
};

export function reasonText(code) {
  if (!code) return '';
  return REASONS[code] || String(code).replaceAll('_', ' ');
}

const UNIT_SECONDS = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };
const NUMBER = '(?:\\d+(?:\\.\\d*)?|\\.\\d+)';
const BARE = new RegExp(`^${NUMBER}$`);
const PART = new RegExp(`(${NUMBER})(ms|s|m|h|d)\\s*`, 'y');

// The router's duration syntax (router/config/durations.py parse_duration): a bare number of
// seconds, or parts like 250ms, 30s, 10m, 2h, 1d, 1h30m. Seconds, or null when it is not one.
export function parseDuration(value) {
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? value : null;
  const text = String(value ?? '').trim();
  if (!text) return null;
  if (BARE.test(text)) return Number(text);
  let total = 0;
  let pos = 0;
  while (pos < text.length) {
    PART.lastIndex = pos;
    const match = PART.exec(text);
    if (!match) return null;
    total += Number(match[1]) * UNIT_SECONDS[match[2]];
    pos = PART.lastIndex;
  }
  return Number.isFinite(total) ? total : null;
}

// Seconds as the shortest text the parser reads back to the same number: 45 -> "45s",
// 90 -> "1m30s", 86400 -> "1d", 1.5 -> "1.5s", 0.25 -> "250ms".
export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(Number(seconds))) return '';
  let rest = Number(seconds);
  if (rest === 0) return '0s';
  if (rest < 1) return `${Math.round(rest * 1000)}ms`;
  const parts = [];
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['m', 60]]) {
    if (rest >= size) {
      const whole = Math.floor(rest / size);
      parts.push(`${whole}${unit}`);
      rest -= whole * size;
    }
  }
  rest = Math.round(rest * 1000) / 1000;
  if (rest > 0 || !parts.length) parts.push(`${rest}s`);
  return parts.join('');
}

// What an input shows for a setting's value.
export function settingText(type, value) {
  if (value === null || value === undefined) return '';
  if (type === 'duration') return formatDuration(value);
  if (type === 'boolean') return value ? 'on' : 'off';
  return String(value);
}

// The value a typed input stands for, to compare with the effective one: a number for
// integer/duration, a boolean; undefined when it does not parse (the router judges it).
export function typedValue(type, raw) {
  if (type === 'boolean') return Boolean(raw);
  if (type === 'duration') return parseDuration(raw) ?? undefined;
  const text = String(raw ?? '').trim();
  return /^-?\d+$/.test(text) ? Number(text) : undefined;
}

// `{"settings": {key: value}}` for the inputs that differ from the effective values.
// `inputs`: {key: raw input (string, or boolean for a checkbox)}. A value that does not parse
// is sent as typed: the router's 400 then names the key, and nothing changes.
export function settingsBody(settings, inputs) {
  const out = {};
  for (const row of settings) {
    if (!(row.key in inputs)) continue;
    const raw = inputs[row.key];
    const typed = typedValue(row.type, raw);
    if (typed !== undefined && typed === row.effective) continue;
    if (typed === undefined) out[row.key] = typeof raw === 'string' ? raw.trim() : raw;
    else out[row.key] = row.type === 'duration' ? String(raw).trim() : typed;
  }
  return { settings: out };
}

// The setting a 400 names: its `param` is the key (or ends with ".<key>"), else the first key
// the message names.
export function keyOfError(settings, error) {
  const keys = settings.map((s) => s.key);
  const param = error && error.param ? String(error.param) : '';
  const byParam = keys.find((k) => param === k || param.endsWith(`.${k}`) || param.endsWith(`[${k}]`));
  if (byParam) return byParam;
  const message = error && error.message ? String(error.message) : '';
  return keys.find((k) => message.includes(k)) || null;
}

const same = (a, b) => a.node_id === b.node_id && a.model_id === b.model_id;

// The form's rows for one anchor's listing: per candidate, whether it is ticked as a helper
// ("lends work to") or as an owner ("borrows work from"), with each link's two flags.
export function linkRows(listing) {
  const anchor = listing.anchor;
  return listing.candidates.map((c) => {
    const lend = listing.links.find((l) => same(l.owner, anchor) && same(l.helper, c));
    const borrow = listing.links.find((l) => same(l.owner, c) && same(l.helper, anchor));
    return {
      node_id: c.node_id,
      model_id: c.model_id,
      lends: Boolean(lend || c.lends_to),
      lendsLoad: lend ? lend.load_if_unloaded : true,
      lendsRestore: lend ? lend.restore_after_borrow : false,
      borrows: Boolean(borrow || c.borrows_from),
      borrowsLoad: borrow ? borrow.load_if_unloaded : true,
      borrowsRestore: borrow ? borrow.restore_after_borrow : false,
    };
  });
}

// The POST body that replaces the anchor's links with what the rows tick.
export function linksBody(anchor, rows) {
  const entry = (r, load, restore) => ({
    node_id: r.node_id, model_id: r.model_id, load_if_unloaded: load, restore_after_borrow: restore,
  });
  return {
    anchor: { node_id: anchor.node_id, model_id: anchor.model_id },
    lends_to: rows.filter((r) => r.lends).map((r) => entry(r, r.lendsLoad, r.lendsRestore)),
    borrows_from: rows.filter((r) => r.borrows).map((r) => entry(r, r.borrowsLoad, r.borrowsRestore)),
  };
}

// The models a lane's anchor can be picked from, `{node_id, model_id}` sorted by node then id:
// /router/v1/models entries serving the lane (a remote one by each replica), plus what a
// links listing names (the anchor and its candidates: every model the router knows on it).
export function laneModels(models, lane, listing) {
  const found = new Map();
  const add = (node_id, model_id) => {
    if (node_id && model_id) found.set(`${node_id}\u0000${model_id}`, { node_id, model_id });
  };
  for (const m of models || []) {
    if (!(m.capabilities || []).includes(lane)) continue;
    if (m.replicas && m.replicas.length) for (const r of m.replicas) add(r.node_id, r.local_id);
    else add(m.node_id, m.id);
  }
  if (listing) {
    add(listing.anchor.node_id, listing.anchor.model_id);
    for (const c of listing.candidates) add(c.node_id, c.model_id);
  }
  return [...found.values()].sort((a, b) =>
    a.node_id === b.node_id ? a.model_id.localeCompare(b.model_id) : a.node_id.localeCompare(b.node_id));
}

const FOLD_KEYS = ['kind', 'trigger', 'outcome', 'lane', 'owner_node_id', 'owner_model_id',
  'helper_node_id', 'helper_model_id'];

function sameDecision(a, b) {
  return FOLD_KEYS.every((k) => (a[k] || '') === (b[k] || ''))
    && JSON.stringify(a.reasons || []) === JSON.stringify(b.reasons || []);
}

// Consecutive rows that say the same thing (kind, trigger, outcome, reasons, lane, models)
// folded into one: {row (the newest), count, oldest (its time), ids}.
export function foldRepeats(rows) {
  const out = [];
  for (const row of rows) {
    const last = out[out.length - 1];
    if (last && sameDecision(last.row, row)) {
      last.count += 1;
      last.oldest = row.at;
      last.ids.push(row.id);
    } else {
      out.push({ row, count: 1, oldest: row.at, ids: [row.id] });
    }
  }
  return out;
}

// "m/slow" for a node and model ('' when there is no model).
export function modelRef(node_id, model_id) {
  if (!model_id) return '';
  return node_id ? `${node_id}/${model_id}` : model_id;
}
