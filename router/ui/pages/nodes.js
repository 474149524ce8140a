// Nodes page (filled in below the shell contract).
import { h } from '../lib/dom.js';
import { pageHeader } from '../lib/ui.js';

export default {
  id: 'nodes',
  title: 'Nodes',
  nav: true,
  async mount(root) {
    root.append(pageHeader('Nodes'), h('p', { class: 'muted' }, 'Coming next.'));
  },
};
