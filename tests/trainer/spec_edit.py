"""Edit one field of a spec given as data, by its dotted path (tests of what a spec may say)."""

from __future__ import annotations

import copy
from typing import Any


def with_field(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A deep copy of `data` with `dotted` set to `value`, creating mapping parents; a number indexes a list
    ("dataset.subset", "grpo.rewards.weights.0")."""
    out = copy.deepcopy(data)
    node: Any = out
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return out
