// node --test tests/ui/: a vLLM runtime put to sleep instead of stopped shows as sleeping.
import test from 'node:test';
import assert from 'node:assert/strict';
import { RESYNC } from '../../router/ui/lib/sse.js';
import { fromStatus, reduce } from '../../router/ui/pages/overview.js';

test('overview: a sleeping event marks the runtime sleeping, keeping the rest', () => {
  const rt = { runtime: 'v@text', model: 'v', lanes: ['text'], state: 'ready', pid: 7 };
  let state = fromStatus({ runtimes: [rt], queued: {}, queue: {} });
  state = reduce(state, { event: 'sleeping', runtime: 'v@text', time: 5 });
  assert.deepEqual(state.runtimes.get('v@text'), { ...rt, state: 'sleeping', since: 5 });
  assert.equal(reduce(fromStatus({ runtimes: [] }), { event: 'sleeping', runtime: 'x' }), RESYNC);
});
