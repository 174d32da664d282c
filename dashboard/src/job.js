// The job page: spec, progress, learning health, stage timeline, live charts, completion samples,
// eval panel, log tail, artifacts, cancel. Live through GET /v1/jobs/{id}/events (a snapshot, then
// every change, ending after the terminal phase); each burst of events triggers one re-read of the
// job and its metrics, and of the samples when a new train step arrived. An `eval` event is such a
// change too: the re-read job carries the evaluations whole (JobPublic.train_evals), so the panel is drawn
// from that, never from the event's partial data. An eval job's page (a job whose spec has `evaluation`)
// shows its evaluation (evaljobpanel.js) instead of curves and samples; a training job with evaluations
// attached lists their eval jobs (attachedevals.js), redrawn only when they change.
import { rewardChart, makeChart } from "./charts.js";
import { focusHeading, h, replace } from "./dom.js";
import { attachedEvalsPanel } from "./attachedevals.js";
import { estimatePanel } from "./estimate.js";
import { evalJobPanel } from "./evaljobpanel.js";
import { evalPanel } from "./evalpanel.js";
import { goodputPanel } from "./goodputbar.js";
import { hungAttemptsPanel } from "./hungattempts.js";
import { artifactsPanel, failureBox, healthNote, progressPanel, summaryPanel } from "./jobparts.js";
import { LiveFeed } from "./live.js";
import { healthView, jobView, metricSeries } from "./model.js";
import { isCancellable, isTerminal } from "./phases.js";
import { queueSentence } from "./queue.js";
import { rewardCallsPanel } from "./rewardcalls.js";
import { samplesPanel } from "./samples.js";
import { describeError, errorBox, healthBadge, liveStatus, phaseBadge } from "./widgets.js";

const LOG_TAIL_LINES = 200;
const LOG_POLL_MS = 3000;
const REFRESH_DEBOUNCE_MS = 300;

