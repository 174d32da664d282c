"""Inside train_rl: where its wall-clock time goes, by timing Tunix's and MaxText's own methods.

Wrapped (Tunix 0.1.7 and MaxText's evaluate_rl; none re-implemented, arguments passed through):
- `RLCluster.generate` -> rollout: GRPO's completions (`_generate_and_compute_advantage` calls it
  once per rollout micro-batch, in the learner's data thread);
- `RLCluster.get_ref_per_token_logps`, `get_old_per_token_logps`, `get_actor_per_token_logps`
  -> logprobs: the reference model's and the old policy's forward passes; and rljob's
  `logprob_agreement.read_trainer_logps` -> logprobs: the agreement's forward and its host read;
- `RLCluster.update_actor`, `update_critic` -> update: the optimizer steps (PeftTrainer.train);
- `RLCluster.sync_weights` -> weight_sync: the actor's weights copied into the rollout engine;
- `tunix.sft.checkpoint_manager.CheckpointManager.save`, `maybe_restore`, `close` -> checkpoint:
  the actor's saves (called inside update_actor, so the innermost call wins, see below), the restore
  on a resumed run, and `close`, which waits for Orbax's asynchronous save to finish;
- MaxText's `evaluate_rl.evaluate` -> eval: before, during and after training; the generation it
  does through `RLCluster.generate` counts as eval, not rollout.
These are the seams Tunix's own perf spans sit on (grpo_learner.py, rl_learner.py): the methods
cover exactly one kind of work each, and they are the same on CPU and TPU, with vLLM or our JAX
rollout.

Attribution keeps every instant of wall time in at most one part, so the parts never add up to more
than the time that passed: within a thread the innermost call owns the time (a checkpoint save inside
update_actor is checkpoint), except under eval, which owns everything it calls; across threads (Tunix
rolls out in a worker thread, asynchronously when rollout and actor sit on different meshes) the
part the training loop waits on owns overlapping time, in PRIORITY order, so an overlapped rollout is
not counted twice.

Why not MaxText's `enable_goodput_recording` (Google's ml-goodput-measurement): train_rl never calls
it (only the pre-training and SFT loops' hooks do), its events are job/TPU-init/data-loading/step with
no rollout, log-prob, sync or checkpoint split inside a GRPO step, and its recorder writes to and
reads back from Google Cloud Logging (`google.cloud.logging.Client()`), which needs GCP credentials
and the network: neither a CPU job offline nor our tests have them.

Reports: one `RLJOB_GOODPUT {TrainGoodput}` line on stdout after each global step (after the weight
sync, or after the step when Tunix shares the weights), after each evaluation, and a final one when
the process exits. A failure here is printed and ignored: measuring training must never stop it.
"""

from __future__ import annotations

import atexit
import importlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from trainer.contract.run.goodput import (
    CHECKPOINT,
    EVAL,
    GOODPUT_LINE_PREFIX,
    LOGPROBS,
    ROLLOUT,
    TRAIN_PARTS,
    UPDATE,
    WEIGHT_SYNC,
    TrainGoodput,
)
from trainer.maxtext_entry.report_line import write_report_line

# Who owns time that two threads spend in wrapped calls at once: what the training loop waits on first.
PRIORITY: tuple[str, ...] = (UPDATE, CHECKPOINT, WEIGHT_SYNC, EVAL, LOGPROBS, ROLLOUT)
ABSORBING = frozenset({EVAL})  # a part that owns every wrapped call made inside it

# (module, class or None, attribute, part): what install() wraps.
WRAPPED: tuple[tuple[str, str | None, str, str], ...] = (
    ("tunix.rl.rl_cluster", "RLCluster", "generate", ROLLOUT),
    ("tunix.rl.rl_cluster", "RLCluster", "get_ref_per_token_logps", LOGPROBS),
    ("tunix.rl.rl_cluster", "RLCluster", "get_old_per_token_logps", LOGPROBS),
    ("tunix.rl.rl_cluster", "RLCluster", "get_actor_per_token_logps", LOGPROBS),
    ("trainer.maxtext_entry.logprob_agreement", None, "read_trainer_logps", LOGPROBS),
    ("tunix.rl.rl_cluster", "RLCluster", "update_actor", UPDATE),
    ("tunix.rl.rl_cluster", "RLCluster", "update_critic", UPDATE),
    ("tunix.rl.rl_cluster", "RLCluster", "sync_weights", WEIGHT_SYNC),
    ("tunix.sft.checkpoint_manager", "CheckpointManager", "save", CHECKPOINT),
    ("tunix.sft.checkpoint_manager", "CheckpointManager", "maybe_restore", CHECKPOINT),
    ("tunix.sft.checkpoint_manager", "CheckpointManager", "close", CHECKPOINT),
    ("maxtext.trainers.post_train.rl.evaluate_rl", None, "evaluate", EVAL),
)


