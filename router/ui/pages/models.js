// Models page (filled in below the shell contract).
import { h } from '../lib/dom.js';
import { pageHeader } from '../lib/ui.js';

export default {
  id: 'models',
  title: 'Models',
  nav: true,
  async mount(root) {
    root.append(pageHeader('Models'), h('p', { class: 'muted' }, 'Coming next.'));
  },
};
