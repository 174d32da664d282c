"""Event reporter numbering, the TensorBoard reader on real tensorboardX files, step/eval mapping."""

from __future__ import annotations

import io
import json
import struct

import pytest
from tensorboardX import SummaryWriter

from trainer.contract import RunStarted, Stage, parse_event
from trainer.progress.event_reporter import EventReporter
from trainer.progress.tensorboard_scalars import EventFileTailer, read_scalars
from trainer.progress.train_rl_events import TrainStepAssembler, eval_fields, train_step_fields
from trainer.storage import store_for


def _reporter(tmp_path, out=None) -> EventReporter:
    return EventReporter(store_for(str(tmp_path)), str(tmp_path / "events.jsonl"), "rl-abc", stdout=out or io.StringIO())


def test_seq_continues_across_restarts_and_survives_a_torn_line(tmp_path):
    first = _reporter(tmp_path)
    first.run_started(1, str(tmp_path))
    first.stage_started(Stage.CONVERT)
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('{"v":1,"seq":2,"ti')  # killed mid-write
        f.write("\n")
    stdout = io.StringIO()
    second = _reporter(tmp_path, stdout)
    assert second.previous_attempts() == 1
    event = second.run_started(2, str(tmp_path))
    assert event.seq == 2
    assert json.loads(stdout.getvalue())["seq"] == 2  # the same line goes to stdout
    lines = [line for line in (tmp_path / "events.jsonl").read_text().splitlines() if line.endswith("}")]
    assert isinstance(parse_event(lines[-1]), RunStarted)


def test_reader_parses_tensorboardx_scalars_and_resumes_from_its_offset(tmp_path):
    writer = SummaryWriter(logdir=str(tmp_path))
    writer.add_scalar("actor/train/loss", 0.5, 1)
    writer.add_scalar("rewards/train/mean", 0.25, 0)
    writer.close()  # tensorboardX writes from a background queue; close() drains it
    tailer = EventFileTailer(store_for(str(tmp_path)), str(tmp_path))
    first = {(s.tag, s.step): s.value for s in tailer.poll()}
    assert first == {("actor/train/loss", 1): 0.5, ("rewards/train/mean", 0): 0.25}
    later = SummaryWriter(logdir=str(tmp_path), filename_suffix=".second")  # a restarted trainer's new file
    later.add_scalar("actor/train/loss", 0.125, 2)
    later.close()
    second = [(s.tag, s.step, s.value) for s in tailer.poll()]
    assert second == [("actor/train/loss", 2, 0.125)]  # only what is new
    assert read_scalars(tmp_path)["actor/train/loss"] == {1: 0.5, 2: 0.125}


def test_reader_waits_for_a_record_that_is_not_complete(tmp_path):
    writer = SummaryWriter(logdir=str(tmp_path / "src"))
    writer.add_scalar("actor/train/kl", 0.75, 3)
    writer.close()
    data = next((tmp_path / "src").glob("events.out.tfevents.*")).read_bytes()
    target = tmp_path / "dst" / "events.out.tfevents.1.host"
    target.parent.mkdir()
    target.write_bytes(data[:-3])
    tailer = EventFileTailer(store_for(str(target.parent)), str(target.parent))
    assert [s.tag for s in tailer.poll()] == []
    target.write_bytes(data)
    assert [(s.tag, s.value) for s in tailer.poll()] == [("actor/train/kl", 0.75)]


