// The job page's "Samples" panel: what the policy wrote at a train step and what each reward
// function paid for it (GET /v1/jobs/{id}/samples), to see why a job is or is not learning.
// Completions are model output: they go in as text only (dom.js), never as HTML.
import { h, replace } from "./dom.js";
import { DASH, fmtNumber } from "./format.js";
import { samplesView } from "./model.js";
import { describeError } from "./widgets.js";

const LATEST = ""; // the selector's value for "the newest step, following new ones"

export function samplesPanel(api, base) {
  let chosen = LATEST;
  const select = h("select", {
    id: "samples-step",
    onchange: () => {
      chosen = select.value;
      refresh();
    },
  });
  const summary = h("p", { class: "hint", "data-testid": "samples-summary" });
  const list = h("div", { class: "samples", "data-testid": "samples" });
  const el = h(
    "section",
    { class: "panel samples-panel", "aria-labelledby": "samples-h" },
    h("div", { class: "panel-head" }, h("h2", { id: "samples-h" }, "Samples"), h("label", { for: "samples-step" }, "Step"), select),
    summary,
    list,
  );
  select.hidden = true;

  function fillSelect(view) {
    const newest = view.stepsAvailable[view.stepsAvailable.length - 1];
    const options = [h("option", { value: LATEST }, newest === undefined ? "Latest" : `Latest (step ${newest})`)];
    for (const step of [...view.stepsAvailable].reverse()) options.push(h("option", { value: String(step) }, `Step ${step}`));
    replace(select, options);
    select.value = chosen;
    select.hidden = false;
  }

  function render(view) {
    fillSelect(view);
    el.dataset.step = String(view.step);
    summary.textContent =
      `Step ${view.step}: ${view.groupsWithSignal ?? DASH} of ${view.groups ?? DASH} prompts had completions with different rewards ` +
      `(a learning signal) · showing ${view.samples.length} of ${view.completions ?? DASH} completions`;
    replace(list, view.samples.map(sampleCard));
  }

  function showNothing(message) {
    el.dataset.step = "";
    replace(summary, message);
    replace(list);
  }

  /** Re-read the chosen step (the newest if none was chosen); never throws: the panel says what went wrong. */
  async function refresh() {
    try {
      render(samplesView(await api.get(`${base}/samples`, chosen === LATEST ? {} : { step: chosen })));
    } catch (err) {
      if (err.kind === "unauthorized") return; // the app goes back to sign-in
      if (err.kind === "not_found") {
        showNothing(chosen === LATEST ? "No samples yet. The trainer writes a few completions with their rewards at every train step." : err.message);
      } else {
        const [title, message] = describeError(err);
        showNothing(`${title}: ${message}`);
      }
    }
  }

  return { el, refresh };
}

function sampleCard(sample) {
  return h(
    "article",
    { class: "sample", "data-group": String(sample.group) },
    h(
      "header",
      {},
      h("strong", {}, `Prompt ${sample.group ?? DASH}`),
      h("span", { class: "total" }, `total reward ${fmtNumber(sample.total)}`),
    ),
    h(
      "dl",
      { class: "rewards", "aria-label": "Reward scores" },
      sample.rewards.map(({ name, value }) => h("div", { "data-reward": name }, h("dt", {}, name), h("dd", {}, fmtNumber(value)))),
    ),
    h("pre", { class: "completion", "data-testid": "completion" }, sample.completion),
    sample.truncated ? h("p", { class: "hint" }, "The trainer shortened this prompt or completion to 4000 characters.") : null,
    h("details", {}, h("summary", {}, "Prompt"), h("pre", { class: "prompt" }, sample.prompt)),
  );
}
