// node --test tests/ui/: the Overview's queue (pure parts; no DOM is touched at import).
import test from 'node:test';
import assert from 'node:assert/strict';
import { fromStatus, queueText, reduce } from '../../router/ui/pages/overview.js';

test('overview: the queue comes from /status and is replaced by queue_position events', () => {
  const rows = [{ model: 'a', position: 1, waiting_s: 2, eta_s: 4 }];
  let state = fromStatus({ runtimes: [], queued: { text: 1 }, queue: { text: rows } });
  assert.deepEqual(state.queue.text, rows);
  state = reduce(state, { event: 'activity', queued: { text: 2 }, in_flight: {} });
  assert.deepEqual(state.queue.text, rows); // activity keeps the queue
  state = reduce(state, { event: 'queue_position', queue: { text: [] } });
  assert.deepEqual(state.queue.text, []);
});

test('overview: an ETA is shown only when the router measured it', () => {
  assert.match(queueText({ model: 'a', position: 2, waiting_s: 1.5, eta_s: 14 }), /^2\. a · waiting .* · ETA 14/);
  assert.match(queueText({ model: 'a', position: 1, waiting_s: 0, eta_s: null }), /ETA unknown$/);
});

test('overview: a state event keeps what it lacks (the memory only /status carries)', () => {
  const memory = { device: 'host', bytes: 4096, source: 'measured' };
  const status = { runtimes: [{ runtime: 'r1', model: 'a', lanes: ['text'], state: 'ready', memory }] };
  let state = fromStatus(status);
  // The stream's opening `state` events: the runtime snapshot without memory.
  state = reduce(state, { event: 'state', runtime: 'r1', model: 'a', lanes: ['text'], state: 'busy' });
  assert.deepEqual(state.runtimes.get('r1').memory, memory);
  assert.equal(state.runtimes.get('r1').state, 'busy'); // what the event carries wins
  state = reduce(state, { event: 'state', runtime: 'r2', model: 'b', lanes: ['image'], state: 'ready' });
  assert.equal(state.runtimes.get('r2').model, 'b'); // a runtime /status did not have yet
});
