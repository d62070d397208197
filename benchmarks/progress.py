"""A hand-written progress bar on stderr: ``[#####.....] 5/20 conv_bias_relu: timing``.

On a terminal it redraws one line; otherwise (a log, a test) it prints one line per step.
"""
from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, width: int = 20, stream=None):
        self.total = max(total, 1)
        self.done = 0
        self.width = width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_len = 0

    def show(self, label: str) -> None:
        """Draw the bar with ``label`` as the step now running."""
        filled = int(self.width * self.done / self.total)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            pad = " " * max(0, self._last_len - len(line))
            self.stream.write("\r" + line + pad)
            self._last_len = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def step(self, label: str) -> None:
        """Count one step as finished and show the next one's label."""
        self.done = min(self.done + 1, self.total)
        self.show(label)

    def note(self, message: str) -> None:
        """A message on its own line (the bar is redrawn by the next ``show``)."""
        if self.tty and self._last_len:
            self.stream.write("\r" + " " * self._last_len + "\r")
            self._last_len = 0
        self.stream.write(message + "\n")
        self.stream.flush()

    def finish(self) -> None:
        self.done = self.total
        self.show("done")
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
