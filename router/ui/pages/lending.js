// Lending: backlog lending between nodes (docs/lending.md) and guardian models
// (docs/guardians.md). One section at a time (`?section=`), each reading only its own routes:
// the links editor, the guardian assignments, the live leases with each node's held / lent /
// borrowed counts, the decision log, and the lending settings. A section's view state lives in
// the URL too (lane, node, model for links; kind, lane, model for the log).
import { h, replace } from '../lib/dom.js';
import { mountGuardians } from '../lib/lending-guardians.js';
import { mountLinks } from '../lib/lending-links.js';
import { mountDecisions, mountLeases } from '../lib/lending-live.js';
import { mountSettings } from '../lib/lending-settings.js';
import { navPage, pageHeader } from '../lib/ui.js';

const SECTIONS = [
  ['links', 'Links', mountLinks],
  ['guardians', 'Guardian models', mountGuardians],
  ['leases', 'Live leases', mountLeases],
  ['decisions', 'Decision log', mountDecisions],
  ['settings', 'Settings', mountSettings],
];

export default navPage('lending', 'Lending', {
  async mount(root, ctx) {
    const tabs = h('div', { class: 'segmented', role: 'group', 'aria-label': 'Lending sections' });
    const body = h('section', { class: 'lending-section', 'aria-labelledby': 'section-h' });
    replace(root, pageHeader('Lending'), tabs, body);
    let unmount = null;
    let token = 0;

    async function show(params) {
      const mine = ++token;
      if (typeof unmount === 'function') unmount();
      unmount = null;
      const id = SECTIONS.some(([s]) => s === params.section) ? params.section : 'links';
      replace(tabs, SECTIONS.map(([sid, label]) => h('button', {
        type: 'button', 'aria-pressed': sid === id ? 'true' : 'false',
        onclick: () => go({ section: sid }),
      }, label)));
      replace(body);
      const [, , mountSection] = SECTIONS.find(([s]) => s === id);
      const sectionCtx = {
        ...ctx,
        params,
        // A section's state change: a history entry, and the section drawn again from it.
        setSection: (patch) => go({ ...params, section: id, ...patch }),
        // A state change that does not redraw (a filter the section applied itself).
        keepSection: (patch) => ctx.setParams({ ...params, section: id, ...patch }),
      };
      const stop = await mountSection(body, sectionCtx);
      if (mine !== token) {
        if (typeof stop === 'function') stop();
        return;
      }
      unmount = stop;
      // The section's h2 names the region.
      const heading = body.querySelector('h2');
      if (heading) heading.id = 'section-h';
    }

    function go(params) {
      ctx.setParams(params, { push: true });
      show(ctx.params);
    }

    await show(ctx.params);
    return () => {
      token += 1;
      if (typeof unmount === 'function') unmount();
    };
  },
});
