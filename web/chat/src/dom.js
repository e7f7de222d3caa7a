// What both demo chat pages build their views with (bundled into each page's file).

export const $ = (selector) => document.querySelector(selector);

// An element with its attributes (`onclick` a handler; null and false left out, true as
// a bare attribute) and its children (nodes, or text).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (key === 'onclick') node.onclick = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child == null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A value as at most `max` characters of text (JSON for anything but a string).
export function short(value, max = 400) {
  const text = typeof value === 'string' ? value : JSON.stringify(value, null, 1);
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
