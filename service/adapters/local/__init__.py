"""The local-process launcher: the embedded default, no cluster needed."""

from .launcher import LocalProcessLauncher

__all__ = ["LocalProcessLauncher"]
