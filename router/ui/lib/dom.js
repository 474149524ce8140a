// h(tag, attrs, ...children): the one way pages build DOM. It only ever sets text nodes and
// attributes, never innerHTML, so a model name or a log line can never become markup.
// attrs: `on<event>` keys add listeners; `class`, `for`, `aria-*`, `data-*` are attributes;
// `value`, `checked`, `disabled`, `selected`, `indeterminate` are set as properties; null/false
// values are skipped. Children: strings/numbers become text, arrays are flattened, null skipped.

const PROPS = new Set(['value', 'checked', 'disabled', 'selected', 'indeterminate', 'open']);

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (PROPS.has(key)) {
      el[key] = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Replace everything inside `el` with `children` (text-safe, like h()).
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function text(value) {
  return document.createTextNode(value === null || value === undefined ? '' : String(value));
}
