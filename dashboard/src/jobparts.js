// The job page's read-only panels: spec summary, progress, stage timeline, artifacts, failure, health.
import { h } from "./dom.js";
import { DASH, fmtAge, fmtBytes, fmtDateTime, fmtDuration, fmtNumber, fmtPercent } from "./format.js";
import { isTerminal } from "./phases.js";
import { storageLine } from "./storage.js";
import { healthLook, progressCell } from "./widgets.js";

function dl(pairs) {
  return h("dl", { class: "summary" }, pairs.filter(([, v]) => v !== undefined).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? DASH)]));
}

export function summaryPanel(job) {
  const spec = job.spec || {};
  const grpo = spec.grpo || {};
  const dataset = spec.dataset || {};
  const hw = spec.hardware || {};
  const datasetText = dataset.train_files && dataset.train_files.length ? dataset.train_files.join(", ") : dataset.name;
  const labels = Object.entries(job.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ");
  return h(
    "section",
    { class: "panel", "aria-labelledby": "summary-h" },
    h("h2", { id: "summary-h" }, "Spec"),
    dl([
      ["Team", job.team],
      ["Submitter", job.submitter],
      ["Model", job.model && h("span", {}, job.model, h("span", { class: "sub mono" }, job.modelSource || ""))],
      ["Accelerator", [hw.accelerator, hw.rollout_engine && `rollout: ${hw.rollout_engine}`].filter(Boolean).join(" · ")],
      ["Capacity", job.capacity && h("span", { "data-testid": "capacity" }, job.capacity.text)],
      // An eval job trains nothing: its suite and sampling are in its Evaluation section instead.
      ["Dataset", job.kind === "eval" ? undefined : datasetText],
      ["GRPO", job.kind === "eval" ? undefined : grpo.num_batches && `${grpo.num_batches} batches × ${grpo.batch_size} · G=${grpo.num_generations} · β=${grpo.beta} · lr=${fmtNumber(grpo.learning_rate)} · ${grpo.loss_algo}`],
      ["Output", job.runUri && h("span", { class: "mono" }, job.runUri)],
      ["Runs on", job.backend ? `${job.backend}${job.objectName ? ` (${job.objectName})` : ""}${job.attempt > 1 ? ` · attempt ${job.attempt}` : ""}` : null],
      ["Labels", labels || null],
      ["Submitted", h("span", { title: fmtDateTime(job.createdAt) }, fmtAge(job.createdAt))],
    ]),
  );
}

export function progressPanel(job) {
  const terminal = isTerminal(job.phase);
  const elapsed = job.startedAt ? ((job.finishedAt ? Date.parse(job.finishedAt) : Date.now()) - Date.parse(job.startedAt)) / 1000 : null;
  return h(
    "section",
    { class: "panel", "aria-labelledby": "progress-h" },
    h("h2", { id: "progress-h" }, "Progress"),
    progressCell(job, { terminal }),
    dl([
      ["Stage", job.stage],
      ["Reward", job.rewardMean === null ? null : `${fmtNumber(job.rewardMean)}${job.rewardStd === null ? "" : ` ± ${fmtNumber(job.rewardStd)}`}`],
      ["KL / loss", `${fmtNumber(job.kl)} / ${fmtNumber(job.loss)}`],
      ["Eval accuracy", fmtPercent(job.evalAccuracy)],
      ["Started", job.startedAt ? fmtDateTime(job.startedAt) : null],
      [terminal ? "Ran for" : "Running for", elapsed === null ? null : fmtDuration(elapsed)],
      // A failure has its own box above; repeating its message here would only add noise.
      ["Status", job.failure || !job.message ? undefined : job.message],
    ]),
    h("h2", { id: "stages-h", class: "spaced" }, "Stages"),
    timeline(job),
  );
}

const STATE_TEXT = { pending: "pending", running: "running", done: "done", skipped: "skipped (already done)", failed: "failed", stopped: "stopped" };

function timeline(job) {
  return h(
    "ol",
    { class: "timeline", "aria-labelledby": "stages-h" },
    job.stages.map((s) => {
      let duration = s.durationS;
      if (duration === null && s.startedAt && s.state === "running") duration = (Date.now() - Date.parse(s.startedAt)) / 1000;
      return h(
        "li",
        { "data-state": s.state, "data-stage": s.stage },
        h("span", { class: "dot", "aria-hidden": "true" }),
        h("strong", {}, s.stage),
        h("span", { class: "state" }, STATE_TEXT[s.state] || s.state),
        h("span", { class: "mono" }, duration === null ? DASH : fmtDuration(duration)),
      );
    }),
  );
}

export function artifactsPanel(job) {
  return h(
    "section",
    { class: "panel", "aria-labelledby": "artifacts-h" },
    h("h2", { id: "artifacts-h" }, "Artifacts"),
    job.artifacts.length
      ? h(
          "table",
          { class: "artifacts" },
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Name"), h("th", { scope: "col" }, "URI"), h("th", { scope: "col" }, "Size"))),
          h("tbody", {}, job.artifacts.map((a) => h("tr", {}, h("td", {}, a.name), h("td", { class: "uri mono" }, a.uri), h("td", {}, fmtBytes(a.sizeBytes))))),
        )
      : h("p", { class: "hint" }, isTerminal(job.phase) ? "This job wrote no artifacts." : "Artifacts appear here as the job writes them."),
    storageLine(job.storage),
  );
}

export function failureBox(job) {
  if (!job.failure) return null;
  const f = job.failure;
  const where = [f.failed_stage && `stage ${f.failed_stage}`, f.exit_code !== null && f.exit_code !== undefined && `exit code ${f.exit_code}`, f.reason]
    .filter(Boolean)
    .join(" · ");
  return h(
    "div",
    { class: "alert error", role: "alert", "data-testid": "failure" },
    h("strong", {}, "This job failed"),
    h("p", {}, f.message),
    where ? h("p", { class: "mono" }, where) : null,
  );
}

/** The learning-health verdict with its message (what it rests on, what to do), under the job's title. */
export function healthNote(health) {
  if (!health) return null;
  const look = healthLook(health.verdict);
  return h(
    "div",
    { class: `health-note ${look.calm ? "calm" : "alert warn"}`, role: "status", "data-testid": "health", "data-verdict": health.verdict },
    h("strong", {}, look.title),
    h("span", { class: "message" }, health.message),
    health.warning ? h("p", { class: "warning", "data-testid": "health-warning" }, `Warning: ${health.warning}`) : null,
  );
}
