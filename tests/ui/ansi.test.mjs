// node --test tests/ui/: the pure ANSI parser behind the load-capture console view.
import test from 'node:test';
import assert from 'node:assert/strict';
import { AnsiParser, applySgr, initialState } from '../../router/ui/lib/ansi.js';

test('colours and resets become class runs', () => {
  const runs = new AnsiParser().push('plain \x1b[31mred\x1b[0m \x1b[1;92mbold green\x1b[m end');
  assert.deepEqual(runs, [
    { text: 'plain ', classes: [] },
    { text: 'red', classes: ['ansi-fg-1'] },
    { text: ' ', classes: [] },
    { text: 'bold green', classes: ['ansi-fg-10', 'ansi-bold'] },
    { text: ' end', classes: [] },
  ]);
});

test('HTML stays text', () => {
  const runs = new AnsiParser().push('<img src=x onerror=alert(1)>');
  assert.deepEqual(runs, [{ text: '<img src=x onerror=alert(1)>', classes: [] }]);
});

test('a sequence split across chunks is held back, and state carries over', () => {
  const p = new AnsiParser();
  assert.deepEqual(p.push('a\x1b[3'), [{ text: 'a', classes: [] }]);
  assert.deepEqual(p.push('4mb'), [{ text: 'b', classes: ['ansi-fg-4'] }]);
  assert.deepEqual(p.push('c'), [{ text: 'c', classes: ['ansi-fg-4'] }]);
});

test('a lone ESC that starts no sequence is dropped, not held forever', () => {
  const p = new AnsiParser();
  assert.deepEqual(p.push('x\x1b!y'), [{ text: 'x!y', classes: [] }]);
  assert.deepEqual(p.push('z'), [{ text: 'z', classes: [] }]);
});

test('cursor moves, OSC titles and 24-bit colours are dropped', () => {
  const runs = new AnsiParser().push('\x1b[2K\x1b]0;title\x07\x1b[38;2;1;2;3mt\x1b[38;5;3mu');
  assert.deepEqual(runs, [
    { text: 't', classes: [] },
    { text: 'u', classes: ['ansi-fg-3'] },
  ]);
});

test('carriage returns start lines; other controls vanish', () => {
  const runs = new AnsiParser().push('10%\r20%\r\nok\x07\n');
  assert.deepEqual(runs, [{ text: '10%\n20%\nok\n', classes: [] }]);
});

test('applySgr does not change its input and handles 22/39/49', () => {
  const s0 = initialState();
  const s1 = applySgr(s0, '1;2;31;44');
  assert.equal(s0.bold, false);
  assert.deepEqual(applySgr(s1, '22;39;49'), initialState());
});