export function jobPage(root, api, jobId) {
  const base = `/v1/jobs/${encodeURIComponent(jobId)}`;
  let job = null;
  let stopped = false;

  const status = liveStatus();
  const title = h("h1", {}, jobId);
  const badgeSlot = h("span");
  const cancelButton = h("button", { type: "button", class: "danger", hidden: true, onclick: () => confirmCancel() }, "Cancel job");
  const healthSlot = h("div");
  const noticeSlot = h("div");
  const panels = h("div", { class: "grid" });
  const goodputSlot = h("div");
  const estimateSlot = h("div");
  const hungSlot = h("div");
  const rewardCallsSlot = h("div");
  const charts = {
    reward: rewardChart(),
    kl: makeChart("KL divergence", [{ label: "KL", stroke: "#8a5a00" }]),
    loss: makeChart("Loss", [{ label: "loss", stroke: "#b3261e" }]),
    agreement: makeChart("Sampler vs trainer: mean |Δ log p| per token (nats)", [{ label: "|Δ log p|", stroke: "#2a9d8f" }]),
  };
  const evaluation = evalPanel();
  // An eval job's page shows its evaluation (GET /v1/evals/{id}) in place of training's curves and samples;
  // a training job's shows the eval jobs of its checkpoints (JobPublic.attached_evals) under its curves.
  const evalJob = evalJobPanel(api, jobId);
  evalJob.el.hidden = true;
  const attachedSlot = h("div");
  let attachedShown = null; // JobPublic.attached_evals last drawn, as JSON: the 5 s re-render must not move focus off its links
  const samples = samplesPanel(api, base);
  let samplesDue = true; // re-read the samples with the next refresh (a new train step arrived)
  const artifactsSlot = h("div");
  const logs = h("pre", { class: "logs", tabindex: "0", "aria-label": "Log tail", "data-testid": "logs" }, "Loading logs…");
  const dialog = cancelDialog(() => doCancel());

  const learning = h("div", { class: "learning" },
    h("section", { "aria-label": "Training curves", class: "charts" }, evaluation.el, Object.values(charts).map((c) => c.el)),
    samples.el);
  replace(
    root,
    h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← All jobs")),
    h("div", { class: "job-head" }, title, badgeSlot, h("span", { class: "mono sub" }, jobId), h("span", { class: "spacer" }), status.el, cancelButton),
    healthSlot,
    noticeSlot,
    panels,
    hungSlot, // attempts that hung: why the job restarted, next to its progress
    evalJob.el,
    goodputSlot,
    estimateSlot, // what the job was expected to take, and once ended what it took
    rewardCallsSlot, // the job's own reward functions in their sandbox: errors, timeouts, latency, network
    attachedSlot, // a training job's evaluated checkpoints: what its curves led to, so above them
    learning,
    artifactsSlot,
    h("section", { class: "panel", "aria-labelledby": "logs-h" }, h("h2", { id: "logs-h" }, `Log tail (last ${LOG_TAIL_LINES} lines)`), logs),
    dialog.el,
  );
  focusHeading(root);

  function render() {
    if (!job) return;
    title.textContent = job.name;
    document.title = `${job.name} · rljob`;
    replace(badgeSlot, phaseBadge(job.phase), " ", healthBadge(job.health));
    replace(healthSlot, healthNote(job.health));
    cancelButton.hidden = !isCancellable(job.phase);
    replace(noticeSlot, failureBox(job), job.phase === "CANCELLING" ? h("div", { class: "alert info", role: "status" }, "Cancelling: waiting for the work to stop.") : null,
      queueNotice(job));
    replace(panels, summaryPanel(job), progressPanel(job));
    replace(goodputSlot, goodputPanel(job.goodput));
    replace(estimateSlot, estimatePanel(job.estimate));
    replace(hungSlot, hungAttemptsPanel(job.hung));
    replace(rewardCallsSlot, rewardCallsPanel(job.rewardCalls));
    replace(artifactsSlot, artifactsPanel(job));
    const isEval = job.kind === "eval";
    learning.hidden = isEval;
    evalJob.el.hidden = !isEval;
    if (isEval) evalJob.update(job);
    else evaluation.update(job.trainEvals);
    const attachedKey = isEval ? "" : JSON.stringify([job.spec.eval || null, job.attachedEvals]);
    if (attachedKey !== attachedShown) {
      attachedShown = attachedKey;
      replace(attachedSlot, isEval ? null : attachedEvalsPanel(job));
    }
  }

  async function loadJob() {
    job = jobView(await api.get(base));
    render();
  }

  async function loadMetrics() {
    const s = metricSeries(await api.get(`${base}/metrics`));
    charts.reward.update(s.steps, [s.rewardMean, s.rewardUpper, s.rewardLower]);
    charts.kl.update(s.steps, [s.kl]);
    charts.loss.update(s.steps, [s.loss]);
    charts.agreement.update(s.steps, [s.logpDiff]);
  }

  async function loadLogs() {
    let text;
    try {
      text = await api.get(`${base}/logs`, { tail_lines: LOG_TAIL_LINES });
    } catch (err) {
      if (err.kind === "not_found") text = "";
      else throw err;
    }
    const body = typeof text === "string" ? text : (text.lines || []).join("\n");
    // Follow the tail only if the reader has not scrolled up to read something.
    const atBottom = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 8;
    logs.textContent = body.trim() ? body : "No log output yet.";
    if (atBottom) logs.scrollTop = logs.scrollHeight;
  }

  async function refresh() {
    await loadJob();
    const reads = [loadLogs()];
    if (job.kind !== "eval") reads.push(loadMetrics()); // an eval job trains nothing: no curves, no samples
    if (samplesDue && job.kind !== "eval") {
      samplesDue = false;
      reads.push(samples.refresh());
    }
    await Promise.all(reads);
  }

  function onEvent(event) {
    const change = (event.data && event.data.data) || {};
    if (event.type === "health" && job) {
      job.health = healthView(change); // shown at once; the re-read below confirms it
      render();
    }
    if (event.type === "progress" || event.type === "snapshot") samplesDue = true;
    scheduleRefresh();
  }

  let refreshTimer = null;
  function scheduleRefresh() {
    if (refreshTimer !== null || stopped) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      refresh().catch(showError);
    }, REFRESH_DEBOUNCE_MS);
  }

  function showError(err) {
    if (err.kind === "unauthorized" || stopped) return;
    if (err.kind === "not_found") {
      stop();
      replace(root, h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← All jobs")),
        errorBox("No such job", `There is no job ${jobId} visible to your team.`));
      return;
    }
    replace(noticeSlot, errorBox(...describeError(err)));
  }

  function confirmCancel() {
    dialog.open(job ? job.name : jobId);
  }

  async function doCancel() {
    cancelButton.disabled = true;
    try {
      job = jobView(await api.post(`${base}/cancel`));
      render();
    } catch (err) {
      showError(err);
    } finally {
      cancelButton.disabled = false;
    }
  }

  const feed = new LiveFeed({
    api,
    path: `${base}/events`,
    poll: () => {
      samplesDue = true; // no events while polling say whether a step arrived
      return refresh();
    },
    onStatus: (s) => {
      status.set(s);
      if (s === "live") {
        samplesDue = true;
        scheduleRefresh(); // a resumed stream sends no snapshot; re-read once
      }
    },
    finished: () => job !== null && isTerminal(job.phase),
    onEvent,
  });
  // Logs are not part of the event stream: poll the tail while the job can still write.
  const logTimer = setInterval(() => {
    if (job && !isTerminal(job.phase)) loadLogs().catch(() => {});
  }, LOG_POLL_MS);
  const ticker = setInterval(render, 5000); // running durations and ETAs

  refresh().catch(showError).finally(() => {
    if (!stopped) feed.start();
  });

  function stop() {
    stopped = true;
    feed.stop();
    clearInterval(logTimer);
    clearInterval(ticker);
    if (refreshTimer !== null) clearTimeout(refreshTimer);
  }
  return () => {
    stop();
    Object.values(charts).forEach((c) => c.destroy());
    evaluation.destroy();
    evalJob.destroy();
  };
}

/** A modal <dialog>: focus is trapped inside and Escape closes it, both for free. */
function cancelDialog(onConfirm) {
  const nameEl = h("strong");
  const el = h(
    "dialog",
    { "aria-labelledby": "cancel-title" },
    h("form", { method: "dialog" },
      h("h2", { id: "cancel-title" }, "Cancel this job?"),
      h("p", {}, "Job ", nameEl, " will be stopped. Work in progress since its last checkpoint is lost; this cannot be undone."),
      h("div", { class: "actions" },
        h("button", { value: "keep", autofocus: true }, "Keep running"),
        h("button", { value: "cancel", class: "danger" }, "Cancel job"))),
  );
  el.addEventListener("close", () => {
    if (el.returnValue === "cancel") onConfirm();
  });
  return {
    el,
    open(name) {
      nameEl.textContent = name;
      el.returnValue = "";
      el.showModal();
    },
  };
}

/** While QUEUED behind a backend's queue: where the job waits, its place in line and why. */
function queueNotice(job) {
  if (job.phase !== "QUEUED" || !job.queue) return null;
  return h("div", { class: "alert info", role: "status", "data-testid": "queue" },
    queueSentence(job.queue), " ", h("span", { class: "mono" }, `(${job.queue.reason})`));
}
