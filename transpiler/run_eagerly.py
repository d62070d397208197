"""One switch that makes every converted function run its original Python.

    transpiler.run_eagerly(True)        # from now on: plain eager PyTorch (pdb, print work)
    transpiler.run_eagerly(False)       # back to graphs
    with transpiler.run_eagerly():      # eager inside the block, the previous mode after
        f(x)

``TOGRAPH_RUN_EAGERLY=1`` in the environment starts a process in eager mode. Converted
functions check the switch on every call, so cached graphs are kept for when it is off.
"""
from __future__ import annotations

import os

_EAGERLY = [os.environ.get("TOGRAPH_RUN_EAGERLY", "").strip().lower() in
            ("1", "true", "yes", "on")]


class run_eagerly:
    """Set the switch now; used as a context manager, restore the previous mode on exit."""

    def __init__(self, enabled: bool = True):
        self.previous = _EAGERLY[0]
        _EAGERLY[0] = bool(enabled)

    def __enter__(self) -> "run_eagerly":
        return self

    def __exit__(self, *exc) -> None:
        _EAGERLY[0] = self.previous

    def __repr__(self) -> str:
        return f"<run_eagerly: {'on' if _EAGERLY[0] else 'off'}>"


def running_eagerly() -> bool:
    """Whether converted functions currently run their original Python."""
    return _EAGERLY[0]
