// Mirrors service/domain/phases.py: which phases are terminal and which can be cancelled.
export const PHASES = ["QUEUED", "LAUNCHING", "RUNNING", "CANCELLING", "SUCCEEDED", "FAILED", "CANCELLED"];
export const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
export const CANCELLABLE = new Set(["QUEUED", "LAUNCHING", "RUNNING"]);
export const STAGES = ["convert", "train", "export"];

export const isTerminal = (phase) => TERMINAL.has(String(phase || "").toUpperCase());
export const isCancellable = (phase) => CANCELLABLE.has(String(phase || "").toUpperCase());