def test_rollout_metrics_belong_to_the_next_training_step():
    from trainer.progress.tensorboard_scalars import Scalar

    assembler = TrainStepAssembler(total_steps=3, already_reported={1})
    assembler.add(
        [
            Scalar(0, "rewards/train/mean", 0.1, 0),
            Scalar(1, "actor/train/loss", 1.0, 0),
            Scalar(1, "rewards/train/mean", 0.2, 0),
            Scalar(2, "actor/train/loss", 2.0, 0),
            Scalar(2, "actor/train/kl", 0.3, 0),
            Scalar(0, "jax/checkpoint/x", 9.0, 0),
            Scalar(2, "rewards/train/mean", 0.4, 0),  # step 3's rollout; its update is not logged yet
        ]
    )
    assert assembler.ready() == []  # no later loss yet: step 2's other actor scalars may be on their way
    ready = assembler.ready(final=True)
    assert [step for step, _ in ready] == [2]  # 1 was reported by an earlier attempt, 3 has no update
    fields = train_step_fields(2, 3, ready[0][1])
    assert fields["reward_mean"] == 0.2 and fields["loss"] == 2.0 and fields["kl"] == 0.3
    assert not any(k.startswith("jax/") for k in fields["metrics"])


def test_a_step_waits_for_the_actor_scalars_written_after_its_loss():
    """Tunix writes loss, then grad_norm, then kl for one step; a read between them must not report the step."""
    from trainer.progress.tensorboard_scalars import Scalar

    assembler = TrainStepAssembler(total_steps=4)
    assembler.add([Scalar(0, "rewards/train/mean", 0.1, 0), Scalar(1, "actor/train/loss", 1.0, 0)])
    assert assembler.ready() == []  # step 1's grad_norm and kl may still be on their way
    assembler.add([Scalar(1, "actor/train/grad_norm", 5.0, 0), Scalar(1, "actor/train/kl", 0.01, 0)])
    assembler.add([Scalar(1, "rewards/train/mean", 0.2, 0), Scalar(2, "actor/train/loss", 2.0, 0)])
    [(step, metrics)] = assembler.ready()  # step 2's loss is written after all of step 1's scalars
    assert step == 1 and metrics["actor/train/grad_norm"] == 5.0 and metrics["actor/train/kl"] == 0.01
    assert assembler.ready() == []  # step 2 lacks the tags a complete step carried
    assembler.add([Scalar(2, "actor/train/grad_norm", 6.0, 0), Scalar(2, "actor/train/kl", 0.02, 0)])
    [(step, metrics)] = assembler.ready()  # complete by the tags step 1 had, without waiting for step 3
    assert step == 2 and metrics["actor/train/kl"] == 0.02
    assembler.add([Scalar(3, "actor/train/loss", 3.0, 0)])
    assert assembler.ready() == []
    [(step, metrics)] = assembler.ready(final=True)  # the writer closed: what step 3 has is all it will have
    assert step == 3 and "actor/train/kl" not in metrics


def test_eval_lines_become_eval_results():
    line = (
        "W1130 train_rl.py:781] Post RL Training: corr=1, total=4, accuracy=25.0%, partial_accuracy=50.0%,"
        " format_accuracy=75.0%, mean_reward=0.7402"
    )
    fields = eval_fields(line, start_step=0, total_steps=3)
    assert fields["step"] == 3 and fields["accuracy"] == 0.25 and fields["metrics"]["mean_reward"] == 0.7402
    pre = eval_fields(
        "Pre RL Training: corr=0, total=2, accuracy=0.0%, partial_accuracy=0.0%, format_accuracy=0.0%", start_step=2, total_steps=3
    )
    assert pre["step"] == 2
    assert (
        eval_fields(
            "Intermediate Eval (step=10): corr=3, total=4, accuracy=75.0%, partial_accuracy=75.0%, format_accuracy=75.0%",
            start_step=0,
            total_steps=50,
        )["step"]
        == 10
    )
    assert eval_fields("loss=0.1", start_step=0, total_steps=3) is None


