// node --test tests/ui/: the dry run's answer in words (lib/load-plan.js; pure).
import test from 'node:test';
import assert from 'node:assert/strict';
import { loadPlanText } from '../../router/ui/lib/load-plan.js';

const MIB = 1 << 20;
const host = (used, estimate) => ({ device: 'host', budget: 64 * MIB, used, estimate, source: 'estimate' });

test('load plan: a load that fits and stops nothing has nothing to ask', () => {
  const plan = { model: 'b', fits: true, devices: [host(0, 30 * MIB)], evict: [], wait: 'none' };
  assert.deepEqual(loadPlanText(plan), { fits: true, why: '', victims: [], wait: '' });
});

test('load plan: the victims are named with lane and reason, in the order given', () => {
  const plan = {
    model: 'b', fits: true, devices: [host(40 * MIB, 30 * MIB)], wait: 'drain',
    evict: [{ model: 'a', lane: 'text', reason: 'idle; reload cost 1.0' },
      { model: 'e', lane: 'embeddings', reason: 'busy; drained first' }],
  };
  const text = loadPlanText(plan);
  assert.deepEqual(text.victims, ['a (text): idle; reload cost 1.0', 'e (embeddings): busy; drained first']);
  assert.match(text.wait, /running requests/);
});

test('load plan: fits false says which device is short and by what', () => {
  const plan = { model: 'b', fits: false, devices: [host(50 * MIB, 30 * MIB)], evict: [], wait: 'none' };
  const text = loadPlanText(plan);
  assert.equal(text.fits, false);
  assert.match(text.why, /^b does not fit now: host needs about 30\.0 MiB \(estimate\) and has 14\.0 MiB free of a 64\.0 MiB budget\./);
  assert.match(text.why, /pinned or still loading/);
});
