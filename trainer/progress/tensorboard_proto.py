"""Decodes the few fields of TensorBoard's `Event` protobuf that the scalar reader (tensorboard_scalars.py) needs.

Why not tensorboardX's generated `event_pb2`: importing it runs `tensorboardX/__init__`, which imports
torch, and that was 3.6 s of the trainer's 5 s start-up on 2 CPU cores (bench/pipeline/trainer_overhead.py), spent
before every job's first stage. The wire format is small and stable; the fields are those of
tensorboardX/proto/{event,summary,tensor}.proto, and the tests read files tensorboardX and Tunix wrote.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

# Field numbers: Event.{wall_time 1, step 2, summary 5}; Summary.value 1; Summary.Value.{tag 1,
# simple_value 2, tensor 8}; TensorProto.{dtype 1, tensor_content 4, float_val 5, double_val 6}.
DT_FLOAT = 1
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class SummaryValue:
    tag: str
    number: float | None  # simple_value, else the tensor's first float or double; None for other kinds


@dataclass(frozen=True)
class Event:
    wall_time: float
    step: int
    values: tuple[SummaryValue, ...]  # empty when the event has no summary


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value): an int for varints, the raw bytes for the other wire types."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, pos = _varint(data, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            value, pos = data[pos : pos + size], pos + size
        elif wire == _BYTES:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        else:
            raise ValueError(f"unsupported wire type {wire} (field {number})")
        if pos > len(data):
            raise ValueError(f"field {number} runs past the end of the message")
        yield number, value


def _first_number(value: bytes, fmt: str) -> float:
    """The first element of a repeated float/double field, packed (one byte string) or not (one element)."""
    return float(struct.unpack_from("<" + fmt, value)[0])


def _tensor_number(data: bytes) -> float | None:
    dtype, content, first_float, first_double = 0, b"", None, None
    for number, value in _fields(data):
        if number == 1 and isinstance(value, int):
            dtype = value
        elif number == 4 and isinstance(value, bytes):
            content = value
        elif number == 5 and isinstance(value, bytes) and value and first_float is None:
            first_float = _first_number(value, "f")
        elif number == 6 and isinstance(value, bytes) and value and first_double is None:
            first_double = _first_number(value, "d")
    if first_float is not None:
        return first_float
    if first_double is not None:
        return first_double
    if content and dtype == DT_FLOAT:
        return float(struct.unpack_from("<f", content)[0])
    return None


def _summary_value(data: bytes) -> SummaryValue:
    tag, simple, tensor = "", None, None
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            tag = value.decode("utf-8")
        elif number == 2 and isinstance(value, bytes):
            simple = float(struct.unpack("<f", value)[0])
        elif number == 8 and isinstance(value, bytes):
            tensor = value
    if simple is not None:
        return SummaryValue(tag, simple)
    return SummaryValue(tag, _tensor_number(tensor) if tensor is not None else None)


def parse_event(payload: bytes) -> Event:
    """One TFRecord payload as an Event; ValueError when it is not a well-formed message."""
    wall_time, step, values = 0.0, 0, list[SummaryValue]()
    for number, value in _fields(payload):
        if number == 1 and isinstance(value, bytes):
            wall_time = float(struct.unpack("<d", value)[0])
        elif number == 2 and isinstance(value, int):
            step = value - (1 << 64) if value >= 1 << 63 else value  # int64: two's complement in 10 bytes
        elif number == 5 and isinstance(value, bytes):
            values.extend(_summary_value(v) for n, v in _fields(value) if n == 1 and isinstance(v, bytes))
    return Event(wall_time, step, tuple(values))
