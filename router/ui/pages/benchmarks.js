// Benchmarks: choose a model and sections, run, watch progress (benchmark_* events on the
// shared stream), and read the result beside the model's history. The model is in the URL.
// First load: two API calls (the model list, then that model's history).
import { h, replace } from '../lib/dom.js';
import { formatDateTime, formatMs } from '../lib/fmt.js';
import { badge, navPage, pageHeader, progressBar, showError, table } from '../lib/ui.js';

export const SECTIONS = ['runtime', 'llm', 'embed', 'image', 'voice', 'music'];
const SECTION_LABELS = {
  runtime: 'Runtime (unload, then load)', llm: 'Text generation', embed: 'Embeddings',
  image: 'Image generation', voice: 'Voice', music: 'Music',
};
const STATUS_STATE = { success: 'ready', running: 'loading', failed: 'failed', partial: 'error', skipped: 'disabled' };
const EVENTS = new Set(['benchmark_started', 'benchmark_section', 'benchmark_finished']);

// The POST body from the form's choices; a general run covers every section.
export function runBody({ modelId, type, sections, iterations }) {
  const body = { model_id: modelId, type, iterations };
  if (type === 'section') body.sections = sections;
  return body;
}

// Progress of a run from its events: sections finished out of those requested.
export function applyEvent(run, event) {
  if (event.event === 'benchmark_started') {
    return { runId: event.run_id, modelId: event.model_id, sections: event.sections, done: {}, status: 'running' };
  }
  if (!run || event.run_id !== run.runId) return run;
  if (event.event === 'benchmark_section' && event.status !== 'running') {
    return { ...run, done: { ...run.done, [event.section]: event.summary || { status: event.status } } };
  }
  if (event.event === 'benchmark_section') return { ...run, current: event.section };
  if (event.event === 'benchmark_finished') return { ...run, status: event.status, current: null };
  return run;
}

function statusBadge(status) {
  return badge(STATUS_STATE[status] || status, status);
}

function metricsTable(summary, caption) {
  return table({
    caption,
    columns: [
      { key: 'name', label: 'Metric', rowHeader: true },
      { key: 'value', label: 'Value', class: 'num', cell: (m) => (m.value === null ? '—' : `${m.value} ${m.unit}`.trim()) },
      { key: 'status', label: 'Status', cell: (m) => statusBadge(m.status) },
      { key: 'error', label: 'Error', class: 'wrap', cell: (m) => m.error || '' },
    ],
    rows: summary.metrics || [],
    empty: summary.error || 'No metric was measured.',
  });
}

function sectionsView(sections, caption) {
  const rows = SECTIONS.filter((s) => sections[s]).map((s) => sections[s]);
  return table({
    caption,
    columns: [
      { key: 'section', label: 'Section', rowHeader: true },
      { key: 'status', label: 'Status', cell: (s) => statusBadge(s.status) },
      { key: 'duration_ms', label: 'Duration', class: 'num', cell: (s) => formatMs(s.duration_ms) },
      {
        key: 'metrics', label: 'Metrics', class: 'wrap',
        cell: (s) => (s.metrics || []).map((m) => `${m.name}: ${m.value ?? '—'} ${m.unit}`.trim()).join('; ') || s.error || '—',
      },
    ],
    rows,
    empty: 'No section has run yet.',
  });
}

function historyTable(history) {
  return table({
    caption: 'Past runs, newest first',
    columns: [
      { key: 'started_at', label: 'Started', rowHeader: true, cell: (r) => formatDateTime(r.started_at) },
      { key: 'type', label: 'Type' },
      { key: 'status', label: 'Status', cell: (r) => statusBadge(r.status) },
      { key: 'duration_ms', label: 'Duration', class: 'num', cell: (r) => formatMs(r.duration_ms) },
      { key: 'error', label: 'Error', class: 'wrap', cell: (r) => r.error || '' },
    ],
    rows: history,
    empty: 'This model has not been benchmarked yet.',
  });
}

// The form's choices as URL state (`type`, `sections=a,b`, `iterations`) and back.
export function choiceParams(choice) {
  return {
    type: choice.type === 'section' ? 'section' : '',
    sections: choice.type === 'section' ? choice.sections.join(',') : '',
    iterations: choice.iterations > 1 ? String(choice.iterations) : '',
  };
}

