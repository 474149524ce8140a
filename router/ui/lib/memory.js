// The Overview's memory bars: one bar per device (GET /router/v1/status `devices`), split by
// the runtimes holding it (each runtime's `memory`), an estimate hatched and a measured figure
// solid, then the free space; a legend and a sentence per device say the same in words.
//
// `memoryPlan` is pure (numbers in, geometry out) and unit-tested under node; `memoryBars`
// draws a plan with SVG made through createElementNS and DOM made by h() (text nodes only).
import { el } from './chart.js';
import { h } from './dom.js';
import { formatBytes } from './ui.js';

const WIDTH = 640;
const HEIGHT = 28;
export const COLOURS = 6; // .mem-c0 ... .mem-c5 in pages.css

// devices: the status rows [{device, budget, used, free, kind}]; runtimes: the status runtimes
// [{runtime, model, lanes, memory: {device, bytes, source} | null}]. A runtime's bytes are drawn
// on its `memory.device`. `used` is the sum drawn, so the bar and its words always agree, also
// after an `unloaded` event removed a runtime before the next snapshot. The scale is the larger
// of the budget and the used bytes, so an over-full device shows its overflow past the budget.
export function memoryPlan(devices, runtimes, width = WIDTH) {
  const colourOf = new Map();
  const held = [...runtimes].filter((rt) => rt.memory && rt.memory.bytes > 0)
    .sort((a, b) => String(a.runtime).localeCompare(String(b.runtime)));
  held.forEach((rt, i) => colourOf.set(rt.runtime, i % COLOURS));
  return (devices || []).map((d) => {
    const mine = held.filter((rt) => rt.memory.device === d.device);
    const used = mine.reduce((sum, rt) => sum + rt.memory.bytes, 0);
    const scale = Math.max(d.budget || 0, used, 1);
    let x = 0;
    const segments = mine.map((rt) => {
      const w = (rt.memory.bytes / scale) * width;
      const seg = {
        runtime: rt.runtime, model: rt.model, lane: (rt.lanes || [])[0] || '', state: rt.state,
        bytes: rt.memory.bytes, source: rt.memory.source, colour: colourOf.get(rt.runtime), x, w,
      };
      x += w;
      return seg;
    });
    const free = Math.max(0, (d.budget || 0) - used);
    return {
      device: d.device, kind: d.kind, budget: d.budget || 0, used, free, over: used > (d.budget || 0),
      segments, freeX: x, freeW: Math.max(0, (free / scale) * width), width,
    };
  });
}

export function deviceSummary(bar) {
  const name = bar.kind === 'gpu' ? `GPU ${bar.device}` : `${bar.device} memory`;
  const over = bar.over ? `, ${formatBytes(bar.used - bar.budget)} over the budget` : '';
  return `${name}: ${formatBytes(bar.used)} used of a ${formatBytes(bar.budget)} budget, `
    + `${formatBytes(bar.free)} free${over}`;
}

export function segmentText(seg) {
  const lane = seg.lane ? ` (${seg.lane})` : '';
  return `${seg.model}${lane}: ${formatBytes(seg.bytes)}, ${seg.source === 'measured' ? 'measured' : 'estimate'}`;
}

function hatch(id) {
  return el('defs', {}, el('pattern', {
    id, width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)',
  }, el('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'mem-hatch-line' })));
}

// One bar: coloured rects per runtime (a hatch pattern over an estimate), then the free rect.
function barSvg(bar, index) {
  const hatchId = `mem-hatch-${index}`;
  const rects = bar.segments.map((seg) => el('g', {
    class: `mem-seg mem-${seg.source === 'measured' ? 'measured' : 'estimate'}`,
    'data-runtime': seg.runtime, 'data-source': seg.source,
  },
  el('title', {}, segmentText(seg)),
  el('rect', { x: seg.x, y: 0, width: seg.w, height: HEIGHT, class: `mem-c${seg.colour}` }),
  seg.source === 'measured' ? null
    : el('rect', { x: seg.x, y: 0, width: seg.w, height: HEIGHT, fill: `url(#${hatchId})` })));
  return el('svg', {
    viewBox: `0 0 ${bar.width} ${HEIGHT}`, role: 'img', class: 'mem-bar', 'aria-label': deviceSummary(bar),
    preserveAspectRatio: 'none', 'data-device': bar.device,
  }, hatch(hatchId), el('rect', { x: 0, y: 0, width: bar.width, height: HEIGHT, class: 'mem-track' }),
  ...rects,
  el('rect', { x: bar.freeX, y: 0, width: bar.freeW, height: HEIGHT, class: 'mem-free', 'data-free': bar.free }));
}

function swatch(colour, estimate) {
  return el('svg', { viewBox: '0 0 12 12', class: 'mem-swatch', 'aria-hidden': 'true' },
    colour === null ? el('rect', { width: 12, height: 12, class: 'mem-free' })
      : el('rect', { width: 12, height: 12, class: `mem-c${colour}` }),
    estimate ? el('rect', { width: 12, height: 12, fill: 'url(#mem-hatch-legend)' }) : null);
}

function legend(bar) {
  return h('ul', { class: 'chart-legend mem-legend', 'aria-label': `What holds ${bar.device}` },
    ...bar.segments.map((seg) => h('li', { 'data-runtime': seg.runtime },
      swatch(seg.colour, seg.source !== 'measured'), segmentText(seg))),
    h('li', { class: 'mem-free-item' }, swatch(null, false), `free: ${formatBytes(bar.free)}`));
}

// The whole block: a key for hatched/solid, then per device its sentence, bar and legend.
export function memoryBars(plan) {
  if (!plan.length) return h('p', { class: 'muted' }, 'No device reported.');
  const key = h('p', { class: 'muted mem-key' },
    el('svg', { viewBox: '0 0 0 0', class: 'mem-defs', 'aria-hidden': 'true' }, hatch('mem-hatch-legend')),
    'Hatched: an estimate before measurement; solid: measured after the load.');
  return h('div', { class: 'memory' }, key, ...plan.map((bar, i) => h('figure', { class: 'mem-device' },
    h('figcaption', {}, deviceSummary(bar)), barSvg(bar, i), legend(bar))));
}
