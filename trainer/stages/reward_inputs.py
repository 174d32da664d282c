"""A reward's files where the spec names them in an object store (gs://): which objects go with the reward file.

The rule is trainer/rewards_sandbox/reward_files.py's (the file, the Python beside it, its packages, the bounds); this
applies it to a bucket's listing, for the train stage's staging (context.py) and for repro.json's hash (repro.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from trainer.rewards_sandbox.reward_files import RewardFilesRefused, select_reward_files
from trainer.storage import ArtifactStore

# Objects under the reward file's directory read to choose its files: a directory holding more is refused, so a reward
# file left at the top of a large bucket prefix costs one bounded listing, not a walk of the whole prefix.
MAX_LISTED = 1000


def remote_reward_files(uri: str, listed: Iterable[tuple[str, int]]) -> tuple[str, list[str]]:
    """From (uri, size) of every object under the reward file's directory: the directory's uri and the relative names
    that go with the file at `uri`."""
    parent, name = uri.rsplit("/", 1)
    entries = [(found[len(parent) + 1 :], size) for found, size in listed if found.startswith(parent + "/")]
    return parent, select_reward_files(entries, name)


def listed_reward_files(store: ArtifactStore, uri: str) -> tuple[str, list[str]]:
    """remote_reward_files over one listing of the reward file's directory, at most MAX_LISTED objects of it."""
    parent = uri.rsplit("/", 1)[0]
    listed = store.list(parent, limit=MAX_LISTED + 1)
    if len(listed) > MAX_LISTED:
        raise RewardFilesRefused(
            f"the reward file's directory {parent} holds more than {MAX_LISTED} objects: put the reward file and what it "
            "imports in a directory of their own"
        )
    return remote_reward_files(uri, ((o.uri, o.size_bytes) for o in listed))
