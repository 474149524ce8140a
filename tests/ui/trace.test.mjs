// node --test tests/ui/: a stored trace id links to the configured trace viewer (issue 36).
import test from 'node:test';
import assert from 'node:assert/strict';
import { traceHref } from '../../router/ui/lib/trace.js';

test('trace: the viewer URL gets the trace id in place of {trace_id}', () => {
  const id = '4bf92f3577b34da6a3ce929d0e0e4736';
  assert.equal(traceHref('http://jaeger.lan:16686/trace/{trace_id}', id),
    `http://jaeger.lan:16686/trace/${id}`);
  assert.equal(traceHref('http://tempo.lan/explore?q={trace_id}&t={trace_id}', id),
    `http://tempo.lan/explore?q=${id}&t=${id}`);
  assert.equal(traceHref(null, id), null); // no viewer configured: the id stays text
  assert.equal(traceHref('http://x/{trace_id}', 'not-a-trace"><script>'), null);
});
