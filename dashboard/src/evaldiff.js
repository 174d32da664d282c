// The eval compare view (#/evals/diff/A/B, the run diff's route pattern): pick two evals of your team
// (GET /v1/evals), see them side by side (GET /v1/evals/{id}: checkpoint, suite version, n, k, the
// primary function's four scores with 95% intervals, cost) and the paired difference a − b (GET
// /v1/evals/{a}/compare?baseline=b: bootstrap CI, McNemar p, cost per point). Two evals the service
// refuses to compare (different suite versions, not finished) show its message. Read once when opened
// and again on "Reload": a comparison of finished evals does not change.
import { focusHeading, h, replace } from "./dom.js";
import { comparisonBlock } from "./evaljobpanel.js";
import { evalDiffHref, evalSummaryView, jobHref, sideCostText, SCORES, SCORE_NAMES } from "./evaljobs.js";
import { DASH } from "./format.js";
import { describeError, errorBox, phaseBadge } from "./widgets.js";

const back = () => h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← All jobs"));
const PICK_LIMIT = 200;

export function evalDiffPage(root, api, a, b) {
  let left = false;
  const pickA = h("select", { id: "eval-a", "aria-describedby": "pick-hint" }, h("option", { value: "" }, "Loading evals…"));
  const pickB = h("select", { id: "eval-b", "aria-describedby": "pick-hint" }, h("option", { value: "" }, "Loading evals…"));
  const go = h("button", { type: "button", class: "primary", onclick: () => {
    window.location.hash = evalDiffHref(pickA.value, pickB.value);
  } }, "Compare");
  const hint = h("span", { id: "pick-hint", class: "hint" });
  const body = h("div", { class: "diff", "aria-busy": "true" });
  const reload = h("button", { type: "button", onclick: () => load() }, "Reload");
  replace(root, back(),
    h("div", { class: "toolbar" }, h("h1", {}, "Compare evals"), h("span", { class: "spacer" }), reload),
    h("form", { class: "toolbar eval-pick", onsubmit: (e) => e.preventDefault() },
      h("label", { for: "eval-a" }, "a "), pickA, h("label", { for: "eval-b" }, "minus b (baseline) "), pickB, go, hint),
    body);
  focusHeading(root);
  const pickChanged = () => {
    go.disabled = !pickA.value || !pickB.value || pickA.value === pickB.value;
    hint.textContent = go.disabled ? "Pick two different evals of one suite" : "";
  };
  pickA.addEventListener("change", pickChanged);
  pickB.addEventListener("change", pickChanged);

  async function loadChoices() {
    try {
      const page = await api.get("/v1/evals", { limit: PICK_LIMIT });
      if (left) return;
      const options = (selected) => [h("option", { value: "" }, "(pick an eval)"), page.data.map((e) => {
        const suite = e.eval_job.suite;
        return h("option", { value: e.id, selected: e.id === selected },
          `${e.name} (${e.id}) · ${suite.name}${suite.version != null ? ` v${suite.version}` : ""} · ${e.phase}`);
      })];
      replace(pickA, options(a));
      replace(pickB, options(b));
      pickA.value = a || "";
      pickB.value = b || "";
    } catch (err) {
      if (!left && err.kind !== "unauthorized") replace(pickA, h("option", { value: "" }, "(the evals could not be listed)"));
    }
    pickChanged();
  }

  async function load() {
    if (!a || !b) {
      replace(body, h("p", { class: "hint" }, "Pick the eval to compare (a) and its baseline (b): the view shows both and a − b, paired by row."));
      body.removeAttribute("aria-busy");
      return;
    }
    if (a === b) {
      replace(body, errorBox("The same eval twice", `Both sides are ${a}. Pick two different evals.`));
      body.removeAttribute("aria-busy");
      return;
    }
    reload.disabled = true;
    try {
      const [ea, eb] = await Promise.all([api.get(`/v1/evals/${encodeURIComponent(a)}`), api.get(`/v1/evals/${encodeURIComponent(b)}`)]);
      let comparison = null;
      let refused = null;
      try {
        comparison = await api.get(`/v1/evals/${encodeURIComponent(a)}/compare`, { baseline: b });
      } catch (err) {
        if (err.kind !== "http" || err.status !== 409) throw err;
        refused = err.message.replace(/^409: /, ""); // the service's reason, as `rljob` prints it
      }
      if (left) return;
      document.title = `${ea.name} vs ${eb.name} · rljob`;
      replace(body, sideBySide(ea, eb),
        comparison ? h("section", { class: "panel" }, comparisonBlock(comparison, { heading: "Paired difference (a − b)" })) : null,
        refused ? h("div", { class: "alert warn", role: "status", "data-testid": "not-comparable" }, h("strong", {}, "Not compared"), h("p", {}, refused)) : null);
    } catch (err) {
      if (left || err.kind === "unauthorized") return;
      replace(body, err.kind === "not_found"
        ? errorBox("Eval not found", `${err.message}. Check the ids in the address, or pick two evals above.`)
        : errorBox(...describeError(err)));
    } finally {
      body.removeAttribute("aria-busy");
      reload.disabled = false;
    }
  }

  loadChoices();
  load();
  return () => {
    left = true;
  };
}

/** Both evals in two columns: what each evaluated and its primary function's scores with 95% intervals. */
function sideBySide(ea, eb) {
  const views = [ea, eb].map((e) => evalSummaryView(e.eval_job));
  const fn = views[0].primary || views[1].primary;
  const scoreOf = (view, score) => {
    const f = view.functions.find((x) => x.name === fn);
    return f ? f.rows.find((r) => r.score === score).text : DASH;
  };
  const rows = [
    ["Eval job", (e) => h("a", { href: jobHref(e.id) }, `${e.name} (${e.id})`)],
    ["Phase", (e) => phaseBadge(e.phase)],
    ["Checkpoint", (_e, v) => v.checkpointText],
    ["Model evaluated", (_e, v) => h("span", { class: "mono" }, v.modelSource || DASH)],
    ["Suite", (_e, v) => v.suiteText],
    ["Rows scored (n)", (_e, v) => (v.n === null ? DASH : String(v.n))],
    ["Samples per row (k)", (_e, v) => (v.k === null ? DASH : String(v.k))],
    ...SCORES.map((score) => [`${SCORE_NAMES[score]} [95% CI]`, (_e, v) => scoreOf(v, score)]),
    ["Cost", (e) => sideCostText({ chip_hours: e.usage.billed_chip_hours, cost_usd: e.usage.cost_usd })],
  ];
  return h("section", { class: "panel", "aria-labelledby": "sides-h" },
    h("h2", { id: "sides-h" }, `Side by side${fn ? ` (reward function ${fn})` : ""}`),
    h("table", { class: "artifacts diff-table", "data-testid": "sides" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, ""), h("th", { scope: "col" }, `a: ${ea.name}`), h("th", { scope: "col" }, `b: ${eb.name}`))),
      h("tbody", {}, rows.map(([label, cell]) => h("tr", { "data-row": label },
        h("th", { scope: "row" }, label),
        [ea, eb].map((e, i) => h("td", { class: "num" }, cell(e, views[i]))))))));
}
