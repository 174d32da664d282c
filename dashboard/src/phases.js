// Job phases as the service defines them (service/domain/phases.py), read once per page from
// GET /v1/phases, so the dashboard keeps no copy of which phases are terminal or cancellable.

// The trainer's stages in pipeline order (trainer/contract): a job's fields, not phases.
export const STAGES = ["convert", "train", "export"];
// An eval job's (EVAL_STAGE_ORDER): export converts a MaxText checkpoint (skipped for a Hugging Face one), then evaluate.
export const EVAL_STAGES = ["export", "evaluate"];

const upper = (phase) => String(phase || "").toUpperCase();

/** GET /v1/phases's answer -> the lookups the views use; an answer of another shape is an error. */
export function phaseFacts(raw) {
  const names = (key) => {
    const value = raw && raw[key];
    if (!Array.isArray(value) || !value.every((p) => typeof p === "string" && p)) {
      throw new Error(`GET /v1/phases: "${key}" is not a list of phase names`);
    }
    return value;
  };
  const phases = names("phases");
  const terminal = new Set(names("terminal"));
  const cancellable = new Set(names("cancellable"));
  for (const p of [...terminal, ...cancellable]) {
    if (!phases.includes(p)) throw new Error(`GET /v1/phases: ${p} is not one of its phases`);
  }
  return {
    phases,
    isTerminal: (phase) => terminal.has(upper(phase)),
    isCancellable: (phase) => cancellable.has(upper(phase)),
  };
}

let loaded = null; // the facts, once GET /v1/phases has answered
let loading = null; // the request in flight, shared by every caller

/** Resolves once the facts are known; a failed load is retried by the next call. */
export function loadPhaseFacts(api) {
  if (loaded) return Promise.resolve(loaded);
  if (!loading) {
    loading = api
      .get("/v1/phases")
      .then((raw) => (loaded = phaseFacts(raw)))
      .finally(() => (loading = null));
  }
  return loading;
}

function facts() {
  if (!loaded) throw new Error("phase facts used before loadPhaseFacts() resolved");
  return loaded;
}

export const phases = () => facts().phases;
export const isTerminal = (phase) => facts().isTerminal(phase);
export const isCancellable = (phase) => facts().isCancellable(phase);
