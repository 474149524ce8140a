// Keeping the keyboard focus across a re-render: a page that redraws a table or a filter row
// after a click (a sort, a filter, a toggle) puts the focus back on the element at the same
// place, so a keyboard user is not thrown back to the top of the document.

function pathOf(root, el) {
  const path = [];
  for (let node = el; node && node !== root; node = node.parentElement) {
    path.unshift(Array.prototype.indexOf.call(node.parentElement.children, node));
  }
  return path;
}

function nodeAt(root, path) {
  let node = root;
  for (const index of path) {
    node = node && node.children[index];
  }
  return node || null;
}

// Runs `render()`; when the focus was inside `root`, gives it to the element now at the same
// position (if it is the same kind of element).
export function preserveFocus(root, render) {
  const active = document.activeElement;
  const path = active && active !== root && root.contains(active) ? pathOf(root, active) : null;
  render();
  if (!path || root.contains(active)) return;
  const target = nodeAt(root, path);
  if (target && target.tagName === active.tagName && typeof target.focus === 'function') target.focus();
}

// After a redraw removed the control that had the focus (a Save whose form was drawn again, a
// Clear whose row is gone): hand the focus to `el`, so the keyboard stays where the action was.
export function focusIfLost(el) {
  const active = document.activeElement;
  if (el && (!active || active === document.body || !active.isConnected)) el.focus();
}