function runForm(models, params, onrun, onmodel, onchoice) {
  const chosen = new Set(String(params.sections || '').split(',').filter(Boolean));
  const modelSelect = h('select', { id: 'bench-model', name: 'model', required: true, onchange: (ev) => onmodel(ev.target.value) },
    h('option', { value: '' }, 'Choose a model'),
    models.map((m) => h('option', { value: m.id, selected: m.id === params.model }, m.id)));
  const typeRadio = (value, label) => h('label', {},
    h('input', { type: 'radio', name: 'type', value, checked: (params.type || 'general') === value }), label);
  // Ticking a section means a section run: the radio follows, so the form never contradicts itself.
  const pickSections = (ev) => {
    if (ev.target.checked) ev.target.form.querySelector('input[name=type][value=section]').checked = true;
  };
  const boxes = SECTIONS.map((s) => h('label', {},
    h('input', { type: 'checkbox', name: 'section', value: s, checked: chosen.has(s), onchange: pickSections }), SECTION_LABELS[s]));
  const iterations = h('input', {
    id: 'bench-iterations', type: 'number', name: 'iterations', min: 1, max: 20, value: params.iterations || '1',
  });
  const run = h('button', { type: 'submit', class: 'primary' }, 'Run benchmark');
  const form = h('form', { class: 'bench-form', novalidate: true },
    h('div', { class: 'filters' }, h('label', { for: 'bench-model' }, 'Model'), modelSelect,
      h('label', { for: 'bench-iterations' }, 'Iterations'), iterations),
    h('fieldset', {}, h('legend', {}, 'Sections'), typeRadio('general', 'All sections (general run)'),
      typeRadio('section', 'Only these sections:'), h('div', { class: 'checks' }, boxes)),
    h('div', { class: 'actions' }, run));
  const choice = () => {
    const data = new FormData(form);
    return {
      modelId: data.get('model'), type: data.get('type') || 'general',
      sections: data.getAll('section'), iterations: Number(data.get('iterations')),
    };
  };
  // Every change of type, sections or iterations goes into the URL (a deep link reloads it).
  form.addEventListener('change', (ev) => {
    if (ev.target !== modelSelect) onchoice(choiceParams(choice()));
  });
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    onrun(choice(), run);
  });
  return form;
}

export default navPage('benchmarks', 'Benchmarks', {
  async mount(root, ctx) {
    const formSlot = h('div');
    const runSlot = h('div');
    const progress = h('section', { 'aria-label': 'Current run' });
    const result = h('div');
    const historySlot = h('div');
    const history = h('div');
    let run = null;
    replace(root, pageHeader('Benchmarks'), formSlot, runSlot, progress, result,
      h('h2', {}, 'History'), historySlot, history);

    function renderProgress() {
      if (!run || run.modelId !== ctx.params.model) {
        replace(progress);
        return;
      }
      const total = run.sections.length;
      const done = Object.keys(run.done).length;
      const finished = run.status !== 'running';
      replace(progress, h('h2', {}, finished ? 'Last run' : 'Running'),
        h('p', { role: 'status' }, finished
          ? ['Finished: ', statusBadge(run.status)]
          : `${done} of ${total} sections done${run.current ? `; running ${run.current}` : ''}.`),
        progressBar(`Benchmark of ${run.modelId}`, total ? done / total : null),
        h('ul', { class: 'plain' }, run.sections.map((s) => h('li', {}, `${s}: `,
          run.done[s] ? statusBadge(run.done[s].status) : statusBadge(s === run.current ? 'running' : 'waiting')))));
    }

    const off = ctx.events ? ctx.events.subscribe((event) => {
      if (!EVENTS.has(event.event)) return;
      run = applyEvent(run, event);
      renderProgress();
    }) : () => {};

    async function loadHistory(modelId) {
      showError(historySlot, null);
      if (!modelId) {
        replace(history, h('p', { class: 'muted' }, 'Choose a model to see its benchmark history.'));
        return;
      }
      try {
        const answer = await ctx.api.get('/benchmarks', { model_id: modelId });
        replace(history,
          answer.sections && Object.keys(answer.sections).length
            ? sectionsView(answer.sections, 'Newest result of each section') : null,
          historyTable(answer.history || []));
      } catch (exc) {
        replace(history);
        showError(historySlot, exc, { title: `The history of ${modelId} could not be read` });
      }
    }

    async function start(choice, button) {
      showError(runSlot, null);
      if (!choice.modelId) {
        showError(runSlot, new Error('choose a model first'), { title: 'Run benchmark' });
        return;
      }
      if (choice.type === 'section' && !choice.sections.length) {
        showError(runSlot, new Error('tick at least one section, or choose all sections'), { title: 'Run benchmark' });
        return;
      }
      button.disabled = true;
      button.textContent = 'Running…';
      replace(result);
      try {
        const record = await ctx.api.post('/benchmarks/run', runBody(choice));
        replace(result, h('h2', {}, 'Result'),
          h('p', {}, `Run ${record.run_id}: `, statusBadge(record.status), ` in ${formatMs(record.duration_ms)}`,
            record.error ? ` (${record.error})` : ''),
          sectionsView(record.sections || {}, 'Sections of this run'),
          metricsTable(record, 'The run as a whole'));
      } catch (exc) {
        showError(runSlot, exc, { title: 'The benchmark did not run' });
      } finally {
        button.disabled = false;
        button.textContent = 'Run benchmark';
      }
      await loadHistory(choice.modelId);
    }

    function chooseModel(modelId) {
      ctx.setParams({ ...ctx.params, model: modelId });
      renderProgress();
      loadHistory(modelId);
    }

    try {
      const models = await ctx.api.get('/models');
      const usable = (models.data || []).filter((m) => !m.disabled);
      const remember = (patch) => ctx.setParams({ ...ctx.params, ...patch });
      replace(formSlot, runForm(usable, ctx.params, start, chooseModel, remember));
    } catch (exc) {
      showError(formSlot, exc, { title: 'The models could not be read' });
    }
    await loadHistory(ctx.params.model);
    return off;
  },
});
