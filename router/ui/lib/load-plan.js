// Before a load: the dry run's answer (POST /router/v1/load {"dry_run": true}, docs/residency.md)
// in words. `loadPlanText` is pure and unit-tested under node; `askedLoad` asks the router,
// asks the operator when the load would stop anything, then loads.
import { h } from './dom.js';
import { confirmDialog, formatBytes } from './ui.js';

// The devices a plan is short on: its estimate above what is free there now.
function shortDevices(plan) {
  return (plan.devices || []).filter((d) => d.estimate > Math.max(0, d.budget - d.used));
}

// Pure: {fits, why, victims: [text], wait} for one dry-run answer.
export function loadPlanText(plan) {
  const victims = (plan.evict || []).map((v) => `${v.model} (${v.lane}): ${v.reason}`);
  const wait = plan.wait === 'drain'
    ? 'The load waits until the running requests of the busy ones have finished.' : '';
  if (plan.fits) return { fits: true, why: '', victims, wait };
  const short = shortDevices(plan);
  const parts = (short.length ? short : plan.devices || []).map((d) => `${d.device} needs about `
    + `${formatBytes(d.estimate)} (${d.source}) and has ${formatBytes(Math.max(0, d.budget - d.used))} free `
    + `of a ${formatBytes(d.budget)} budget`);
  const why = `${plan.model} does not fit now: ${parts.join('; ') || 'no device has room'}. `
    + 'What holds the rest cannot be stopped for it (pinned or still loading).';
  return { fits: false, why, victims: [], wait: '' };
}

// The dry run first; a load that stops nothing goes ahead, one that stops runtimes asks first
// (naming them), one that cannot fit throws its reason (the button shows it beside itself).
// Resolves true when it loaded, false when the operator said no.
export async function askedLoad(api, model, body = {}) {
  const plan = await api.post('/load', { ...body, model, dry_run: true });
  const text = loadPlanText(plan);
  if (!text.fits) throw new Error(text.why);
  if (text.victims.length) {
    const ok = await confirmDialog({
      title: `Load ${model}?`,
      message: `Loading ${model} stops ${text.victims.length === 1 ? 'this runtime' : 'these runtimes'} first:`,
      details: h('div', {},
        h('ul', { class: 'evict-list', 'aria-label': 'Runtimes the load stops' },
          ...text.victims.map((v) => h('li', {}, v))),
        text.wait ? h('p', {}, text.wait) : null),
      confirmLabel: text.victims.length === 1 ? 'Stop it and load' : 'Stop them and load',
    });
    if (!ok) return false;
  }
  await api.post('/load', { ...body, model });
  return true;
}