class GoodputClock:
    """Cumulative seconds by part; every instant goes to at most one part (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._started = self._last = clock()
        self._stacks: dict[int, list[str]] = {}  # thread id -> the parts of its open calls, innermost last
        self.parts: dict[str, float] = dict.fromkeys(TRAIN_PARTS, 0.0)

    def _owner(self) -> str | None:
        tops = {stack[-1] for stack in self._stacks.values() if stack}
        return next((part for part in PRIORITY if part in tops), None)

    def _charge(self, now: float) -> None:
        owner = self._owner()
        if owner is not None:
            self.parts[owner] += max(0.0, now - self._last)
        self._last = max(self._last, now)

    def enter(self, part: str) -> None:
        with self._lock:
            self._charge(self._clock())
            stack = self._stacks.setdefault(threading.get_ident(), [])
            stack.append(stack[-1] if stack and stack[-1] in ABSORBING else part)

    def leave(self) -> None:
        with self._lock:
            self._charge(self._clock())
            stack = self._stacks.get(threading.get_ident())
            if stack:
                stack.pop()

    @contextmanager
    def timing(self, part: str) -> Iterator[None]:
        self.enter(part)
        try:
            yield
        finally:
            self.leave()

    def snapshot(self, *, step: int = 0, final: bool = False) -> TrainGoodput:
        with self._lock:
            now = self._clock()
            self._charge(now)
            return TrainGoodput(elapsed_s=max(0.0, now - self._started), parts=dict(self.parts), step=step, final=final)


def timed(clock: GoodputClock, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with clock.timing(part):
            return fn(*args, **kwargs)

    wrapper.__name__ = getattr(fn, "__name__", "wrapped")
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]  # functools' convention, set by hand
    return wrapper


class GoodputReporter:
    """Prints the clock's snapshot as one `RLJOB_GOODPUT` line."""

    def __init__(self, clock: GoodputClock, write: Callable[[str], None] | None = None):
        self.clock = clock
        self.step = 0
        self._write = write or write_report_line

    def report(self, *, final: bool = False) -> None:
        try:
            self._write(GOODPUT_LINE_PREFIX + self.clock.snapshot(step=self.step, final=final).model_dump_json())
        except Exception as e:  # noqa: BLE001 - see the module docstring
            print(f"rljob: reporting goodput failed, training goes on: {type(e).__name__}: {e}", file=sys.stderr)


def _step_of(self: Any) -> int:
    cluster = getattr(self, "rl_cluster", self)
    return int(getattr(cluster, "global_steps", 0) or 0)


def wrap_targets(
    clock: GoodputClock,
    reporter: GoodputReporter,
    targets: tuple[tuple[str, str | None, str, str], ...] = WRAPPED,
    import_module: Callable[[str], Any] = importlib.import_module,
) -> list[str]:
    """Replace each target with a timed stand-in; returns `module[.Class].attribute` of those wrapped."""
    done = []
    for module_name, class_name, attribute, part in targets:
        owner: Any = import_module(module_name)
        if class_name is not None:
            owner = getattr(owner, class_name)
        original = getattr(owner, attribute, None)
        if original is None:  # an older Tunix without this method: nothing to time
            continue
        wrapped = timed(clock, part, original)
        if attribute in ("sync_weights", "evaluate"):  # a step, or an evaluation, has ended
            wrapped = _reporting_after(wrapped, reporter)
        setattr(owner, attribute, wrapped)
        done.append(".".join(filter(None, (module_name, class_name, attribute))))
    return done


def install(clock: GoodputClock | None = None, reporter: GoodputReporter | None = None) -> GoodputReporter:
    """Wrap the methods in WRAPPED, report after each step and evaluation and at exit; returns the reporter."""
    from tunix.rl import rl_learner

    clock = clock or GoodputClock()
    reporter = reporter or GoodputReporter(clock)
    wrap_targets(clock, reporter)

    run_global_step, train = rl_learner.RLLearner._run_global_step, rl_learner.RLLearner.train

    def _run_global_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = run_global_step(self, *args, **kwargs)
        if not getattr(self, "should_sync_weights", True):  # no sync follows to report the step
            reporter.step = _step_of(self) + 1
            reporter.report()
        return result

    def _train(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return train(self, *args, **kwargs)
        finally:
            reporter.step = _step_of(self)
            reporter.report()

    rl_learner.RLLearner._run_global_step = _run_global_step
    rl_learner.RLLearner.train = _train
    atexit.register(lambda: reporter.report(final=True))
    return reporter


def _reporting_after(fn: Callable[..., Any], reporter: GoodputReporter) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if args and hasattr(args[0], "global_steps"):  # sync_weights(self): the step just ended
            reporter.step = _step_of(args[0])
        reporter.report()
        return result

    wrapper.__name__ = getattr(fn, "__name__", "wrapped")
    return wrapper
