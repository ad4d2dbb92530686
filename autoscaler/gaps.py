"""Telling a window where nobody reported from a window where nobody asked.

Demand telemetry has holes: a gateway that cannot flush, a collector that was down, a
public series where no client reported in a window (ServeGen writes 0 there). Read as
demand, such a window is a crash to zero that drags the level down, teaches the error
model a -100 % error and scales the fleet in just before the traffic "comes back".

So a zero is believed only where it is plausible. A run of zero windows is missing
(not idle) when the windows around it expected at least ``min_expected`` events per
window: for Poisson arrivals a window with none then has probability at most
e^-20 ≈ 2e-9 (the default). The expectation is the median of the three observed windows
nearest before the run, and of the three after it; the smaller of the two (an interior
run), or the one that exists (a run at either end). A run still going at the end is
believed once it has lasted ``max_trailing_s``: demand that really stopped is followed
after that long, a telemetry outage is not followed at all before it.
"""

from __future__ import annotations

import numpy as np

from base.types import BoolArray, FloatArray

__all__ = ["MAX_TRAILING_S", "MIN_EXPECTED", "missing_windows"]

MIN_EXPECTED = 20.0
MAX_TRAILING_S = 6 * 3600.0
_NEAR = 3  # observed windows on each side that set the expectation


def missing_windows(
    counts: FloatArray,
    bucket_s: float,
    min_expected: float = MIN_EXPECTED,
    max_trailing_s: float = MAX_TRAILING_S,
) -> BoolArray:
    """Which windows of ``counts`` (events per window of ``bucket_s`` seconds, >= 0)
    are missing rather than idle: every NaN window, and the zero windows the module
    docstring's rule marks. Never raises; an all-zero series is idle throughout."""
    counts = np.asarray(counts, dtype=np.float64)
    missing = ~np.isfinite(counts)
    empty = missing | (np.nan_to_num(counts) <= 0.0)
    if not empty.any():
        return missing
    positive = np.flatnonzero(~empty)
    edges = np.diff(np.concatenate([[0], empty.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    max_trailing = max(int(max_trailing_s / bucket_s), 0)
    for a, b in zip(starts, ends, strict=True):
        before = positive[positive < a][-_NEAR:]
        after = positive[positive >= b][:_NEAR]
        if len(before) == 0 and len(after) == 0:
            continue  # nothing was ever seen: idle, not missing
        sides = [float(np.median(counts[i])) for i in (before, after) if len(i)]
        if b == len(counts) and b - a > max_trailing:
            continue  # it has lasted long enough to be believed
        if min(sides) >= min_expected:
            missing[a:b] = True
    return missing
