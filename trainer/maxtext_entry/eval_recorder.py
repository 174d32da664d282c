"""Inside train_rl: keep every evaluation's per-row outcomes, as MaxText scored them and as the job's own reward
functions did (a job with its own rewards is scored by them: trainer/contract/run/evaluation.py).

MaxText's `evaluate_rl.evaluate()` runs before training, every `eval_interval` steps (hooks.py) and
after training, and returns only totals. Three of its own functions are wrapped, none re-implemented:
- `evaluate` itself: names the evaluation (`before`, `step-N`, `after`), then writes the rows it
  saw to `<run>/eval/<label>.jsonl`, prints one `RLJOB_EVAL {summary}` line for the pipeline
  (pipeline.py turns it into an EvalResult event) and returns MaxText's result untouched;
- `score_responses(config, question, responses, answers)`: called once per row; its answer is the
  row's (correct, partial, format);
- `_compute_row_reward(reward_fns, prompt, question, responses, answer, row_idx)`: called right
  after for the same row when reward functions are set; each function is wrapped so its scores per
  completion are kept, and the original does the summing.
Which evaluation is running is known from Tunix's `RLLearner.train`, also wrapped: not started yet
-> `before` (or `step-N` when resuming from step N), running -> `step-N`, returned -> `after`.

A failure here is printed and ignored: observing evaluation must never stop training.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from trainer.contract import join_uri
from trainer.contract.run.evaluation import (
    AFTER,
    BEFORE,
    EVAL_LINE_PREFIX,
    MAX_EVAL_COMPLETIONS,
    MAX_EVAL_TEXT_CHARS,
    MAXTEXT_SCORING,
    REWARDS_SCORING,
    EvalRow,
    EvalScoring,
    EvalSummary,
    eval_file_name,
    paired_difference,
    rewarded_fraction,
    row_id,
    step_label,
)
from trainer.maxtext_entry.report_line import write_report_line


class EvalRecorder:
    """Collects one evaluation's rows; one evaluation runs at a time (train_rl calls it in its main thread)."""

    def __init__(self, eval_uri: str | None, scoring: EvalScoring = MAXTEXT_SCORING):
        self.eval_uri = eval_uri
        self.scoring = scoring
        self.rows: list[EvalRow] | None = None  # None: no evaluation running
        self.training = "not started"  # "running", "finished"
        self.before_outcomes: dict[str, float] | None = None
        # Called with each finished evaluation and train_rl's cluster (best_checkpoint.py keeps the best weights).
        self.on_summary: list[Callable[[EvalSummary, Any], None]] = []

    def label(self, global_step: int) -> str:
        if self.training == "finished":
            return AFTER
        if self.training == "not started" and global_step == 0:
            return BEFORE
        return step_label(global_step)

    def add_row(self, question: Any, responses: Any, answers: Any, scored: Any) -> None:
        if self.rows is None:
            return
        correct, partial, fmt = (float(v) for v in scored)
        text = str(question)
        self.rows.append(
            EvalRow(
                id=row_id(text),
                index=len(self.rows),
                question=text[-MAX_EVAL_TEXT_CHARS:],
                answers=[str(a) for a in answers],
                completions=[str(r)[:MAX_EVAL_TEXT_CHARS] for r in list(responses)[:MAX_EVAL_COMPLETIONS]],
                correct=correct,
                partial=partial,
                format=fmt,
            )
        )

    def add_reward(self, name: str, scores: Any) -> None:
        if not self.rows:
            return
        values = [_finite_or_none(s) for s in list(scores or [])]
        self.rows[-1].rewards.setdefault(name, []).extend(values)

    def finish(self, label: str, step: int, result: Any, config: Any, num_passes: int) -> EvalSummary:
        rows = [row.model_copy(update={"rewarded": rewarded_fraction(row.rewards)}) for row in self.rows or []]
        self.rows = None
        (_corr, total, _acc, _partial, _format, mean_reward) = result[0]
        file_name = eval_file_name(label)
        if self.eval_uri:
            from trainer.storage import store_for

            body = "".join(row.model_dump_json() + "\n" for row in rows)
            store_for(self.eval_uri).write_bytes(join_uri(self.eval_uri, file_name), body.encode())
        outcomes = {row.id: row.outcome(self.scoring) for row in rows}
        if label == BEFORE:
            self.before_outcomes = outcomes
        before = self.before_outcomes if self.before_outcomes is not None else self._read_before()
        strategy = str(getattr(config, "eval_sampling_strategy", "greedy"))
        mode = str(getattr(config, "eval_mode", "pass"))
        return EvalSummary(
            label=label,
            step=step,
            n=len(rows) or int(total),
            correct=sum(row.outcome(self.scoring) for row in rows),
            scored_by=self.scoring,
            maxtext_correct=sum(row.correct for row in rows) if self.scoring != MAXTEXT_SCORING else None,
            format_correct=sum(row.format for row in rows),
            partial_correct=sum(row.partial for row in rows),
            mean_reward=_finite_or_none(mean_reward) if any(row.rewards for row in rows) else None,
            samples_per_row=max((len(row.completions) for row in rows), default=int(num_passes)),
            sampling=f"{strategy}, {mode}",
            rows_file=file_name,
            vs_before=paired_difference(before, outcomes) if before and label != BEFORE else None,
        )

    def _read_before(self) -> dict[str, float] | None:
        """The `before` outcomes written by an earlier attempt of this run (a resumed trainer)."""
        if not self.eval_uri:
            return None
        from trainer.storage import store_for

        uri = join_uri(self.eval_uri, eval_file_name(BEFORE))
        store = store_for(self.eval_uri)
        if not store.exists(uri):
            return None
        rows = [EvalRow.model_validate_json(line) for line in store.read_bytes(uri).decode().splitlines() if line.strip()]
        self.before_outcomes = {row.id: row.outcome(self.scoring) for row in rows}
        return self.before_outcomes


