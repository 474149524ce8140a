// The ordered list of pages: the nav shows those with nav: true, in this order.
// A page module: export default {id, title, nav, async mount(root, ctx) -> unmount?}.
import overview from './overview.js';
import models from './models.js';
import config from './config.js';
import nodes from './nodes.js';
import login from './login.js';

export const PAGES = [overview, models, config, nodes, login];
export const DEFAULT_PAGE = 'overview';
