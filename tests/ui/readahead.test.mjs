// node --test tests/ui/: the load capture's read-ahead line (issue 26, docs/swaps.md).
import test from 'node:test';
import assert from 'node:assert/strict';
import { pooledText, readaheadText } from '../../router/ui/pages/captures.js';

test('captures: the read-ahead line says what was read before the load began', () => {
  assert.match(readaheadText(null), /^none /);
  const done = { result: 'done', bytes: 3 << 20, seconds: 0.25, total: 3 << 20, capped: false, done: true };
  assert.equal(readaheadText(done), 'done: 3.0 MiB read in 250 ms');
  const capped = { ...done, result: 'stopped', bytes: 1 << 20, total: 4 * 2 ** 30, capped: true };
  assert.equal(readaheadText(capped),
    'stopped: 1.0 MiB of 4.0 GiB (capped to what fits in host memory) read in 250 ms');
});

test('captures: a spread load says what it sent to each lending node (issue 34)', () => {
  assert.equal(pooledText(null), undefined); // a load on one box: no row
  const pooled = {
    bytes_sent: 120 << 20,
    nodes: [{ node_id: 'b', bytes_sent: 80 << 20 }, { node_id: 'c', bytes_sent: 40 << 20 }],
  };
  assert.equal(pooledText(pooled), '120.0 MiB sent to lending nodes (b 80.0 MiB, c 40.0 MiB)');
});