def _finite_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _reward_name(fn: Any, index: int) -> str:
    return str(getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None) or f"reward_{index}")


def _warn(what: str, error: Exception) -> None:
    print(f"rljob: {what} failed, training goes on: {type(error).__name__}: {error}", file=sys.stderr)


def install(eval_uri: str | None, scoring: str = MAXTEXT_SCORING) -> EvalRecorder:
    """Wrap MaxText's evaluation and Tunix's train loop; returns the recorder (tests read it). `scoring` is the
    shim configuration's evaluations.scoring (trainer/contract/run/shim_config.py)."""
    from maxtext.trainers.post_train.rl import evaluate_rl
    from tunix.rl import rl_learner

    if scoring not in (MAXTEXT_SCORING, REWARDS_SCORING):
        raise SystemExit(f"evaluations.scoring={scoring!r}: expected {MAXTEXT_SCORING} or {REWARDS_SCORING}")
    recorder = EvalRecorder(eval_uri, REWARDS_SCORING if scoring == REWARDS_SCORING else MAXTEXT_SCORING)
    evaluate, score_responses = evaluate_rl.evaluate, evaluate_rl.score_responses
    compute_row_reward, train = evaluate_rl._compute_row_reward, rl_learner.RLLearner.train

    # Stand-ins for MaxText's and Tunix's functions (they ship no types): arguments passed through.
    def _evaluate(tmvp_config: Any, dataset: Any, rl_cluster: Any, num_passes: int = 1, *args: Any, **kwargs: Any) -> Any:
        try:
            step = int(getattr(rl_cluster, "global_steps", 0) or 0)
            label = recorder.label(step)
            recorder.rows = []
        except Exception as e:  # noqa: BLE001 - see the module docstring
            _warn("starting to keep eval rows", e)
            return evaluate(tmvp_config, dataset, rl_cluster, num_passes, *args, **kwargs)
        try:
            result = evaluate(tmvp_config, dataset, rl_cluster, num_passes, *args, **kwargs)
        except BaseException:
            recorder.rows = None
            raise
        try:
            summary = recorder.finish(label, step, result, tmvp_config, num_passes)
            write_report_line(EVAL_LINE_PREFIX + summary.model_dump_json())
        except Exception as e:  # noqa: BLE001
            recorder.rows = None
            _warn("keeping eval rows", e)
            return result
        for hook in recorder.on_summary:
            try:
                hook(summary, rl_cluster)
            except Exception as e:  # noqa: BLE001
                _warn(f"acting on the {label} evaluation", e)
        return result

    def _score_responses(tmvp_config: Any, question: Any, responses: Any, answers: Any) -> Any:
        scored = score_responses(tmvp_config, question, responses, answers)
        try:
            recorder.add_row(question, responses, answers, scored)
        except Exception as e:  # noqa: BLE001
            _warn("keeping an eval row", e)
        return scored

    def _compute_row_reward(reward_fns: Any, *args: Any, **kwargs: Any) -> Any:
        def keeping(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
            def recorded(*a: Any, **kw: Any) -> Any:
                scores = fn(*a, **kw)
                try:
                    recorder.add_reward(name, scores)
                except Exception as e:  # noqa: BLE001
                    _warn("keeping an eval reward", e)
                return scores

            return recorded

        wrapped = [keeping(fn, _reward_name(fn, i)) for i, fn in enumerate(reward_fns or [])]
        return compute_row_reward(wrapped, *args, **kwargs)

    def _train(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.training = "running"
        result = train(self, *args, **kwargs)
        recorder.training = "finished"
        return result

    evaluate_rl.evaluate = _evaluate
    evaluate_rl.score_responses = _score_responses
    evaluate_rl._compute_row_reward = _compute_row_reward
    rl_learner.RLLearner.train = _train
    return recorder
