// node --test tests/ui/: the Keys page's pure rules.
import test from 'node:test';
import assert from 'node:assert/strict';
import { formOf, keyBody, modelsOf, modelsText, usageText } from '../../router/ui/lib/keys.js';

const KEY = {
  name: 'agent', models: ['a', 'b*'], priority: 'batch', max_concurrent: null, daily_tokens: 1000,
  tokens_today: 250,
};

test('the models field splits on commas and spaces; empty means every model', () => {
  assert.deepEqual(modelsOf(' a, b*  c,'), ['a', 'b*', 'c']);
  assert.deepEqual(modelsOf(''), []);
  assert.equal(modelsText({ models: [] }), 'every model');
});

test('a create body carries every field; a change body only what differs', () => {
  const form = { name: ' new ', models: 'x', priority: 'interactive', max_concurrent: '2', daily_tokens: '' };
  assert.deepEqual(keyBody(form), {
    name: 'new', models: ['x'], priority: 'interactive', max_concurrent: 2, daily_tokens: null,
  });
  assert.deepEqual(keyBody(formOf(KEY), KEY), {});
  assert.deepEqual(keyBody({ ...formOf(KEY), daily_tokens: '' }, KEY), { daily_tokens: null });
  assert.deepEqual(keyBody({ ...formOf(KEY), models: 'a' }, KEY), { models: ['a'] });
});

test('usage reads against the quota, or says there is none', () => {
  assert.equal(usageText(KEY), '250 of 1,000 tokens today');
  assert.equal(usageText({ ...KEY, daily_tokens: null }), '250 tokens today, no quota');
});
