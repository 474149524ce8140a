// Overview page (filled in below the shell contract).
import { h } from '../lib/dom.js';
import { pageHeader } from '../lib/ui.js';

export default {
  id: 'overview',
  title: 'Overview',
  nav: true,
  async mount(root) {
    root.append(pageHeader('Overview'), h('p', { class: 'muted' }, 'Coming next.'));
  },
};
