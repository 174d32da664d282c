// The jobs board: every job of the viewer's team, filtered by phase, kept live by the service's
// event stream (GET /v1/events) with polling of GET /v1/jobs as the fallback.
import { diffHref } from "./diffmodel.js";
import { evalDiffHref } from "./evaljobs.js";
import { focusHeading, h, replace } from "./dom.js";
import { fmtAge, fmtNumber, fmtPercent, DASH } from "./format.js";
import { LiveFeed } from "./live.js";
import { jobView } from "./model.js";
import { isTerminal, phases } from "./phases.js";
import { queueSentence, queueShort } from "./queue.js";
import { describeError, errorBox, healthBadge, liveStatus, phaseBadge, progressCell } from "./widgets.js";

const PAGE_SIZE = 100;
// Changing the filter re-renders the board; keep keyboard focus on the filter, not the heading.
let focusFilterOnRender = false;
const COLUMNS = [
  ["Compare", "pick"], ["Name", ""], ["Submitter", "wide"], ["Model", ""], ["Accelerator", "wide"], ["Phase", ""], ["Health", ""], ["Stage", ""],
  ["Progress", ""], ["Reward", "num"], ["Eval acc.", "num"], ["Age", "num"],
];

export function boardView(root, api, params) {
  const filter = params.get("phase") || "";
  const jobs = new Map(); // id -> JobView, every job of the team the stream has told us about
  const rows = new Map(); // id -> <tr>, reused so focus stays on a row's link across updates
  let nextCursor = null;
  let loadError = null;
  let loaded = false;

  const status = liveStatus();
  const select = h(
    "select",
    {
      id: "phase-filter",
      onchange: (e) => {
        focusFilterOnRender = true;
        window.location.hash = e.target.value ? `#/?phase=${e.target.value}` : "#/";
      },
    },
    h("option", { value: "" }, "All phases"),
    h("option", { value: "active" }, "Active (not finished)"),
    phases().map((p) => h("option", { value: p }, p)),
  );
  select.value = filter;
  const errorSlot = h("div");
  const tbody = h("tbody");
  const table = h(
    "table",
    { class: "jobs" },
    h("caption", { class: "visually-hidden" }, "Jobs of your team, newest first"),
    h("thead", {}, h("tr", {}, COLUMNS.map(([label, cls]) => h("th", { scope: "col", class: cls }, label)))),
    tbody,
  );
  const emptySlot = h("div");
  // Two ticked rows open the run diff (#/diff/A/B), oldest first so "b" is the newer run; the
  // ticks are this view's only state: they live as long as the board is open.
  const picked = new Set();
  const compareButton = h("button", { type: "button", disabled: true, "aria-describedby": "compare-hint", onclick: () => compare() }, "Compare");
  const compareHint = h("span", { id: "compare-hint", class: "hint" });
  const compare = () => {
    const [a, b] = [...picked].sort((x, y) => ((jobs.get(x)?.createdAt || "") < (jobs.get(y)?.createdAt || "") ? -1 : 1));
    // Two eval jobs open the eval compare view, the newer minus the older (its baseline); any other pair the run diff.
    const evals = [a, b].every((id) => jobs.get(id)?.kind === "eval");
    window.location.hash = evals ? evalDiffHref(b, a) : diffHref(a, b);
  };
  const pickChanged = () => {
    compareButton.disabled = picked.size !== 2;
    compareHint.textContent = picked.size === 2 ? "" : `Tick two jobs to compare (${picked.size} ticked)`;
  };
  pickChanged();
  const moreButton = h("button", { type: "button", hidden: true, onclick: () => loadPage(nextCursor) }, "Show older jobs");

  replace(
    root,
    h("div", { class: "toolbar" },
      h("h1", {}, "Jobs"),
      h("label", { for: "phase-filter" }, "Phase "), select,
      h("span", { class: "spacer" }),
      compareHint, compareButton,
      h("a", { href: "#/usage" }, "Team usage"),
      status.el),
    errorSlot,
    h("div", { class: "panel", style: false }, table, emptySlot),
    h("p", {}, moreButton),
  );
  if (focusFilterOnRender) select.focus();
  else focusHeading(root);
  focusFilterOnRender = false;

  const visible = (job) => {
    if (!filter) return true;
    if (filter === "active") return !isTerminal(job.phase);
    return job.phase === filter;
  };

  function render() {
    const now = Date.now();
    const shown = [...jobs.values()].filter(visible).sort((a, b) => (a.createdAt < b.createdAt ? 1 : -1));
    shown.forEach((job, index) => {
      let tr = rows.get(job.id);
      if (!tr) {
        tr = makeRow(job, picked, pickChanged);
        rows.set(job.id, tr);
      }
      fillRow(tr, job, now);
      if (tbody.children[index] !== tr) tbody.insertBefore(tr, tbody.children[index] || null);
    });
    const keep = new Set(shown.map((j) => j.id));
    for (const [id, tr] of rows) {
      if (!keep.has(id)) {
        tr.remove();
        rows.delete(id);
        picked.delete(id);
      }
    }
    pickChanged();
    table.hidden = shown.length === 0;
    // While the service cannot be read, "no jobs yet" would be a guess: the error says enough.
    replace(emptySlot, loaded && !loadError && !shown.length ? emptyState(filter) : null);
    moreButton.hidden = !nextCursor;
    replace(errorSlot, loadError ? errorBox(...describeError(loadError)) : null);
  }

  async function loadPage(cursor) {
    const params = { limit: PAGE_SIZE, cursor };
    if (filter && filter !== "active") params.phase = filter;
    const page = await api.get("/v1/jobs", params);
    for (const raw of page.data) jobs.set(raw.id, jobView(raw));
    nextCursor = page.next_cursor || null;
  }

  async function refresh() {
    try {
      await loadPage(null);
      loadError = null;
    } catch (err) {
      if (err.kind !== "unauthorized") loadError = err;
      throw err;
    } finally {
      loaded = true;
      render();
    }
  }

  // A job's event carries what changed, not the whole job: fetch the job once per burst of events.
  const pending = new Set();
  let flushTimer = null;
  function jobChanged(id) {
    pending.add(id);
    if (flushTimer === null) flushTimer = setTimeout(flush, 250);
  }
  async function flush() {
    flushTimer = null;
    const ids = [...pending];
    pending.clear();
    await Promise.all(ids.map(async (id) => {
      try {
        jobs.set(id, jobView(await api.get(`/v1/jobs/${encodeURIComponent(id)}`)));
      } catch (err) {
        if (err.kind === "not_found") jobs.delete(id);
      }
    }));
    render();
  }

  const feed = new LiveFeed({
    api,
    path: "/v1/events",
    poll: refresh,
    onStatus: (s) => {
      status.set(s);
      // Back from an outage: re-read the list so the error clears and nothing missed stays stale.
      if (s === "live" && loadError) refresh().catch(() => {});
    },
    onEvent: (event) => {
      const data = event.data || {};
      if (data.id && data.phase && data.spec) jobs.set(data.id, jobView(data)), render();
      else if (data.job_id) jobChanged(data.job_id);
    },
  });

  refresh().catch(() => {}).finally(() => feed.start());
  const ticker = setInterval(render, 10000); // ages and ETAs move even when nothing is reported
  return () => {
    feed.stop();
    clearInterval(ticker);
    if (flushTimer !== null) clearTimeout(flushTimer);
  };
}

