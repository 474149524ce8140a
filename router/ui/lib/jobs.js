// Download jobs, pure: which actions a job state allows, how an event from a job's stream
// changes the job, and the words for its progress. The Download page draws what these decide.

export const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
// The stream ends itself after these (the server closes it): the page stops listening.
export const STREAM_ENDS = new Set([...TERMINAL, 'paused']);

export function jobActions(state) {
  return {
    pause: state === 'running' || state === 'queued',
    resume: state === 'paused' || state === 'interrupted',
    cancel: !TERMINAL.has(state),
  };
}

const PROGRESS_FIELDS = ['bytes_done', 'bytes_total', 'rate_bytes_per_second', 'eta_seconds', 'file'];

// Events carry the job's state and, for `state` and `progress`, its progress fields.
export function applyJobEvent(job, event) {
  const next = { ...job };
  if (event.state) next.state = event.state;
  if (event.error) next.error = event.error;
  for (const field of PROGRESS_FIELDS) if (field in event) next[field] = event[field];
  if (event.event === 'file' && event.path) {
    next.files = (job.files || []).map((f) => (f.path === event.path ? { ...f, done: true } : f));
  }
  return next;
}

export function fraction(job) {
  if (!job.bytes_total) return job.state === 'completed' ? 1 : null;
  return Math.max(0, Math.min(1, job.bytes_done / job.bytes_total));
}

export function formatEta(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
  if (seconds < 60) return `${Math.ceil(seconds)} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

// The plan's one-line verdict, in words: what would be fetched against the room there is.
export function planVerdict(plan, formatBytes) {
  const room = Math.max(0, (plan.free_bytes || 0) - (plan.reserve_bytes || 0));
  const sizes = `${formatBytes(plan.total_bytes)} to fetch; ${formatBytes(room)} usable `
    + `(${formatBytes(plan.free_bytes)} free, ${formatBytes(plan.reserve_bytes)} kept in reserve)`;
  return plan.fits ? `Fits: ${sizes}.` : `Does not fit: ${sizes}.`;
}

// The blockers left once the operator ticked the confirmations.
export function remainingBlockers(plan, { confirmReplace, confirmUnsafe }) {
  return (plan.blockers || []).filter((b) => !(confirmReplace && b.includes('confirm_replace'))
    && !(confirmUnsafe && b.includes('confirm_unsafe')));
}
