"""Appending to a gs:// object (server-side compose) and the trainer's batched events file on it."""

from __future__ import annotations

import io

from trainer.contract import Stage, parse_event
from trainer.progress.event_reporter import EventReporter
from trainer.storage.gcs import GcsStore


def test_append_creates_then_grows_the_object_and_leaves_no_parts(gcs: GcsStore, bucket):
    uri = f"gs://{bucket}/run/events.jsonl"
    for i in range(5):
        gcs.append_bytes(uri, f"line {i}\n".encode())
    assert gcs.read_bytes(uri) == b"".join(f"line {i}\n".encode() for i in range(5))
    assert [o.uri for o in gcs.list(f"gs://{bucket}/run")] == [uri]  # the composed parts are gone


def test_a_retried_compose_that_had_succeeded_counts_as_this_append(gcs: GcsStore, bucket):
    uri = f"gs://{bucket}/e.jsonl"
    gcs.write_bytes(uri, b"a\n")
    blob = gcs.client.bucket(bucket).get_blob("e.jsonl")
    gcs.append_bytes(uri, b"b\n")
    # As after a lost response: the object grew by exactly our bytes since the size we saw.
    assert gcs._ends_with(gcs.client.bucket(bucket), "e.jsonl", blob.size, b"b\n")
    assert not gcs._ends_with(gcs.client.bucket(bucket), "e.jsonl", blob.size, b"c\n")


def test_train_steps_wait_for_the_batch_and_stage_events_write_at_once(gcs: GcsStore, bucket):
    uri = f"gs://{bucket}/run/events.jsonl"
    reporter = EventReporter(gcs, uri, "rl-abc", stdout=io.StringIO(), flush_interval_s=3600)
    reporter.run_started(1, f"gs://{bucket}/run")
    reporter.stage_started(Stage.TRAIN)
    for step in range(1, 4):
        reporter.train_step(step=step, total_steps=3, metrics={})
    assert [parse_event(line).type for line in gcs.read_bytes(uri).decode().splitlines()] == ["run_started", "stage_started"]
    reporter.stage_finished(Stage.TRAIN, 1.0)  # a stage boundary writes everything pending, in order
    seqs = [parse_event(line).seq for line in gcs.read_bytes(uri).decode().splitlines()]
    assert seqs == [0, 1, 2, 3, 4, 5]
    reporter.train_step(step=4, total_steps=4, metrics={})
    reporter.close()  # the end of a run writes the rest
    assert len(gcs.read_bytes(uri).decode().splitlines()) == 7
    again = EventReporter(gcs, uri, "rl-abc", stdout=io.StringIO(), flush_interval_s=3600)
    assert again.previous_attempts() == 1 and again.run_started(2, f"gs://{bucket}/run").seq == 7  # numbering goes on
    again.close()
