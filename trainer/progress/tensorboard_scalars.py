"""Reads the scalar metrics Tunix writes as TensorBoard event files (TFRecord of `Event` protobufs).

This is the structured source for reward, KL and loss per step; nothing is scraped from log text.
Files grow while training runs, so readers keep a byte offset per file and stop at a record that
is not complete yet, picking it up on the next poll.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from trainer.progress.tensorboard_proto import parse_event
from trainer.storage import ArtifactStore, StorageError, store_for

EVENT_FILE_MARKER = "events.out.tfevents."

_HEADER = struct.Struct("<QI")  # record length, masked CRC of the length
_FOOTER_LEN = 4  # masked CRC of the data


@dataclass(frozen=True)
class Scalar:
    step: int
    tag: str
    value: float
    wall_time: float


def parse_records(data: bytes) -> tuple[list[bytes], int]:
    """Split TFRecord bytes into payloads; returns them and the offset after the last complete one."""
    records, offset = [], 0
    while offset + _HEADER.size <= len(data):
        (length, _crc) = _HEADER.unpack_from(data, offset)
        end = offset + _HEADER.size + length + _FOOTER_LEN
        if end > len(data):
            break
        records.append(data[offset + _HEADER.size : offset + _HEADER.size + length])
        offset = end
    return records, offset


def scalars_from_record(payload: bytes) -> list[Scalar]:
    event = parse_event(payload)
    return [Scalar(step=event.step, tag=v.tag, value=v.number, wall_time=event.wall_time) for v in event.values if v.number is not None]


@dataclass
class EventFileTailer:
    """Incrementally reads every `events.out.tfevents.*` object under a URI, local or gs://."""

    store: ArtifactStore
    root_uri: str
    _offsets: dict[str, int] = field(default_factory=dict)

    def poll(self) -> list[Scalar]:
        found: list[Scalar] = []
        for obj in self.store.list(self.root_uri):
            if EVENT_FILE_MARKER not in obj.uri.rsplit("/", 1)[-1]:
                continue
            offset = self._offsets.get(obj.uri, 0)
            if obj.size_bytes <= offset:
                continue
            try:
                data = self.store.read_bytes(obj.uri)[offset:]
            except StorageError:
                continue
            records, consumed = parse_records(data)
            self._offsets[obj.uri] = offset + consumed
            for payload in records:
                found.extend(scalars_from_record(payload))
        return found


def read_scalars(root_uri: str | Path) -> dict[str, dict[int, float]]:
    """Every scalar under root, as tag -> step -> value (the last write of a step wins)."""
    table: dict[str, dict[int, float]] = defaultdict(dict)
    root = str(root_uri)
    for scalar in EventFileTailer(store_for(root), root).poll():
        table[scalar.tag][scalar.step] = scalar.value
    return dict(table)
