// Page state lives in the query string so every view is a deep link and back/forward work.
// The base path of the UI is fixed: /router/ui/<page>.

export const UI_BASE = '/router/ui/';

export function readParams(search = location.search) {
  const out = {};
  for (const [k, v] of new URLSearchParams(search)) out[k] = v;
  return out;
}

// Empty values are dropped so URLs stay short and defaults stay implicit.
export function encodeParams(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

export function pageHref(pageId, params) {
  return `${UI_BASE}${pageId}${encodeParams(params)}`;
}

// The page id a UI path names ('' for the bare base).
export function pageOf(pathname = location.pathname) {
  if (!pathname.startsWith(UI_BASE)) return '';
  return pathname.slice(UI_BASE.length).split('/')[0];
}
