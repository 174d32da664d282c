// Tiny element builder. Every value from the server goes in as text or an attribute, never as
// HTML, so a job name like "<img onerror=...>" cannot run script in a teammate's browser.

/**
 * h("a", {href: "#/x", class: "link"}, "text", childNode)
 * Attributes starting with "on" are event listeners; `false`/null attributes are skipped.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === false || value === null || value === undefined) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "class") {
      el.className = value;
    } else if (key in el && typeof value !== "string") {
      el[key] = value; // properties such as value/max on <progress>
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace all children of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Move focus to a view's heading so keyboard and screen-reader users land on the new page. */
export function focusHeading(root) {
  const heading = root.querySelector("h1, h2");
  if (heading) {
    heading.setAttribute("tabindex", "-1");
    heading.focus({ preventScroll: false });
  }
}
