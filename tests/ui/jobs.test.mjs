// node --test tests/ui/: the Download page's pure job rules.
import test from 'node:test';
import assert from 'node:assert/strict';
import {
  applyJobEvent, formatEta, fraction, jobActions, planVerdict, remainingBlockers,
} from '../../router/ui/lib/jobs.js';

const bytes = (n) => `${n} B`;

test('actions follow the state', () => {
  assert.deepEqual(jobActions('running'), { pause: true, resume: false, cancel: true });
  assert.deepEqual(jobActions('paused'), { pause: false, resume: true, cancel: true });
  assert.deepEqual(jobActions('completed'), { pause: false, resume: false, cancel: false });
  assert.deepEqual(jobActions('interrupted'), { pause: false, resume: true, cancel: true });
});

test('an event updates state, progress and the finished file', () => {
  const job = { state: 'queued', bytes_done: 0, bytes_total: 100, files: [{ path: 'a', done: false }] };
  const moved = applyJobEvent(job, { event: 'progress', state: 'running', bytes_done: 40, rate_bytes_per_second: 10, eta_seconds: 6 });
  assert.equal(moved.state, 'running');
  assert.equal(fraction(moved), 0.4);
  assert.equal(job.bytes_done, 0, 'the input is not changed');
  const file = applyJobEvent(moved, { event: 'file', state: 'running', path: 'a' });
  assert.equal(file.files[0].done, true);
});

test('fraction is null (indeterminate) without a total, 1 when complete', () => {
  assert.equal(fraction({ bytes_total: 0, state: 'running' }), null);
  assert.equal(fraction({ bytes_total: 0, state: 'completed' }), 1);
});

test('ETA in words', () => {
  assert.equal(formatEta(null), '—');
  assert.equal(formatEta(4.2), '5 s');
  assert.equal(formatEta(600), '10 min');
  assert.equal(formatEta(3 * 3600 + 120), '3 h 2 min');
});

test('the plan verdict states sizes against the usable room', () => {
  const plan = { fits: false, total_bytes: 500, free_bytes: 400, reserve_bytes: 100 };
  assert.equal(planVerdict(plan, bytes), 'Does not fit: 500 B to fetch; 300 B usable (400 B free, 100 B kept in reserve).');
});

test('ticked confirmations lift only their own blockers', () => {
  const plan = { blockers: ['files would be replaced; send confirm_replace: true', 'the hub flags files as unsafe; send confirm_unsafe: true', '9 bytes do not fit'] };
  assert.deepEqual(remainingBlockers(plan, { confirmReplace: true, confirmUnsafe: false }).length, 2);
  assert.deepEqual(remainingBlockers(plan, { confirmReplace: true, confirmUnsafe: true }), ['9 bytes do not fit']);
});
