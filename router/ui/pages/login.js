// The sign-in view (secure profile): the admin key buys an HttpOnly session cookie.
import { ApiError, setCsrfToken } from '../lib/api.js';
import { h } from '../lib/dom.js';
import { errorBox, pageHeader, showError } from '../lib/ui.js';
import { UI_BASE, pageHref, pageOf } from '../lib/url.js';

function explain(exc) {
  if (exc instanceof ApiError && exc.status === 401) return new Error('That key is not an admin key of this router.');
  if (exc instanceof ApiError && exc.status === 403) return new Error('An inference key cannot open the admin UI; use an admin key.');
  return exc;
}

// Only a path inside the UI may be the target after sign-in (no open redirect). Shown in
// place of another page (no `next`), the sign-in returns to that page.
function nextTarget(params) {
  const here = pageOf() !== 'login' ? location.pathname + location.search : '';
  const next = params.next || here;
  return next.startsWith(UI_BASE) && !next.startsWith('//') ? next : pageHref('overview');
}

export default {
  id: 'login',
  title: 'Sign in',
  nav: false,
  async mount(root, ctx) {
    const session = ctx.session || {};
    if (!session.login_required || session.authenticated) {
      root.append(pageHeader('Sign in'),
        h('p', {}, session.login_required ? 'You are signed in. ' : 'This router needs no sign-in. ',
          h('a', { href: nextTarget(ctx.params) }, 'Continue')));
      return;
    }
    const slot = h('div', { id: 'login-error' });
    const key = h('input', {
      id: 'login-key', type: 'password', name: 'key', required: true,
      autocomplete: 'current-password', 'aria-describedby': 'login-help login-error',
    });
    const submit = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
    const form = h('form', {
      onsubmit: async (event) => {
        event.preventDefault();
        submit.disabled = true;
        showError(slot, null);
        try {
          const answer = await ctx.api.post('/ui/session', { key: key.value });
          setCsrfToken(answer.csrf_token);
          location.assign(nextTarget(ctx.params));
        } catch (exc) {
          slot.append(errorBox(explain(exc), { title: 'Sign-in failed' }));
          key.focus();
        } finally {
          submit.disabled = false;
        }
      },
    },
    h('label', { for: 'login-key' }, 'Admin key'), key,
    h('p', { id: 'login-help', class: 'muted' },
      'The key stays in this form; the router answers with a session cookie that scripts cannot read.'),
    slot, submit);
    root.append(h('section', { class: 'login' }, pageHeader('Sign in'), form));
    key.focus();
  },
};
