// Config page (filled in below the shell contract).
import { h } from '../lib/dom.js';
import { pageHeader } from '../lib/ui.js';

export default {
  id: 'config',
  title: 'Config',
  nav: true,
  async mount(root) {
    root.append(pageHeader('Config'), h('p', { class: 'muted' }, 'Coming next.'));
  },
};
