// The backend console of a load capture: output chunks (base64 bytes from the store) drawn in
// their stored order, stdout and stderr apart by class and by a text label on stderr runs,
// ANSI colours as classes, everything as text nodes (a log line holding HTML stays text).
import { h } from './dom.js';
import { AnsiParser } from './ansi.js';

export function decodeBase64(data) {
  const raw = atob(data || '');
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

export const TRUNCATED_TEXT = 'Output truncated here: the capture limit (analytics.load_capture_max_output_mb) was reached.';

// One console per capture. `append(chunks)` draws a page of chunks; decoders and colour
// parsers are kept per stream so a UTF-8 character or an escape cut by a chunk boundary joins up.
export function createConsole({ label }) {
  const streams = {};
  const pre = h('pre', { class: 'console', tabindex: '0', 'aria-label': label });
  let lines = 0;
  let marked = false;

  function stream(name) {
    if (!streams[name]) {
      streams[name] = { decoder: new TextDecoder('utf-8'), parser: new AnsiParser() };
    }
    return streams[name];
  }

  function markTruncated() {
    if (marked) return;
    marked = true;
    pre.append(h('span', { class: 'truncated-mark', role: 'note' }, TRUNCATED_TEXT));
  }

  function append(chunks) {
    for (const chunk of chunks) {
      const s = stream(chunk.stream);
      const text = s.decoder.decode(decodeBase64(chunk.data), { stream: true });
      const runs = s.parser.push(text);
      const line = h('span', {
        class: `out out-${chunk.stream === 'stderr' ? 'stderr' : 'stdout'}`,
        'data-sequence': chunk.sequence,
        'data-stream': chunk.stream,
      },
      chunk.stream === 'stderr' ? h('span', { class: 'out-label' }, 'stderr ') : null,
      runs.map((run) => (run.classes.length ? h('span', { class: run.classes.join(' ') }, run.text) : run.text)));
      pre.append(line);
      lines += 1;
      if (chunk.truncated) markTruncated();
    }
  }

  return {
    element: pre,
    append,
    markTruncated,
    get count() {
      return lines;
    },
  };
}
