// node --test tests/ui/: the Overview's memory bars (pure geometry; no DOM is touched).
import test from 'node:test';
import assert from 'node:assert/strict';
import { deviceSummary, memoryPlan } from '../../router/ui/lib/memory.js';

const MIB = 1 << 20;
const host = { device: 'host', budget: 100 * MIB, used: 0, free: 100 * MIB, kind: 'host' };
const rt = (runtime, bytes, source = 'estimate', device = 'host') => ({
  runtime, model: runtime, lanes: ['text'], memory: { device, bytes, source },
});

test('memory: segments per runtime, then the free space, filling the budget', () => {
  const [bar] = memoryPlan([host], [rt('b', 30 * MIB, 'measured'), rt('a', 20 * MIB)], 100);
  assert.deepEqual(bar.segments.map((s) => [s.runtime, s.x, s.w, s.source]),
    [['a', 0, 20, 'estimate'], ['b', 20, 30, 'measured']]);
  assert.equal(bar.used, 50 * MIB);
  assert.equal(bar.free, 50 * MIB);
  assert.equal(bar.freeX, 50);
  assert.equal(bar.freeW, 50);
  assert.notEqual(bar.segments[0].colour, bar.segments[1].colour);
  assert.match(deviceSummary(bar), /host memory: 50\.0 MiB used of a 100\.0 MiB budget, 50\.0 MiB free$/);
});

test('memory: a runtime is drawn on its device; none or null memory draws nothing', () => {
  const gpu = { device: 'gpu0', budget: 10 * MIB, kind: 'gpu' };
  const none = { runtime: 'c', model: 'c', lanes: ['image'], memory: null };
  const [h, g] = memoryPlan([host, gpu], [rt('a', 5 * MIB, 'estimate', 'gpu0'), none], 100);
  assert.equal(h.segments.length, 0);
  assert.equal(h.freeW, 100);
  assert.deepEqual(g.segments.map((s) => [s.runtime, s.w]), [['a', 50]]);
});

test('memory: an over-full device scales to its use and says by how much', () => {
  const [bar] = memoryPlan([host], [rt('a', 150 * MIB)], 300);
  assert.equal(bar.over, true);
  assert.equal(bar.free, 0);
  assert.equal(bar.segments[0].w, 300);
  assert.match(deviceSummary(bar), /50\.0 MiB over the budget$/);
});
