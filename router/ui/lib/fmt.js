// Number and time formatting for the analytics, capture, error and benchmark pages. Pure.

const DASH = '—';

export function formatCount(value) {
  if (value === null || value === undefined || !Number.isFinite(Number(value))) return DASH;
  return Number(value).toLocaleString('en-US');
}

export function formatMs(value) {
  if (value === null || value === undefined || !Number.isFinite(Number(value))) return DASH;
  const ms = Number(value);
  if (ms >= 1000) return `${(ms / 1000).toFixed(ms >= 10_000 ? 0 : 1)} s`;
  if (ms >= 100) return `${Math.round(ms)} ms`;
  return `${ms.toFixed(1)} ms`;
}

// An ISO-like local date and time (YYYY-MM-DD HH:MM:SS): unambiguous in every locale.
export function formatDateTime(epochSeconds) {
  if (epochSeconds === null || epochSeconds === undefined || !Number.isFinite(epochSeconds)) return DASH;
  const d = new Date(epochSeconds * 1000);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function formatRate(bytesPerSecond, formatBytes) {
  if (!Number.isFinite(bytesPerSecond) || bytesPerSecond <= 0) return DASH;
  return `${formatBytes(bytesPerSecond)}/s`;
}

// `datetime-local` input value <-> unix seconds (local time; empty means no bound).
export function toLocalInput(epochSeconds) {
  if (!Number.isFinite(epochSeconds)) return '';
  const d = new Date(epochSeconds * 1000);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

export function fromLocalInput(value) {
  if (!value) return null;
  const ms = new Date(value).getTime();
  return Number.isFinite(ms) ? Math.floor(ms / 1000) : null;
}
