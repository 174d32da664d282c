"""Report lines reach the pipeline whole while MaxText's threads log to the same pipe."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.trainer.conftest import REPO
from trainer.contract.run.evaluation import EvalSummary
from trainer.progress.train_rl_events import EvalLineReader

LINES = 3000

# A stage process as the trainer runs it: stdout and stderr on one pipe, unbuffered (the images and
# test.sh set PYTHONUNBUFFERED), one thread logging to stderr as Orbax's async save does while the main
# thread reports its evaluations.
CHILD = textwrap.dedent(f"""
    import sys, threading
    from trainer.contract.run.evaluation import EVAL_LINE_PREFIX, EvalSummary
    from trainer.maxtext_entry.report_line import write_report_line

    done = threading.Event()
    def log_from_another_thread():
        while not done.is_set():
            sys.stderr.write("I1203 async_checkpointer.py:123] Finished saving checkpoint\\n")
    thread = threading.Thread(target=log_from_another_thread)
    thread.start()
    for step in range({LINES}):
        summary = EvalSummary(label=f"step-{{step}}", step=step, n=2, correct=1.0, format_correct=1.0,
                              partial_correct=1.0, mean_reward=0.5, samples_per_row=1, sampling="greedy, pass",
                              rows_file=f"step-{{step}}.jsonl")
        write_report_line(EVAL_LINE_PREFIX + summary.model_dump_json())
        sys.stderr.write(f"W1203 hooks.py:98] Intermediate Eval (step={{step}}): corr=1, total=2, accuracy=50.0%, "
                         f"partial_accuracy=50.0%, format_accuracy=50.0%, mean_reward=0.5000\\n")
    done.set()
    thread.join()
""")


def test_every_evaluation_is_read_with_its_summary_while_another_thread_logs() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    reader = EvalLineReader(start_step=0, total_steps=LINES)
    events = [fields for line in done.stdout.splitlines() if (fields := reader.fields(line))]
    # One event per evaluation, each carrying its summary; MaxText's own line for it is not a second one.
    assert [e.get("summary") for e in events] == [
        EvalSummary(
            label=f"step-{s}",
            step=s,
            n=2,
            correct=1.0,
            format_correct=1.0,
            partial_correct=1.0,
            mean_reward=0.5,
            samples_per_row=1,
            sampling="greedy, pass",
            rows_file=f"step-{s}.jsonl",
        )
        for s in range(LINES)
    ]
