// node --test tests/ui/: the Lending page's pure rules.
import test from 'node:test';
import assert from 'node:assert/strict';
import {
  foldRepeats, formatDuration, keyOfError, laneModels, linkRows, linksBody, parseDuration,
  reasonText, settingsBody, settingText,
} from '../../router/ui/lib/lending.js';

test('durations parse like the router reads them', () => {
  assert.equal(parseDuration('45s'), 45);
  assert.equal(parseDuration('1h30m'), 5400);
  assert.equal(parseDuration('250ms'), 0.25);
  assert.equal(parseDuration(' 2 '), 2);
  assert.equal(parseDuration('1.5m'), 90);
  assert.equal(parseDuration(30), 30);
  for (const bad of ['', 'soon', '10 minutes', '-5s', '5x', '1h 30x']) assert.equal(parseDuration(bad), null, bad);
});

test('durations format to text that parses back to the same seconds', () => {
  assert.equal(formatDuration(45), '45s');
  assert.equal(formatDuration(90), '1m30s');
  assert.equal(formatDuration(86400), '1d');
  assert.equal(formatDuration(30 * 86400), '30d');
  assert.equal(formatDuration(1.5), '1.5s');
  assert.equal(formatDuration(0.25), '250ms');
  assert.equal(formatDuration(0), '0s');
  assert.equal(formatDuration(null), '');
  for (const s of [0, 0.5, 1, 1.5, 59, 60, 61, 3599, 3600, 3661, 86399, 86400, 90061.25, 2592000]) {
    assert.equal(parseDuration(formatDuration(s)), s, `round trip of ${s}`);
  }
});

test('a setting shows as text by its type', () => {
  assert.equal(settingText('duration', 60), '1m');
  assert.equal(settingText('integer', 2), '2');
  assert.equal(settingText('boolean', true), 'on');
  assert.equal(settingText('integer', null), '');
});

const SETTINGS = [
  { key: 'scheduling_backend_depth', type: 'integer', effective: 2 },
  { key: 'scheduling_grant_ttl', type: 'duration', effective: 30 },
  { key: 'offload_hold_for_faster_helper', type: 'boolean', effective: true },
];

test('the settings body holds only the changed keys, durations as typed', () => {
  const unchanged = { scheduling_backend_depth: '2', scheduling_grant_ttl: '30s', offload_hold_for_faster_helper: true };
  assert.deepEqual(settingsBody(SETTINGS, unchanged), { settings: {} });
  const changed = { scheduling_backend_depth: ' 4 ', scheduling_grant_ttl: '1m', offload_hold_for_faster_helper: false };
  assert.deepEqual(settingsBody(SETTINGS, changed), {
    settings: { scheduling_backend_depth: 4, scheduling_grant_ttl: '1m', offload_hold_for_faster_helper: false },
  });
  // What does not parse goes as typed: the router's 400 names the key.
  assert.deepEqual(settingsBody(SETTINGS, { scheduling_backend_depth: 'lots', scheduling_grant_ttl: 'soon' }), {
    settings: { scheduling_backend_depth: 'lots', scheduling_grant_ttl: 'soon' },
  });
});

test('a 400 is matched to the key it names', () => {
  assert.equal(keyOfError(SETTINGS, { param: 'scheduling_grant_ttl', message: 'x' }), 'scheduling_grant_ttl');
  assert.equal(keyOfError(SETTINGS, { param: 'settings.scheduling_backend_depth' }), 'scheduling_backend_depth');
  assert.equal(keyOfError(SETTINGS, { param: null, message: 'scheduling_backend_depth: must be >= 1' }), 'scheduling_backend_depth');
  assert.equal(keyOfError(SETTINGS, { param: 'settings', message: 'send an object' }), null);
});

