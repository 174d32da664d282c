// The run diff (#/diff/A/B): what differs between two jobs and how each turned out, from GET
// /v1/jobs/diff (the service compares; `rljob diff` prints the same answer), then both jobs' reward
// curves on one chart and their evaluations on one plot, each run in its own colour. Read once when
// opened and again on "Reload": a comparison is read side by side, not watched step by step.
import { overlayChart } from "./charts.js";
import { differenceRows, jobLabel, outcomeRows, overlayEvals, overlaySteps } from "./diffmodel.js";
import { focusHeading, h, replace } from "./dom.js";
import { evalPlotSvg, plotWidth } from "./evalpanel.js";
import { evalView, metricSeries } from "./model.js";
import { describeError, errorBox } from "./widgets.js";

const back = () => h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← All jobs"));

export function diffPage(root, api, a, b) {
  const cleanups = [];
  let left = false;
  if (a === b) {
    replace(root, back(), h("h1", {}, "Compare runs"),
      errorBox("The same job twice", `Both sides are ${a}. Tick two different jobs on the board to compare them.`));
    focusHeading(root);
    return () => {};
  }
  const body = h("div", { class: "diff", "aria-busy": "true" }, h("p", { class: "hint" }, "Loading…"));
  const reload = h("button", { type: "button", onclick: () => load() }, "Reload");
  replace(root, back(),
    h("div", { class: "toolbar" }, h("h1", {}, "Compare runs"), h("span", { class: "mono sub" }, `${a} vs ${b}`),
      h("span", { class: "spacer" }), reload),
    body);
  focusHeading(root);

  function clear() {
    cleanups.splice(0).forEach((fn) => fn());
  }

  async function load() {
    reload.disabled = true;
    try {
      const diff = await api.get("/v1/jobs/diff", { a, b });
      // The diff said both are visible; a job that vanishes in between shows as absent curves.
      const ids = diff.outcomes.map((o) => o.job_id);
      const optional = (promise) => promise.catch((err) => (err.kind === "not_found" ? null : Promise.reject(err)));
      const [metrics, jobs] = await Promise.all([
        Promise.all(ids.map((id) => optional(api.get(`/v1/jobs/${encodeURIComponent(id)}/metrics`)))),
        Promise.all(ids.map((id) => optional(api.get(`/v1/jobs/${encodeURIComponent(id)}`)))),
      ]);
      if (left) return;
      clear();
      document.title = `${diff.outcomes.map((o) => o.name).join(" vs ")} · rljob`;
      render(diff, metrics, jobs);
    } catch (err) {
      if (left || err.kind === "unauthorized") return;
      clear();
      replace(body, err.kind === "not_found"
        ? errorBox("Job not found", `${err.message}. Check the ids in the address, or pick two jobs on the board.`)
        : errorBox(...describeError(err)));
    } finally {
      body.removeAttribute("aria-busy");
      reload.disabled = false;
    }
  }

  function render(diff, metrics, jobs) {
    const labels = diff.outcomes.map(jobLabel);
    const rewardRuns = overlaySteps(diff.outcomes.map((o, i) => {
      const s = metricSeries(metrics[i]);
      return { id: o.job_id, label: labels[i], steps: s.steps, values: s.rewardMean };
    }));
    const evalRuns = overlayEvals(diff.outcomes.map((o, i) => ({ id: o.job_id, label: labels[i], trainEvals: jobs[i] ? evalView(jobs[i].train_evals) : null })));
    replace(body,
      differencesPanel(diff, labels),
      outcomesPanel(diff, labels),
      h("section", { class: "charts", "aria-label": "Both runs' curves" },
        rewardPanel(rewardRuns, cleanups),
        evalOverlayPanel(evalRuns, cleanups)));
  }

  load();
  return () => {
    left = true;
    clear();
  };
}

