// The team usage page (#/usage?days=N): chip-hours and cost of the jobs submitted in the window, by
// slice and per job, from GET /v1/usage. The figures are computed by the service; usage.js shapes them.
import { focusHeading, h, replace } from "./dom.js";
import { fmtDateTime, fmtPercent } from "./format.js";
import { USAGE_WINDOWS_DAYS, fmtChipHours, fmtUsd, sinceForDays, usageView } from "./usage.js";
import { describeError, errorBox, phaseBadge } from "./widgets.js";

const num = (text) => h("td", { class: "num" }, text);
const head = (labels) => h("thead", {}, h("tr", {}, labels.map(([label, cls]) => h("th", { scope: "col", class: cls }, label))));

function groupsTable(view) {
  return h("table", { class: "jobs usage" },
    h("caption", {}, "Chip-hours by team and slice"),
    head([["Team", ""], ["Slice", ""], ["Jobs", "num"], ["Waiting", "num"], ["Billed", "num"], ["Share", "num"], ["Cost", "num"]]),
    h("tbody", {}, view.groups.map((g) => h("tr", {}, h("td", {}, g.team), h("td", {}, g.slice), num(String(g.jobs)),
      num(fmtChipHours(g.waitingChipHours)), num(fmtChipHours(g.billedChipHours)), num(fmtPercent(g.share)), num(fmtUsd(g.costUsd))))),
    h("tfoot", {}, h("tr", {}, h("th", { scope: "row" }, "Total"), h("td"), num(String(view.total.jobs)),
      num(fmtChipHours(view.total.waitingChipHours)), num(fmtChipHours(view.total.billedChipHours)), h("td"), num(fmtUsd(view.total.costUsd)))));
}

function jobsTable(view) {
  return h("table", { class: "jobs usage" },
    h("caption", {}, "Jobs, newest first"),
    head([["Name", ""], ["Phase", ""], ["Slice", ""], ["Waited (h)", "num"], ["Ran (h)", "num"], ["Billed", "num"], ["Cost", "num"]]),
    h("tbody", {}, view.jobs.map((j) => h("tr", {},
      h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(j.id)}` }, j.name)), h("td", {}, phaseBadge(j.phase)), h("td", {}, j.slice),
      num(fmtChipHours(j.waitingHours)), num(fmtChipHours(j.runningHours)), num(fmtChipHours(j.billedChipHours)), num(fmtUsd(j.costUsd))))));
}

export function usagePage(root, api, params) {
  const days = USAGE_WINDOWS_DAYS.includes(Number(params.get("days"))) ? Number(params.get("days")) : 30;
  const select = h("select", { id: "usage-window", onchange: (e) => { window.location.hash = `#/usage?days=${e.target.value}`; } },
    USAGE_WINDOWS_DAYS.map((d) => h("option", { value: String(d) }, `last ${d} days`)));
  select.value = String(days);
  const body = h("div", {}, h("p", {}, "Loading…"));
  replace(root,
    h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← All jobs")),
    h("div", { class: "toolbar" }, h("h1", {}, "Team usage"), h("label", { for: "usage-window" }, "Jobs submitted in the "), select),
    body);
  focusHeading(root);
  const controller = new AbortController();
  api.get("/v1/usage", { since: sinceForDays(days, Date.now()) }, controller.signal).then(
    (raw) => {
      const view = usageView(raw);
      replace(body,
        h("p", { class: "hint" }, `${view.team ? `Team ${view.team}` : "Every team"}, as of ${fmtDateTime(view.asOf)}. `,
          "Chip-hours are the slice's chips × time. Waiting (queued, launching) is shown, not charged; billed is running ",
          "and cancelling time, costed at the service's list prices."),
        view.truncated ? errorBox("Not every job is shown", "More jobs matched than one report holds: choose a shorter window.") : null,
        view.total.unpricedChipHours > 0
          ? errorBox("Some time has no price", `${fmtChipHours(view.total.unpricedChipHours)} billed chip-hours are on a slice the price table does not list; they are not in the cost.`)
          : null,
        h("div", { class: "panel" }, groupsTable(view)),
        h("div", { class: "panel" }, view.jobs.length ? jobsTable(view) : h("p", { class: "empty" }, "No jobs were submitted in this window.")));
    },
    (err) => {
      if (err.name === "AbortError") return;
      replace(body, errorBox(...describeError(err)));
    },
  );
  return () => controller.abort();
}
