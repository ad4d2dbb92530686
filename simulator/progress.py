"""A small progress bar on stderr for long simulation runs (no dependency)."""

from __future__ import annotations

import sys
from typing import TextIO


class ProgressBar:
    """``[#####-----]  50% label`` redrawn in place when the whole percent changes.

    Call it with the number of units just done; ``close()`` ends the line.
    """

    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(total, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.done = 0
        self.label = ""
        self._shown = -1

    def __call__(self, n: int) -> None:
        """Advance by ``n`` units."""
        self.done = min(self.done + n, self.total)
        percent = self.done * 100 // self.total
        if percent != self._shown:
            self._shown = percent
            filled = self.width * self.done // self.total
            bar = "#" * filled + "-" * (self.width - filled)
            self.stream.write(f"\r[{bar}] {percent:3d}% {self.label:<24}")
            self.stream.flush()

    def set_label(self, label: str) -> None:
        """Text shown after the bar from the next redraw on."""
        self.label = label
        self._shown = -1

    def close(self) -> None:
        """Finish the line."""
        self.stream.write("\n")
        self.stream.flush()
