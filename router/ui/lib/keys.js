// The Keys page's pure rules: the form's values to a POST or PATCH body (only what changed
// on a PATCH), a key's model list and its quota use in words.

// "a, b*" -> ['a', 'b*']; an empty field means every model.
export function modelsOf(text) {
  return String(text || '').split(/[\s,]+/).map((m) => m.trim()).filter(Boolean);
}

function limitOf(text) {
  const v = String(text ?? '').trim();
  return v === '' ? null : Number(v);
}

// The create body, or a change body holding only the fields that differ from `key`.
export function keyBody(form, key = null) {
  const body = {
    models: modelsOf(form.models),
    priority: form.priority || 'interactive',
    max_concurrent: limitOf(form.max_concurrent),
    daily_tokens: limitOf(form.daily_tokens),
  };
  if (!key) return { name: String(form.name || '').trim(), ...body };
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  return Object.fromEntries(Object.entries(body).filter(([k, v]) => !same(v, key[k] ?? null)));
}

export function formOf(key) {
  return {
    name: key.name,
    models: (key.models || []).join(', '),
    priority: key.priority,
    max_concurrent: key.max_concurrent ?? '',
    daily_tokens: key.daily_tokens ?? '',
  };
}

export function modelsText(key) {
  return key.models && key.models.length ? key.models.join(', ') : 'every model';
}

export function usageText(key) {
  const used = (key.tokens_today || 0).toLocaleString('en');
  if (key.daily_tokens === null || key.daily_tokens === undefined) return `${used} tokens today, no quota`;
  return `${used} of ${key.daily_tokens.toLocaleString('en')} tokens today`;
}
