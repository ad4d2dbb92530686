"""Fixed-width table cells for the operator commands."""

from __future__ import annotations

import math
import re

_WIDTH = re.compile(r"[<>^]?(\d*)")


def cell(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec`` (e.g. ``>8.1f``); a missing or non-finite value is
    a ``-`` in the same width, so a column never shifts."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        width = _WIDTH.match(spec)
        return "-".rjust(int(width.group(1)) if width and width.group(1) else 1)
    return format(value, spec)
