// Nodes: the node list the site inventory returns (on a master, every registered node with its
// health and last contact), and one node's runtimes and request counts: this node's live from
// the event stream, another node's read through the master by node id (?node=<id>).
import { h, replace } from '../lib/dom.js';
import { RESYNC, liveState } from '../lib/sse.js';
import { actionButton, badge, errorBox, formatBytes, formatTime, navPage, pageHeader, table } from '../lib/ui.js';
import { pageHref } from '../lib/url.js';

const RUNTIME_EVENTS = new Set(['loading', 'ready', 'failed', 'unloading', 'unloaded', 'state']);

// Pure: one device of a node's memory ledger in words (its snapshot's `devices`, issue 25).
export function deviceText(d) {
  return `${d.device}: ${formatBytes(d.used)} used of ${formatBytes(d.budget)}, ${formatBytes(d.free)} free`;
}

// A node's devices, one line each; an older node, or one not yet polled, says nothing.
function devicesCell(n) {
  const devices = n.devices || [];
  if (!devices.length) return '—';
  return h('ul', { class: 'plain', 'aria-label': `Memory of ${n.node_id || n.node_url}` },
    ...devices.map((d) => h('li', { 'data-device': d.device }, deviceText(d))));
}

function identity(session) {
  const node = (session && session.node) || {};
  const facts = [['Node id', node.node_id], ['Version', node.version], ['Bind', node.bind],
    ['Profile', node.profile || (session && session.profile)]].filter(([, v]) => v);
  if (!facts.length) return null;
  return h('dl', { class: 'facts', 'aria-label': 'This router' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

export default navPage('nodes', 'Nodes', {
  async mount(root, ctx) {
    const nodesSlot = h('div', {}, h('p', { class: 'muted' }, 'Reading the nodes…'));
    const stateSlot = h('div');
    const own = (ctx.session && ctx.session.node && ctx.session.node.node_id) || '';
    const shown = (ctx.params && ctx.params.node) || '';
    const remote = shown && shown !== own;
    const stateTitle = remote ? `Runtimes on ${shown}` : 'Runtimes on this node';
    root.append(pageHeader('Nodes'), identity(ctx.session),
      h('section', { 'aria-labelledby': 'nodes-h' }, h('h2', { id: 'nodes-h' }, 'Nodes of this site'), nodesSlot),
      h('section', { 'aria-labelledby': 'state-h' }, h('h2', { id: 'state-h' }, stateTitle), stateSlot));

    try {
      const inventory = await ctx.api.get('/site/inventory');
      replace(nodesSlot, table({
        caption: `${inventory.nodes.length} node(s), role ${inventory.role}`,
        rows: inventory.nodes, rowKey: (n) => n.node_id,
        columns: [
          { key: 'node_id', label: 'Node', rowHeader: true,
            cell: (n) => (n.node_id ? h('a', { href: pageHref('nodes', n.source === 'local' ? {} : { node: n.node_id }) }, n.node_id) : '—') },
          { key: 'available', label: 'State', cell: (n) => (n.available ? badge('online', 'reachable') : badge('unreachable')) },
          { key: 'role', label: 'Role', cell: (n) => `${n.role} (${n.source})` },
          { key: 'node_url', label: 'Address', class: 'wrap', cell: (n) => n.node_url || 'this router' },
          { key: 'backend_mode', label: 'Backend mode' },
          { key: 'models', label: 'Models', class: 'num',
            cell: (n) => h('a', { href: pageHref('models') }, String((n.models || []).length)) },
          { key: 'devices', label: 'Memory', class: 'wrap', cell: devicesCell },
          { key: 'last_contact', label: 'Last contact',
            cell: (n) => (n.source === 'local' ? 'this router' : (n.last_contact ? formatTime(n.last_contact) : 'never')) },
          { key: 'error', label: 'Problem', class: 'wrap', cell: (n) => n.error || '—' },
        ],
      }));
    } catch (exc) {
      replace(nodesSlot, errorBox(exc, { title: 'The node list could not be read' }));
    }

    if (remote) {
      // Another node's runtimes come through the master (by id); no event stream reaches here
      // from it, so the view is read on demand instead of polled.
      const read = async () => {
        try {
          renderState(stateSlot, await ctx.api.get('/site/nodes/state', { node_id: shown }), refresh);
        } catch (exc) {
          replace(stateSlot, errorBox(exc, { title: `The state of ${shown} could not be read` }), refresh);
        }
      };
      const refresh = actionButton('Refresh', read);
      await read();
      return () => {};
    }
    const live = liveState(ctx.events, {
      load: () => ctx.api.get('/site/nodes/state'),
      reduce: (state, event) => (RUNTIME_EVENTS.has(event.event) ? RESYNC : state),
      render: (state) => renderState(stateSlot, state),
      onerror: (exc) => replace(stateSlot, errorBox(exc, { title: 'The node state could not be read' })),
    });
    return () => live.close();
  },
});

function renderState(slot, state, ...extra) {
  replace(slot,
        h('p', {}, `${state.active_requests} request(s) running, ${state.queued_requests} waiting.`),
        table({
          caption: `Runtimes of ${state.node_id}`, rows: state.runtimes, rowKey: (r) => r.runtime,
          empty: 'Nothing is loaded.',
          columns: [
            { key: 'model', label: 'Model', rowHeader: true },
            { key: 'lanes', label: 'Lanes', cell: (r) => (r.lanes || []).join(', ') },
            { key: 'family', label: 'Family' },
            { key: 'state', label: 'State', cell: (r) => badge(r.state) },
            { key: 'in_flight', label: 'In flight', class: 'num' },
            { key: 'pid', label: 'PID', class: 'num' },
            { key: 'port', label: 'Port', class: 'num' },
          ],
        }), ...extra);
}
