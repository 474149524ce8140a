// node --test tests/ui/: the pure decisions inside the data pages (no DOM is touched at import).
import test from 'node:test';
import assert from 'node:assert/strict';
import { bucketWords, errorRate, rangeQuery } from '../../router/ui/pages/analytics.js';
import { applyEvent, choiceParams, runBody } from '../../router/ui/pages/benchmarks.js';
import { listQuery } from '../../router/ui/pages/captures.js';
import { filterErrors, phaseOf } from '../../router/ui/pages/load-errors.js';
import { modelList, unavailable } from '../../router/ui/pages/webuis.js';

test('analytics: one range query, unknown ranges fall back to 24h', () => {
  assert.deepEqual(rangeQuery('7d'), { range: '7d' });
  assert.deepEqual(rangeQuery('2h'), { range: '24h' });
  assert.equal(bucketWords(60), 'minute');
  assert.equal(bucketWords(900), '15 minutes');
  assert.equal(bucketWords(21600), '6 hours');
  assert.equal(bucketWords(86400), 'day');
  assert.equal(errorRate({ requests: 0, errors: 0 }), null);
  assert.equal(errorRate({ requests: 8, errors: 2 }), 0.25);
});

test('load errors: the phase from the record, filters by model and phase', () => {
  const serving = { model: 'a', reason: 'the backend exited with code 9 while serving' };
  const load = { model: 'b', reason: 'exited with code 3' };
  assert.equal(phaseOf(serving), 'serving');
  assert.equal(phaseOf(load), 'load');
  assert.equal(phaseOf({ ...load, phase: 'serving' }), 'serving', 'an API phase wins');
  assert.deepEqual(filterErrors([serving, load], { model: '', phase: 'load' }), [load]);
  assert.deepEqual(filterErrors([serving, load], { model: 'a', phase: '' }), [serving]);
});

test('captures: the list query keeps the filters and the cursor, nothing else', () => {
  assert.deepEqual(listQuery({ status: 'failed', attempt: 'x', junk: 'y' }, 'c1'),
    { limit: 50, cursor: 'c1', status: 'failed' });
  assert.deepEqual(listQuery({}, null), { limit: 50, cursor: null });
});

test('benchmarks: the run body, the URL state and progress from events', () => {
  assert.deepEqual(runBody({ modelId: 'm', type: 'general', sections: ['llm'], iterations: 2 }),
    { model_id: 'm', type: 'general', iterations: 2 });
  assert.deepEqual(runBody({ modelId: 'm', type: 'section', sections: ['llm'], iterations: 1 }),
    { model_id: 'm', type: 'section', iterations: 1, sections: ['llm'] });
  assert.deepEqual(choiceParams({ type: 'section', sections: ['runtime', 'llm'], iterations: 3 }),
    { type: 'section', sections: 'runtime,llm', iterations: '3' });
  assert.deepEqual(choiceParams({ type: 'general', sections: ['llm'], iterations: 1 }),
    { type: '', sections: '', iterations: '' });
  let run = applyEvent(null, { event: 'benchmark_started', run_id: 'r', model_id: 'm', sections: ['runtime', 'llm'] });
  run = applyEvent(run, { event: 'benchmark_section', run_id: 'r', section: 'runtime', status: 'running' });
  assert.equal(run.current, 'runtime');
  run = applyEvent(run, { event: 'benchmark_section', run_id: 'other', section: 'llm', status: 'success' });
  assert.deepEqual(run.done, {}, "another run's events are ignored");
  run = applyEvent(run, { event: 'benchmark_section', run_id: 'r', section: 'runtime', status: 'success', summary: { status: 'success' } });
  assert.deepEqual(Object.keys(run.done), ['runtime']);
  run = applyEvent(run, { event: 'benchmark_finished', run_id: 'r', status: 'partial' });
  assert.equal(run.status, 'partial');
});

test('web UIs: a long model list is shortened, 501 means not offered', () => {
  const models = Array.from({ length: 11 }, (_, i) => ({ model_id: `m${i}` }));
  assert.equal(modelList(models), 'm0, m1, m2, m3, m4, m5, m6, m7 and 3 more');
  assert.equal(modelList([]), '—');
  assert.equal(unavailable({ status: 501 }), true);
  assert.equal(unavailable({ status: 404 }), false);
});