function makeRow(job, picked, pickChanged) {
  const href = `#/jobs/${encodeURIComponent(job.id)}`;
  const tr = h("tr", { "data-job-id": job.id });
  // The whole row is clickable with a mouse; the name link is the keyboard target.
  tr.addEventListener("click", (e) => {
    if (e.target.closest("a, button, input, label") || window.getSelection().toString()) return;
    window.location.hash = href;
  });
  tr._link = h("a", { href, class: "job-name" });
  // Kept across updates like the link, so a tick (and focus on it) survives the live re-renders.
  tr._pick = h("input", {
    type: "checkbox",
    class: "pick",
    checked: picked.has(job.id),
    onchange: (e) => {
      if (e.target.checked) picked.add(job.id);
      else picked.delete(job.id);
      pickChanged();
    },
  });
  tr._pickCell = h("td", { class: "pick" }, tr._pick);
  return tr;
}

function fillRow(tr, job, now) {
  tr.dataset.phase = job.phase;
  tr._link.textContent = job.name;
  tr._pick.setAttribute("aria-label", `Compare ${job.name} (${job.id})`);
  const cells = [
    h("td", {}, kindBadge(job.kind), " ", tr._link, h("span", { class: "sub mono" }, job.id)),
    h("td", { class: "wide" }, job.submitter || DASH),
    h("td", {}, job.model || DASH),
    h("td", { class: "wide" }, job.accelerator || DASH),
    h("td", {}, phaseBadge(job.phase), job.queue
      ? h("span", { class: "sub", "data-testid": "queue", title: queueSentence(job.queue) }, queueShort(job.queue))
      : null),
    h("td", { "data-testid": "health" }, healthBadge(job.health) || DASH),
    h("td", {}, job.stage || DASH),
    h("td", {}, progressCell(job, { terminal: isTerminal(job.phase) })),
    h("td", { class: "num", "data-testid": "reward" }, fmtNumber(job.rewardMean)),
    h("td", { class: "num" }, fmtPercent(job.evalAccuracy)),
    h("td", { class: "num", title: job.createdAt || "" }, fmtAge(job.createdAt, now)),
  ];
  if (!tr.children.length) {
    tr.append(tr._pickCell, ...cells);
    return;
  }
  // Replace every cell but the tick box and the name's link, which keep keyboard focus where the user left it.
  const first = tr.children[1];
  const [badge, , idText] = cells[0].children; // the kind badge, the link, the id
  first.replaceChildren(badge, " ", tr._link, idText);
  for (let i = 1; i < cells.length; i += 1) tr.children[i + 1].replaceWith(cells[i]);
}

/** Which kind of job a row is: an eval job (evaluates a checkpoint on a suite) or a training job. */
function kindBadge(kind) {
  return h("span", { class: `kind kind-${kind}`, "data-testid": "kind", "data-kind": kind, title: kind === "eval" ? "an eval job: it evaluates a checkpoint on a suite" : "a training job" },
    kind === "eval" ? "eval" : "train");
}

function emptyState(filter) {
  if (filter) {
    return h("div", { class: "empty" }, h("p", {}, "No jobs match this filter."), h("p", {}, h("a", { href: "#/" }, "Show all jobs")));
  }
  return h(
    "div",
    { class: "empty", "data-testid": "empty-state" },
    h("p", {}, h("strong", {}, "No jobs yet")),
    h("p", {}, "Submit one with ", h("code", {}, "rljob submit spec.yaml"), " and it appears here."),
  );
}
