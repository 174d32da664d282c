"""LineCutter (service/adapters/log_lines.py): however a log arrives in pieces, its lines are those of the whole log,
each cut to MAX_LINE_BYTES with the cut named; only the carried line is held between pieces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.adapters import log_lines
from service.adapters.log_lines import LineCutter


def _reference(data: bytes, limit: int) -> list[str]:
    """Split the whole log at once, then cut each line: what any chunking must give."""
    *lines, last = data.split(b"\n")
    out = [
        line[:limit].decode(errors="replace")
        + (f" [... {len(line) - limit} more bytes of this line not shown]" if len(line) > limit else "")
        for line in lines
    ]
    if last:
        out.append(
            last[:limit].decode(errors="replace")
            + (f" [... {len(last) - limit} more bytes of this line not shown]" if len(last) > limit else "")
        )
    return out


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"\n", b"xyz", b"\xff", b"\xc3\xa9", b"0123456789"]), max_size=60).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_any_chunking_gives_the_lines_of_the_whole_log(data: bytes, cuts: list[int]) -> None:
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(log_lines, "MAX_LINE_BYTES", 7)  # so lines of the examples are cut too
        cutter = LineCutter()
        lines: list[str] = []
        for start, end in zip(bounds, bounds[1:], strict=False):
            lines += cutter.feed(data[start:end])
        if (rest := cutter.rest()) is not None:
            lines.append(rest)
    assert lines == _reference(data, 7)


def test_lines_over_the_bound_are_cut_wherever_the_pieces_end(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(log_lines, "MAX_LINE_BYTES", 4)
    data = b"short\nab\n" + b"y" * 11 + b"\nabcd\nabcde\n" + b"z" * 9
    for size in (1, 2, 3, 5, 7, 64):
        cutter = LineCutter()
        lines = [line for i in range(0, len(data), size) for line in cutter.feed(data[i : i + size])]
        lines.append(cutter.rest() or "")
        assert lines == _reference(data, 4), size
        assert lines[0] == "shor [... 1 more bytes of this line not shown]" and lines[3] == "abcd"
