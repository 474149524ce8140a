// node --test tests/ui/: the pure geometry of the analytics timeline.
import test from 'node:test';
import assert from 'node:assert/strict';
import { niceMax, timelinePlan } from '../../router/ui/lib/chart.js';

test('niceMax rounds up to 1, 2 or 5 times a power of ten', () => {
  assert.equal(niceMax(0), 1);
  assert.equal(niceMax(7), 10);
  assert.equal(niceMax(11), 20);
  assert.equal(niceMax(0.3), 0.5);
  assert.equal(niceMax(4000), 5000);
});

test('one bar per bucket given, placed by its start, errors inside requests', () => {
  const plan = timelinePlan({
    buckets: [{ start: 0, requests: 10, errors: 3 }, { start: 300, requests: 5, errors: 9 }],
    from: 0, to: 600, bucketSeconds: 60, width: 640, height: 180,
  });
  assert.equal(plan.bars.length, 2);
  const [a, b] = plan.bars;
  assert.ok(b.x > a.x);
  assert.equal(a.y + a.h, plan.baseline);
  assert.ok(a.errorH < a.h);
  assert.equal(b.errors, 5, 'errors never exceed requests');
  assert.equal(plan.yTicks.at(-1).value, 10);
});

test('an empty range still has axes', () => {
  const plan = timelinePlan({ buckets: [], from: 0, to: 3600, bucketSeconds: 3600 });
  assert.equal(plan.bars.length, 0);
  assert.equal(plan.yTicks.length, 3);
});