function columnHeads(first, labels) {
  return h("thead", {}, h("tr", {}, h("th", { scope: "col" }, first), labels.map((l, i) =>
    h("th", { scope: "col" }, h("span", { class: `swatch series-${i}`, "aria-hidden": "true" }), ` ${i ? "b" : "a"}: ${l}`))));
}

function differencesPanel(diff, labels) {
  const rows = differenceRows(diff);
  const missing = diff.missing_records.length
    ? h("p", { class: "alert warn", "data-testid": "missing-records" },
      `No repro record for ${diff.missing_records.join(" and ")}: versions, image, seeds, data, model, reward file and hardware are not compared, only the spec.`)
    : null;
  const table = rows.length
    ? h("table", { class: "artifacts diff-table", "data-testid": "differences" },
      h("caption", { class: "visually-hidden" }, "What differs between the two jobs"),
      columnHeads("Key", labels),
      h("tbody", {}, rows.map((r) => h("tr", { "data-key": r.key, "data-section": r.section },
        h("th", { scope: "row" }, h("span", { class: "sub" }, `${r.section} `), h("code", {}, r.key)),
        h("td", { class: "mono" }, r.a),
        h("td", { class: "mono" }, r.b)))))
    : h("p", { "data-testid": "no-differences" }, "No differences in spec or repro record: the runs were set up the same way.");
  return h("section", { class: "panel", "aria-labelledby": "diff-h" }, h("h2", { id: "diff-h" }, `What differs (${rows.length})`), missing, table);
}

function outcomesPanel(diff, labels) {
  return h("section", { class: "panel", "aria-labelledby": "outcome-h" },
    h("h2", { id: "outcome-h" }, "Outcomes"),
    h("table", { class: "artifacts diff-table", "data-testid": "outcomes" },
      columnHeads("", labels),
      h("tbody", {}, outcomeRows(diff.outcomes).map((r) => h("tr", { "data-row": r.label },
        h("th", { scope: "row" }, r.label),
        r.values.map((v) => h("td", { class: "num" }, v)))))),
    h("p", { class: "hint" }, "Eval intervals are the service's 95% Wilson intervals; the change is paired over the rows both evaluations share."));
}

function absentNote(absent, what) {
  return absent.map((x) => h("p", { class: "hint", "data-testid": "absent", "data-job": x.id }, `${x.label}: ${what}${x.reason ? ` (${x.reason})` : ""}.`));
}

function rewardPanel(runs, cleanups) {
  const chart = overlayChart("Reward (mean per step)", runs.series);
  cleanups.push(() => chart.destroy());
  chart.update(runs.steps, runs.series.map((s) => s.values));
  chart.el.append(...absentNote(runs.absent, "no train steps reported yet, so no curve"));
  return chart.el;
}

function evalOverlayPanel(runs, cleanups) {
  const slot = h("div", { class: "eval-plot-slot" });
  const legend = h("ul", { class: "chart-legend" }, runs.series.map((s) =>
    h("li", { "data-series": s.label, "data-points": String(s.points) },
      h("span", { class: `swatch series-${s.index}`, "aria-hidden": "true" }), h("span", { class: "series-label" }, s.label))));
  const el = h("section", { class: "chart panel diff-eval", "aria-labelledby": "diff-eval-h", "data-points": String(runs.points.length) },
    h("h2", { id: "diff-eval-h" }, "Eval accuracy by step (bars: 95% intervals)"),
    runs.points.length ? slot : h("p", { class: "no-data" }, "Neither run has an evaluation yet."),
    runs.points.length ? legend : null,
    absentNote(runs.absent, "no evaluation to draw"));
  if (!runs.points.length) return el;
  let width = null;
  const draw = () => {
    const now = plotWidth(slot);
    if (now === width) return;
    width = now;
    replace(slot, evalPlotSvg(runs.points, `Eval accuracy by step of ${runs.series.map((s) => s.label).join(" and ")}`, width, { overlay: true }));
  };
  const observer = new ResizeObserver(draw);
  observer.observe(el);
  cleanups.push(() => observer.disconnect());
  return el;
}
