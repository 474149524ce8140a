// The ordered list of pages: the nav shows those with nav: true, in this order.
// A page module: export default {id, title, nav, async mount(root, ctx) -> unmount?} (a nav
// page through lib/ui.js navPage).
import overview from './overview.js';
import models from './models.js';
import config from './config.js';
import nodes from './nodes.js';
import login from './login.js';
import analytics from './analytics.js';
import captures from './captures.js';
import loadErrors from './load-errors.js';
import benchmarks from './benchmarks.js';
import download from './download.js';
import webuis from './webuis.js';
import lending from './lending.js';
import keys from './keys.js';

export const PAGES = [
  overview, models, config, nodes, lending,
  analytics, captures, loadErrors, benchmarks, download, webuis, keys,
  login,
];
export const DEFAULT_PAGE = 'overview';
