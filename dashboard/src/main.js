// Entry point: hash routes (#/login, #/, #/jobs/<id>, #/diff/<a>/<b>, #/evals/diff/<a>/<b>, #/usage) so the service serves one static page and
// needs no server-side routing; the token lives in sessionStorage and goes out as a bearer header.
import "./styles.css";
import { Api, tokenStore } from "./api.js";
import { boardView } from "./board.js";
import { diffPage } from "./diff.js";
import { diffRoute } from "./diffmodel.js";
import { evalDiffPage } from "./evaldiff.js";
import { evalDiffRoute } from "./evaljobs.js";
import { focusHeading, h, replace } from "./dom.js";
import { jobPage } from "./job.js";
import { loadPhaseFacts } from "./phases.js";
import { usagePage } from "./usagepage.js";
import { describeError, errorBox } from "./widgets.js";

const main = document.getElementById("main");
const account = document.getElementById("account");
let teardown = () => {};
let loginNotice = null; // why the user was sent back to the login page

function signOut(notice = null) {
  tokenStore.clear();
  loginNotice = notice;
  if (window.location.hash.startsWith("#/login")) route();
  else window.location.hash = "#/login";
}

function apiForToken(token) {
  return new Api(token, {
    onUnauthorized: () => signOut(["Your token was not accepted", "It may have been revoked. Sign in again with a valid API token."]),
  });
}

function renderAccount(signedIn) {
  replace(account, signedIn ? [h("span", { class: "who" }, "Signed in with an API token"), h("button", { type: "button", onclick: () => signOut() }, "Sign out")] : null);
}

function loginView(root) {
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true, spellcheck: "false", "aria-describedby": "token-hint" });
  const errorSlot = h("div");
  const submit = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h(
    "form",
    {
      onsubmit: async (e) => {
        e.preventDefault();
        const token = input.value.trim();
        if (!token) return;
        submit.disabled = true;
        replace(errorSlot);
        try {
          // Any authenticated read proves the token; one job is the cheapest.
          await new Api(token).get("/v1/jobs", { limit: 1 });
          tokenStore.set(token);
          loginNotice = null;
          window.location.hash = "#/";
        } catch (err) {
          const [title, message] = err.kind === "unauthorized"
            ? ["That token was not accepted", "Check for a typo, or ask your admin for a new one (rljob token create --team TEAM)."]
            : describeError(err);
          replace(errorSlot, errorBox(title, message));
          input.setAttribute("aria-invalid", err.kind === "unauthorized" ? "true" : "false");
          input.focus();
        } finally {
          submit.disabled = false;
        }
      },
    },
    h("label", { for: "token" }, "API token"),
    input,
    h("p", { class: "hint", id: "token-hint" }, "Your team's token, as printed by ", h("code", {}, "rljob serve"), " or ", h("code", {}, "rljob token create --team TEAM"), ". It is kept only for this browser tab."),
    submit,
  );
  replace(
    root,
    h("section", { class: "panel login", "aria-labelledby": "login-h" },
      h("h1", { id: "login-h" }, "Sign in"),
      loginNotice ? errorBox(...loginNotice) : null,
      errorSlot,
      form),
  );
  input.focus();
  return () => {};
}

function route() {
  // Hashes that are not routes ("#main" from the skip link) are in-page anchors: leave the view.
  if (window.location.hash && !window.location.hash.startsWith("#/")) return;
  teardown();
  teardown = () => {};
  document.title = "rljob dashboard";
  const hash = window.location.hash || "#/";
  const token = tokenStore.get();
  renderAccount(Boolean(token));
  if (!token || hash.startsWith("#/login")) {
    if (token) {
      window.location.hash = "#/";
      return;
    }
    teardown = loginView(main);
    return;
  }
  const api = apiForToken(token);
  const [path, query = ""] = hash.slice(1).split("?");
  // Every signed-in view asks whether phases are terminal: learn them from the service first.
  let left = false;
  teardown = () => {
    left = true;
  };
  loadPhaseFacts(api).then(
    () => {
      if (!left) teardown = signedInView(api, path, query);
    },
    (err) => {
      if (!left) phaseFactsError(err);
    },
  );
}

function signedInView(api, path, query) {
  const jobMatch = path.match(/^\/jobs\/([^/]+)$/);
  if (jobMatch) return jobPage(main, api, decodeURIComponent(jobMatch[1]));
  const diff = diffRoute(path);
  if (diff) return diffPage(main, api, diff.a, diff.b);
  const evalDiff = evalDiffRoute(path);
  if (evalDiff) return evalDiffPage(main, api, evalDiff.a, evalDiff.b);
  if (path === "/usage") return usagePage(main, api, new URLSearchParams(query));
  if (path === "/" || path === "") return boardView(main, api, new URLSearchParams(query));
  replace(main, h("h1", {}, "Page not found"), h("p", {}, h("a", { href: "#/" }, "Go to the jobs board")));
  focusHeading(main);
  return () => {};
}

function phaseFactsError(err) {
  const [title, message] = err.kind ? describeError(err) : ["The service's answer was not understood", err.message];
  replace(main, h("h1", {}, "rljob dashboard"), errorBox(title, message, h("button", { type: "button", onclick: route }, "Try again")));
  focusHeading(main);
}

// The skip link must not change the hash (that is the router's), so it moves focus itself.
document.querySelector(".skip-link").addEventListener("click", (e) => {
  e.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", route);
route();
