// ANSI SGR colour codes in backend console output, parsed into styled text runs.
//
// Pure (no DOM): `AnsiParser.push(text)` returns runs `{text, classes}`; the page turns each run
// into a text node inside a span whose classes the stylesheet colours. Classes, never inline
// styles, because the UI's CSP forbids inline style. Text stays text: `<img onerror=...>` in a
// log line is shown as those characters. Codes the UI does not draw (cursor moves, 24-bit
// colours, OSC titles) are dropped so they never show as garbage.

const FG_BASE = 30;
const BG_BASE = 40;
const BRIGHT_FG = 90;
const BRIGHT_BG = 100;

// CSI ... final byte, or OSC ... BEL/ST, or a lone ESC + one char.
const ESCAPE = /\x1b(?:\[([0-9;?]*)([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])/g;

export function initialState() {
  return { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false };
}

function colourFromExtended(codes, i) {
  // 38;5;n (256-colour: only its first 16 map to classes) or 38;2;r;g;b (dropped).
  if (codes[i + 1] === 5) {
    const n = codes[i + 2];
    return { colour: Number.isInteger(n) && n >= 0 && n < 16 ? n : null, skip: 2 };
  }
  if (codes[i + 1] === 2) return { colour: null, skip: 4 };
  return { colour: null, skip: 0 };
}

// Applies one SGR parameter list to a state; returns the new state (the input is not changed).
export function applySgr(state, params) {
  const next = { ...state };
  const codes = params === '' ? [0] : params.split(';').map((p) => (p === '' ? 0 : Number(p)));
  for (let i = 0; i < codes.length; i += 1) {
    const code = codes[i];
    if (code === 0) Object.assign(next, initialState());
    else if (code === 1) next.bold = true;
    else if (code === 2) next.dim = true;
    else if (code === 3) next.italic = true;
    else if (code === 4) next.underline = true;
    else if (code === 22) { next.bold = false; next.dim = false; }
    else if (code === 23) next.italic = false;
    else if (code === 24) next.underline = false;
    else if (code >= FG_BASE && code < FG_BASE + 8) next.fg = code - FG_BASE;
    else if (code >= BRIGHT_FG && code < BRIGHT_FG + 8) next.fg = code - BRIGHT_FG + 8;
    else if (code >= BG_BASE && code < BG_BASE + 8) next.bg = code - BG_BASE;
    else if (code >= BRIGHT_BG && code < BRIGHT_BG + 8) next.bg = code - BRIGHT_BG + 8;
    else if (code === 39) next.fg = null;
    else if (code === 49) next.bg = null;
    else if (code === 38 || code === 48) {
      const { colour, skip } = colourFromExtended(codes, i);
      if (colour !== null) next[code === 38 ? 'fg' : 'bg'] = colour;
      i += skip;
    }
  }
  return next;
}

export function classesOf(state) {
  const classes = [];
  if (state.fg !== null) classes.push(`ansi-fg-${state.fg}`);
  if (state.bg !== null) classes.push(`ansi-bg-${state.bg}`);
  if (state.bold) classes.push('ansi-bold');
  if (state.dim) classes.push('ansi-dim');
  if (state.italic) classes.push('ansi-italic');
  if (state.underline) classes.push('ansi-underline');
  return classes;
}

// One parser per output stream: colour state carries over chunk boundaries, and an escape
// sequence cut in two by a chunk boundary is held back until its end arrives.
export class AnsiParser {
  constructor() {
    this.state = initialState();
    this.pending = '';
  }

  push(text) {
    let input = this.pending + text;
    this.pending = '';
    const cut = input.lastIndexOf('\x1b');
    if (cut !== -1 && unfinishedAt(input, cut)) {
      this.pending = input.slice(cut);
      input = input.slice(0, cut);
    }
    const runs = [];
    let last = 0;
    for (const match of input.matchAll(ESCAPE)) {
      addRun(runs, input.slice(last, match.index), this.state);
      if (match[2] === 'm') this.state = applySgr(this.state, match[1]);
      last = match.index + match[0].length;
    }
    addRun(runs, input.slice(last), this.state);
    return runs;
  }
}

// The start of an escape sequence whose end has not arrived yet.
const UNFINISHED = /^\x1b(?:\[[0-9;?]*|\][^\x07\x1b]*)?$/;

function unfinishedAt(text, index) {
  return UNFINISHED.test(text.slice(index));
}

function addRun(runs, text, state) {
  if (text === '') return;
  // A lone carriage return (a progress bar redrawing its line) starts a new line here; other
  // control characters (a bell, a backspace) would render as boxes. Tabs and newlines stay.
  const clean = text
    .replace(/\r\n?/g, '\n')
    .replace(/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/g, '');
  if (clean === '') return;
  const classes = classesOf(state);
  const prev = runs[runs.length - 1];
  if (prev && prev.classes.join(' ') === classes.join(' ')) prev.text += clean;
  else runs.push({ text: clean, classes });
}
