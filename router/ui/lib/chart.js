// A hand-made SVG timeline: one bar per time bucket (requests, with the errors part drawn
// apart), with an accessible name and a text summary. Pages pair it with a "show as table"
// toggle, so no number lives only in the picture.
//
// `timelinePlan` is pure (numbers in, geometry out) and unit-tested under node; `timeline`
// draws a plan with SVG elements made through createElementNS (text nodes only, no markup).

const SVG_NS = 'http://www.w3.org/2000/svg';
const PAD = { left: 44, right: 8, top: 10, bottom: 26 };

// Round an axis maximum up to 1, 2 or 5 times a power of ten, so the ticks read well.
export function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

// buckets: [{start, requests, errors}] (sparse: empty buckets may be left out);
// from/to in unix seconds; bucketSeconds > 0. Returns bars placed by their start time, so a
// sparse list leaves gaps where no request came, and one bar per bucket given.
export function timelinePlan({ buckets, from, to, bucketSeconds, width = 640, height = 180 }) {
  const inner = { w: width - PAD.left - PAD.right, h: height - PAD.top - PAD.bottom };
  const slots = Math.max(1, Math.ceil((to - from) / bucketSeconds));
  const slotW = inner.w / slots;
  const top = niceMax(Math.max(0, ...buckets.map((b) => b.requests || 0)));
  const y = (v) => PAD.top + inner.h - (v / top) * inner.h;
  const bars = buckets.map((b) => {
    const slot = Math.min(slots - 1, Math.max(0, Math.floor((b.start - from) / bucketSeconds)));
    const requests = b.requests || 0;
    const errors = Math.min(requests, b.errors || 0);
    return {
      start: b.start,
      requests,
      errors,
      x: PAD.left + slot * slotW + slotW * 0.1,
      w: Math.max(1, slotW * 0.8),
      y: y(requests),
      h: PAD.top + inner.h - y(requests),
      errorY: y(errors),
      errorH: PAD.top + inner.h - y(errors),
    };
  });
  const yTicks = [0, top / 2, top].map((v) => ({ value: v, y: y(v) }));
  const xTicks = [0, Math.floor(slots / 2), slots].map((slot) => ({
    time: from + slot * bucketSeconds,
    x: PAD.left + slot * slotW,
  }));
  return { width, height, bars, yTicks, xTicks, baseline: PAD.top + inner.h, left: PAD.left };
}

export function el(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// label: the chart's accessible name; summary: one sentence a screen reader hears;
// tickLabel(time) and barLabel(bar) turn times and bars into words.
export function timeline(plan, { label, summary, tickLabel, barLabel, id = 'timeline' }) {
  const titleId = `${id}-title`;
  const descId = `${id}-desc`;
  const axis = el('g', { class: 'chart-axis', 'aria-hidden': 'true' },
    ...plan.yTicks.map((t) => el('g', {},
      el('line', { x1: plan.left, x2: plan.width - PAD.right, y1: t.y, y2: t.y, class: 'chart-grid' }),
      el('text', { x: plan.left - 6, y: t.y + 4, 'text-anchor': 'end' }, formatTick(t.value)))),
    ...plan.xTicks.map((t, i) => el('text', {
      x: t.x, y: plan.height - 8,
      'text-anchor': i === 0 ? 'start' : i === plan.xTicks.length - 1 ? 'end' : 'middle',
    }, tickLabel(t.time))));
  const bars = el('g', { class: 'chart-bars' },
    ...plan.bars.map((bar) => el('g', { class: 'chart-bar', 'data-start': bar.start },
      el('title', {}, barLabel(bar)),
      el('rect', { x: bar.x, y: bar.y, width: bar.w, height: bar.h, class: 'chart-requests' }),
      bar.errors > 0
        ? el('rect', { x: bar.x, y: bar.errorY, width: bar.w, height: bar.errorH, class: 'chart-errors' })
        : null)));
  return el('svg', {
    viewBox: `0 0 ${plan.width} ${plan.height}`,
    role: 'img',
    'aria-labelledby': titleId,
    'aria-describedby': descId,
    class: 'chart',
  }, el('title', { id: titleId }, label), el('desc', { id: descId }, summary), axis, bars);
}

function formatTick(value) {
  if (value >= 1e6) return `${(value / 1e6).toFixed(1)}M`;
  if (value >= 1e3) return `${(value / 1e3).toFixed(value >= 1e4 ? 0 : 1)}k`;
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}
