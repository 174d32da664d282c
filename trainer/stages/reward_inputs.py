"""A reward's files where the spec names them in an object store (gs://): which objects go with the reward file.

The rule is trainer/rewards_sandbox/reward_files.py's (the file, the Python beside it, its packages, the bounds); this
applies it to a bucket's listing, for the train stage's staging (context.py) and for repro.json's hash (repro.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from trainer.rewards_sandbox.reward_files import select_reward_files


def remote_reward_files(uri: str, listed: Iterable[tuple[str, int]]) -> tuple[str, list[str]]:
    """From (uri, size) of every object under the reward file's directory: the directory's uri and the relative names
    that go with the file at `uri`."""
    parent, name = uri.rsplit("/", 1)
    entries = [(found[len(parent) + 1 :], size) for found, size in listed if found.startswith(parent + "/")]
    return parent, select_reward_files(entries, name)
