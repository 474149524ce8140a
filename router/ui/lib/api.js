// The one fetch wrapper. Every URL is derived from BASE; pages pass paths like '/status'.
// Errors come back as ApiError{status, code, message, param} parsed from the router's error shapes
// ({"error": {"message", "code", "type"}}, {"error": "..."}, {"detail": {"msg"}}).

export const BASE = '/router/v1';

export class ApiError extends Error {
  constructor(status, code, message, param = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.param = param; // the field a 400 names (router/errors.py), for the form to mark it
  }
}

let csrfToken = null;
const listeners = new Set();

export function setCsrfToken(token) {
  csrfToken = token || null;
}

// Observers (the shell) learn about every 401 so an expired session goes back to the login.
export function onUnauthorized(fn) {
  listeners.add(fn);
}

export function apiUrl(path, query) {
  if (!path.startsWith('/') || path.startsWith('//') || path.startsWith(BASE + '/')) {
    throw new Error(`api path must be relative to ${BASE}: ${path}`);
  }
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) {
    if (v === null || v === undefined || v === '') continue;
    for (const item of Array.isArray(v) ? v : [v]) q.append(k, String(item));
  }
  const s = q.toString();
  return BASE + path + (s ? `?${s}` : '');
}

async function parseError(response) {
  let code = null;
  let param = null;
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    const err = body && body.error !== undefined ? body.error : body && body.detail;
    if (typeof err === 'string') message = err;
    else if (err && typeof err === 'object') {
      message = err.message || err.msg || message;
      code = err.code || err.type || null;
      param = err.param || null;
    }
  } catch {
    // not JSON: the status line is the message
  }
  return new ApiError(response.status, code, message, param);
}

export async function request(method, path, { query, body, signal } = {}) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (csrfToken && method !== 'GET') headers['X-CSRF-Token'] = csrfToken;
  let response;
  try {
    response = await fetch(apiUrl(path, query), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
      signal,
    });
  } catch (exc) {
    if (exc.name === 'AbortError') throw exc;
    throw new ApiError(0, 'network_error', 'the router cannot be reached');
  }
  if (!response.ok) {
    const error = await parseError(response);
    if (response.status === 401) for (const fn of listeners) fn(error);
    throw error;
  }
  if (response.status === 204) return null;
  const type = response.headers.get('Content-Type') || '';
  return type.includes('json') ? response.json() : response.text();
}

export const get = (path, query, opts) => request('GET', path, { ...opts, query });
export const post = (path, body, opts) => request('POST', path, { ...opts, body: body ?? {} });
export const put = (path, body, opts) => request('PUT', path, { ...opts, body: body ?? {} });
export const del = (path, query, opts) => request('DELETE', path, { ...opts, query });

export const api = { get, post, put, del, request, url: apiUrl };
