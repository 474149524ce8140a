// A stored trace id (docs/observability.md, "Traces"), linked to the trace viewer when the
// router names one (observability.trace_url, read from the session): its `{trace_id}` becomes
// the id. Without a viewer the id is shown as text, to paste into one.
import { h } from './dom.js';

const TRACE_ID = /^[0-9a-f]{32}$/;

export function traceHref(template, traceId) {
  if (!template || !traceId || !TRACE_ID.test(traceId)) return null;
  return template.split('{trace_id}').join(traceId);
}

export function traceView(session, traceId) {
  if (!traceId) return undefined;
  const href = traceHref(session && session.trace_url, traceId);
  const id = h('span', { class: 'hash' }, traceId);
  return href ? h('a', { href, target: '_blank', rel: 'noopener noreferrer' }, id) : id;
}
