// Boot: read the session, draw the header (node identity + connection badge) and the nav,
// then route /router/ui/<page>?<state> to a page module over the History API.
import { ApiError, api, onUnauthorized, setCsrfToken } from './lib/api.js';
import { h, replace } from './lib/dom.js';
import { createEvents } from './lib/sse.js';
import { formatDateTime } from './lib/fmt.js';
import { errorBox } from './lib/ui.js';
import { UI_BASE, encodeParams, pageHref, pageOf, readParams } from './lib/url.js';
import { DEFAULT_PAGE, PAGES } from './pages/index.js';

const byId = new Map(PAGES.map((page) => [page.id, page]));
const shell = {
  session: null,
  events: null,
  current: null, // {page, unmount}
  connection: 'connecting',
  mounting: 0,
};

async function loadSession() {
  const session = await api.get('/ui/session');
  setCsrfToken(session.csrf_token);
  return session;
}

function nodeLabel(node) {
  if (!node) return '';
  return [node.node_id, node.version && `v${node.version}`, node.bind, node.profile]
    .filter(Boolean).join(' · ');
}

function updateTitle() {
  const page = shell.current ? shell.current.page : null;
  const node = shell.session && shell.session.node ? shell.session.node.node_id : null;
  const parts = [page ? page.title : null, node, 'tensor-router'].filter(Boolean);
  const offline = shell.connection === 'disconnected' ? ' (disconnected)' : '';
  document.title = parts.join(' — ') + offline;
}

function setConnection(status) {
  shell.connection = status;
  const badge = document.getElementById('connection');
  badge.textContent = status;
  badge.className = `badge badge-${status === 'connected' ? 'ok' : status === 'disconnected' ? 'bad' : 'neutral'}`;
  badge.dataset.state = status;
  updateTitle();
}

function renderHeader() {
  const session = shell.session;
  replace(document.getElementById('node-identity'), nodeLabel(session && session.node));
  const slot = document.getElementById('session-slot');
  replace(slot);
  if (session && session.login_required && session.authenticated) {
    slot.append(h('button', { type: 'button', class: 'link', onclick: logout }, 'Sign out'));
  }
}

function renderNav(activeId) {
  // Signed out, every page would answer with the sign-in view: no nav to offer.
  const pages = needsLogin() ? [] : PAGES.filter((page) => page.nav);
  const links = pages.map((page) =>
    h('li', {}, h('a', {
      href: pageHref(page.id),
      'aria-current': page.id === activeId ? 'page' : null,
    }, page.title)));
  replace(document.getElementById('nav'), h('ul', {}, links));
}

function needsLogin() {
  const s = shell.session;
  return Boolean(s && s.login_required && !s.authenticated);
}

function currentPageId() {
  const id = pageOf(location.pathname) || DEFAULT_PAGE;
  if (needsLogin()) return 'login';
  return id;
}

function makeCtx(page) {
  const ctx = {
    api,
    events: shell.events,
    params: readParams(),
    session: shell.session,
    navigate,
    // Writes page state into the URL without remounting; push: true makes a history entry.
    setParams(params, { push = false } = {}) {
      ctx.params = { ...params };
      const url = `${UI_BASE}${page.id}${encodeParams(params)}`;
      if (url === location.pathname + location.search) return;
      history[push ? 'pushState' : 'replaceState'](null, '', url);
    },
  };
  return ctx;
}

async function mount({ focus = false } = {}) {
  const token = ++shell.mounting;
  if (shell.current && typeof shell.current.unmount === 'function') shell.current.unmount();
  shell.current = null;
  const id = currentPageId();
  const page = byId.get(id);
  const main = document.getElementById('main');
  renderNav(page ? page.id : null);
  if (!page) {
    replace(main, h('h1', {}, 'Page not found'),
      h('p', {}, `There is no page “${id}”. `, h('a', { href: pageHref(DEFAULT_PAGE) }, 'Go to the overview')));
    shell.current = { page: { title: 'Not found' }, unmount: null };
    updateTitle();
    return;
  }
  const root = h('div', { class: `page page-${page.id}` });
  replace(main, root);
  shell.current = { page, unmount: null };
  updateTitle();
  try {
    const unmount = await page.mount(root, makeCtx(page));
    if (token !== shell.mounting) {
      if (typeof unmount === 'function') unmount();
      return;
    }
    shell.current.unmount = unmount;
  } catch (exc) {
    if (token === shell.mounting) root.append(errorBox(exc, { title: `${page.title} failed` }));
  }
  if (focus) {
    const h1 = root.querySelector('h1');
    if (h1) {
      h1.setAttribute('tabindex', '-1');
      h1.focus();
    }
  }
}

function navigate(pageId, params = {}, { replace: replaceEntry = false } = {}) {
  history[replaceEntry ? 'replaceState' : 'pushState'](null, '', pageHref(pageId, params));
  mount({ focus: true });
}

async function logout() {
  try {
    await api.del('/ui/session');
  } catch (exc) {
    if (!(exc instanceof ApiError) || exc.status !== 401) throw exc;
  }
  location.assign(pageHref('login'));
}

// A banner under the header for what the operator must know whatever the page: the store
// file found deleted or replaced (docs/store.md). The hello event repeats earlier ones.
const shownNotices = new Set();

function showStoreIncident(incident) {
  const key = `${incident.change}-${incident.detected_at}`;
  if (shownNotices.has(key)) return;
  shownNotices.add(key);
  const box = document.getElementById('notices');
  box.hidden = false;
  box.append(h('p', { 'data-kind': 'store_replaced' },
    `The analytics store file was ${incident.change} while the router ran; a fresh file was opened `
    + `at ${formatDateTime(incident.detected_at)}. `
    + (incident.copied
      ? 'Every row of the old file was copied into it: nothing recorded was lost.'
      : `Lost: every row of the old file, and what was written since ${formatDateTime(incident.intact_at)}.`)));
}

function startEvents() {
  shell.events = createEvents({ onstatus: setConnection });
  // A router without the session route still names itself in the stream's first event.
  shell.events.subscribe((event) => {
    if (event.event === 'store_replaced') showStoreIncident(event);
    if (event.event === 'hello') (event.store_incidents || []).forEach(showStoreIncident);
    if (event.event === 'hello' && shell.session && !shell.session.node && event.node_id) {
      shell.session = { ...shell.session, node: { node_id: event.node_id } };
      renderHeader();
      updateTitle();
    }
  });
  shell.events.start();
}

// Same-origin links under /router/ui/ are handled here, so a page change never reloads.
function onLinkClick(event) {
  if (event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const link = event.target.closest('a[href]');
  if (!link || link.target || link.hasAttribute('download')) return;
  const url = new URL(link.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith(UI_BASE)) return;
  event.preventDefault();
  history.pushState(null, '', url.pathname + url.search);
  mount({ focus: true });
}

async function boot() {
  try {
    shell.session = await loadSession();
  } catch (exc) {
    replace(document.getElementById('main'), h('h1', {}, 'tensor-router'),
      errorBox(exc, { title: 'The session could not be read' }));
    setConnection('disconnected');
    return;
  }
  renderHeader();
  onUnauthorized(() => {
    if (shell.session && shell.session.login_required && currentPageId() !== 'login') {
      location.assign(pageHref('login', { next: location.pathname + location.search }));
    }
  });
  if (needsLogin()) setConnection('signed out');
  else startEvents();
  document.addEventListener('click', onLinkClick);
  window.addEventListener('popstate', () => mount({ focus: true }));
  await mount();
}

boot();
