"""What both evaluation engines share: a completion's seed and the stopping test's type.

A completion's draws come from its own seed, derived from its prompt's seed and its index among the prompt's
generations, so they do not depend on which rows share its batch, on where a resumed evaluation restarts, or on when
its neighbours stop (hf_sampler.py seeds a torch generator with it, jax_sampler.py a threefry key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

Done = Callable[[str], bool]


def completion_seed(prompt_seed: int, generation: int) -> int:
    """The seed of one completion: independent of the batch it is drawn in (63 bits)."""
    return int.from_bytes(hashlib.sha256(f"{prompt_seed}:{generation}".encode()).digest()[:8], "big") >> 1


def never_done(_text: str) -> bool:
    return False
