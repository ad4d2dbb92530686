"""Online calibration of the upper quantile: does it cover what it says it covers?

A quantile regression fitted on one series covers its nominal share there and less or
more on the next (heavier tails, a level shift, more noise): a knob chosen on one
series does not carry. So each (model, client region) keeps score. Every upper bound
the planner is given is remembered with the span it was for; once that span is in the
history, the realised peak either exceeded it (a miss) or not, and a correction in log
units moves by ``gain * (miss - (1 - quantile))``: up by about ``gain`` on a miss, down
by ``gain * (1 - quantile)`` on a cover. The misses so settle at ``1 - quantile`` of
the spans whatever the series (adaptive conformal inference, Gibbs and Candès 2021),
with one setting for all. The correction multiplies the next upper bounds by
``exp(shift)``. Missing windows score nothing.

Pure: the calibration is a value in the autoscaler's JSON state (``ScalerState``).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict

from base.types import FloatArray

__all__ = ["MAX_PENDING", "LineCalibration", "peak_over"]

MAX_PENDING = 64  # upper bounds awaiting their outcome; older ones are dropped


def peak_over(
    rate: FloatArray, start_s: float, bucket_s: float, since_s: float, until_s: float
) -> float | None:
    """The highest observed rate of the buckets (from ``start_s``, ``bucket_s`` long)
    that overlap [``since_s``, ``until_s``); None if none of them was observed."""
    first = max(math.floor((since_s - start_s) / bucket_s), 0)
    last = min(max(math.ceil((until_s - start_s) / bucket_s), first + 1), len(rate))
    window = rate[first:last]
    window = window[np.isfinite(window)]
    return float(window.max()) if len(window) else None


class LineCalibration(BaseModel):
    """The upper-quantile correction of one (model, client region). Immutable.

    ``shift``: log units applied to the model's upper bound (0: none). ``pending``:
    (since s, until s, upper issued per s) awaiting their outcome. ``scored`` and
    ``missed``: spans scored so far and those the upper bound did not cover (the
    realised coverage is 1 - missed / scored).
    """

    model_config = ConfigDict(frozen=True)

    shift: float = 0.0
    pending: list[tuple[float, float, float]] = []
    scored: int = 0
    missed: int = 0

    def settle(
        self,
        rate: FloatArray,
        start_s: float,
        bucket_s: float,
        quantile: float,
        gain: float,
        bounds: tuple[float, float],
    ) -> LineCalibration:
        """Score every pending upper bound whose span has ended by the end of ``rate``
        (rates per s per bucket from ``start_s``; NaN: missing), and move the shift."""
        end_s = start_s + len(rate) * bucket_s
        shift, scored, missed = self.shift, self.scored, self.missed
        waiting: list[tuple[float, float, float]] = []
        for since, until, upper in self.pending:
            if until > end_s:
                waiting.append((since, until, upper))
                continue
            actual = peak_over(rate, start_s, bucket_s, since, until)
            if actual is None:
                continue  # the span went missing: no evidence either way
            miss = actual > upper * (1.0 + 1e-9)
            shift = min(max(shift + gain * (miss - (1.0 - quantile)), bounds[0]), bounds[1])
            scored, missed = scored + 1, missed + miss
        return LineCalibration(shift=shift, pending=waiting, scored=scored, missed=missed)

    def issue(self, since_s: float, until_s: float, upper: float) -> LineCalibration:
        """Remember ``upper`` (per s) as the bound given for [``since_s``, ``until_s``)."""
        pending = [*self.pending, (since_s, until_s, upper)][-MAX_PENDING:]
        return self.model_copy(update={"pending": pending})

    @property
    def factor(self) -> float:
        """What the model's upper bounds are multiplied by."""
        return math.exp(self.shift)
