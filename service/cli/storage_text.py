"""How the CLI writes a run directory's size (JobPublic.storage, a `storage` event): one line, the total
and the biggest parts in binary units, as the dashboard does (dashboard/src/storage.js)."""

from __future__ import annotations

from trainer.contract import RunStorage

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
SHOWN_PARTS = 3  # the biggest parts named; the rest are "..."


def human_bytes(count: int) -> str:
    """1536 -> `1.5 KiB`, 199_229_440 -> `190 MiB`: three significant digits at most, whole bytes below 1 KiB."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{count} B"
    return f"{value:.1f} {_UNITS[unit]}" if value < 10 else f"{value:.0f} {_UNITS[unit]}"


def storage_text(storage: RunStorage | None) -> str:
    """`190 MiB (checkpoints 110 MiB, export 79 MiB, logs 1.2 MiB, ...)`; `-` before the first measurement."""
    if storage is None:
        return "-"
    parts = sorted(((size, name) for name, size in storage.parts.items() if size), key=lambda p: (-p[0], p[1]))
    named = [f"{name} {human_bytes(size)}" for size, name in parts[:SHOWN_PARTS]]
    if len(parts) > SHOWN_PARTS:
        named.append("...")
    text = human_bytes(storage.total_bytes) + (f" ({', '.join(named)})" if named else "")
    if not storage.complete:
        text += " (incomplete: walk limit)"
    return text