const ANCHOR = { node_id: 'm', model_id: 'slow' };
const LISTING = {
  anchor: ANCHOR,
  links: [
    { owner: ANCHOR, helper: { node_id: 's1', model_id: 'fast' }, load_if_unloaded: false, restore_after_borrow: true },
    { owner: { node_id: 's2', model_id: 'big' }, helper: ANCHOR, load_if_unloaded: true, restore_after_borrow: false },
  ],
  candidates: [
    { node_id: 's1', model_id: 'fast', lends_to: true, borrows_from: false },
    { node_id: 's2', model_id: 'big', lends_to: false, borrows_from: true },
    { node_id: 's1', model_id: 'tiny', lends_to: false, borrows_from: false },
  ],
};

test('the rows read the links of both directions with their flags', () => {
  const rows = linkRows(LISTING);
  assert.deepEqual(rows.map((r) => [r.model_id, r.lends, r.lendsLoad, r.lendsRestore, r.borrows]), [
    ['fast', true, false, true, false], ['big', false, true, false, true], ['tiny', false, true, false, false],
  ]);
});

test('the links body is what the rows tick, and reads back to the same rows', () => {
  const rows = linkRows(LISTING);
  rows[2].lends = true;
  rows[2].lendsLoad = false;
  const body = linksBody(ANCHOR, rows);
  assert.deepEqual(body.anchor, ANCHOR);
  assert.deepEqual(body.lends_to, [
    { node_id: 's1', model_id: 'fast', load_if_unloaded: false, restore_after_borrow: true },
    { node_id: 's1', model_id: 'tiny', load_if_unloaded: false, restore_after_borrow: false },
  ]);
  assert.deepEqual(body.borrows_from, [{ node_id: 's2', model_id: 'big', load_if_unloaded: true, restore_after_borrow: false }]);
  const none = linksBody(ANCHOR, rows.map((r) => ({ ...r, lends: false, borrows: false })));
  assert.deepEqual([none.lends_to, none.borrows_from], [[], []]);
});

test('lane models come from the model list and the listing, once each, sorted', () => {
  const models = [
    { id: 'slow', node_id: 'm', capabilities: ['text'] },
    { id: 'pic', node_id: 'm', capabilities: ['image'] },
    { id: 'fast', node_id: 's1', capabilities: ['text'], replicas: [{ node_id: 's1', local_id: 'fast' }, { node_id: 's2', local_id: 'fast-2' }] },
  ];
  assert.deepEqual(laneModels(models, 'text', null).map((m) => `${m.node_id}/${m.model_id}`), ['m/slow', 's1/fast', 's2/fast-2']);
  assert.deepEqual(laneModels(models, 'image', null), [{ node_id: 'm', model_id: 'pic' }]);
  assert.deepEqual(laneModels(models, 'text', LISTING).map((m) => `${m.node_id}/${m.model_id}`),
    ['m/slow', 's1/fast', 's1/tiny', 's2/big', 's2/fast-2']);
});

test('consecutive identical decisions fold with a count; a different one breaks the run', () => {
  const row = (id, extra = {}) => ({
    id, at: 1000 - id, kind: 'plan', trigger: 'tick', outcome: 'skipped', reasons: ['owner_unpriced'],
    lane: 'text', owner_node_id: 'm', owner_model_id: 'slow', helper_node_id: '', helper_model_id: '', ...extra,
  });
  const folded = foldRepeats([row(9), row(8), row(7), row(6, { reasons: ['cost_rejected'] }), row(5), row(4)]);
  assert.deepEqual(folded.map((f) => [f.row.id, f.count, f.ids]), [[9, 3, [9, 8, 7]], [6, 1, [6]], [5, 2, [5, 4]]]);
  assert.equal(folded[0].oldest, 1000 - 7);
  assert.deepEqual(foldRepeats([]), []);
  // Differences in the time or the detail alone do not break a run.
  assert.equal(foldRepeats([row(2, { detail: { a: 1 } }), row(1, { detail: { a: 2 } })]).length, 1);
});

test('reasons read as words, unknown codes still readable', () => {
  assert.equal(reasonText('context_too_small'), 'context window too small');
  assert.equal(reasonText('some_new_reason'), 'some new reason');
  assert.equal(reasonText(null), '');
});