def test_non_finite_metrics_are_dropped_and_old_null_lines_still_parse(tmp_path):
    import math

    from trainer.contract import EvalResult, TrainStep

    reporter = _reporter(tmp_path)
    reporter.train_step(
        step=1, total_steps=2, loss=float("nan"), kl=0.1, metrics={"actor/train/loss": float("nan"), "grad_norm": float("inf"), "lr": 1e-5}
    )
    reporter.eval_result(step=1, accuracy=float("-inf"), metrics={"correct": 3.0, "mean_reward": float("nan")})
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    step, evaluation = parse_event(lines[0]), parse_event(lines[1])
    assert isinstance(step, TrainStep) and step.metrics == {"lr": 1e-5} and step.loss is None and step.kl == 0.1
    assert isinstance(evaluation, EvalResult) and evaluation.metrics == {"correct": 3.0} and evaluation.accuracy is None
    # A line an older trainer wrote: NaN became null. The line parses; the value is absent downstream.
    old = json.loads(lines[0])
    old["metrics"] = {"actor/train/loss": None, "lr": 1e-5}
    parsed = parse_event(json.dumps(old))
    assert isinstance(parsed, TrainStep) and parsed.metrics["actor/train/loss"] is None
    assert all(v is None or math.isfinite(v) for v in parsed.metrics.values())


def test_a_failed_gs_events_write_is_sent_with_the_next_one(tmp_path):
    class FlakyBucket:
        def __init__(self) -> None:
            self.data: bytes | None = None
            self.fail_next_write = False

        def exists(self, uri: str) -> bool:
            return self.data is not None

        def read_bytes(self, uri: str) -> bytes:
            return self.data or b""

        def append_bytes(self, uri: str, data: bytes) -> None:
            if self.fail_next_write:
                self.fail_next_write = False
                raise OSError("503 from the bucket")
            self.data = (self.data or b"") + data

    bucket = FlakyBucket()
    uri = "gs://b/run/events.jsonl"
    reporter = EventReporter(bucket, uri, "rl-abc", stdout=io.StringIO())  # type: ignore[arg-type]
    reporter.run_started(1, "gs://b/run")
    bucket.fail_next_write = True
    try:
        reporter.stage_started(Stage.CONVERT)
    except OSError:
        pass
    reporter.stage_started(Stage.TRAIN)
    seqs = [parse_event(line).seq for line in (bucket.data or b"").decode().splitlines()]
    assert seqs == [0, 1, 2]


def test_our_event_decoder_reads_what_tensorboardx_protobuf_reads(tmp_path):
    """trainer/progress/tensorboard_proto.py against the generated protobuf classes on the value forms writers use:
    simple_value, text, and tensors with packed floats, doubles or raw tensor_content."""
    from tensorboardX.proto import event_pb2, summary_pb2, tensor_pb2

    from trainer.progress.tensorboard_proto import parse_event
    from trainer.progress.tensorboard_scalars import parse_records

    writer = SummaryWriter(logdir=str(tmp_path))
    writer.add_scalar("a/simple", 0.5, 1)
    writer.add_text("a/text", "not a number", 4)
    writer.close()
    payloads = [p for f in sorted(tmp_path.glob("events.out.tfevents.*")) for p in parse_records(f.read_bytes())[0]]
    tensors = {
        "b/floats": tensor_pb2.TensorProto(dtype=1, float_val=[2.5, 9.0]),
        "b/doubles": tensor_pb2.TensorProto(dtype=2, double_val=[-1.25]),
        "b/content": tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<ff", 7.5, 1.0)),
    }
    values = [summary_pb2.Summary.Value(tag=tag, tensor=tensor) for tag, tensor in tensors.items()]
    payloads.append(event_pb2.Event(wall_time=12.5, step=-3, summary=summary_pb2.Summary(value=values)).SerializeToString())
    for payload in payloads:
        ours, theirs = parse_event(payload), event_pb2.Event.FromString(payload)
        assert (ours.wall_time, ours.step) == (theirs.wall_time, theirs.step)
        assert [v.tag for v in ours.values] == [v.tag for v in theirs.summary.value]
    numbers = {v.tag: v.number for p in payloads for v in parse_event(p).values}
    assert numbers == {"a/simple": 0.5, "a/text/text_summary": None, "b/floats": 2.5, "b/doubles": -1.25, "b/content": 7.5}
    with pytest.raises(ValueError):
        parse_event(payloads[-1][:-3])  # a torn message is refused, never read as zeros
