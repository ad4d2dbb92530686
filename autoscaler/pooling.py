"""Risk pooling: the margin a model's demand lines need together, not one by one.

Each (model, client region) line gets an upper quantile of its own. Covering every
line's upper at once covers the case where all of them peak in the same window, which
is far rarer than the quantile says when their noise is independent: three lines with
margins of 226, 154 and 121 tokens/s above their means need about 300 together, not
500. What they need together is read from the model's total demand, forecast like a
line: its margin above its mean, over the sum of the lines' margins, is the share of
each line's margin the plan must hold (``pooled_share``). Lines whose noise moves
together (one demand split by fixed shares) give a share of 1, so nothing is lost
where pooling buys nothing. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autoscaler.forecast import ForecastConfig, forecast_rate
from base.types import FloatArray

__all__ = ["pooled_share"]


def pooled_share(
    rates: Sequence[FloatArray],
    margins: Sequence[float],
    start_s: float,
    bucket_s: float,
    horizon: int,
    span_s: tuple[float, float],
    config: ForecastConfig,
) -> float:
    """Share (0-1] of each line's margin (upper - mean, tokens/s) that covers the
    lines' total at the same quantile.

    ``rates``: each line's rate per bucket (aligned, from ``start_s``; NaN: missing, and
    then the total is missing too). ``margins``: each line's uncorrected margin over the
    same ``span_s`` (since, until) of the forecast ``horizon`` buckets. 1 (no pooling)
    with fewer than two lines, no margin, or an unreliable forecast of the total.
    """
    total_margin = float(sum(max(m, 0.0) for m in margins))
    if len(rates) < 2 or total_margin <= 0:
        return 1.0
    total = np.sum(np.stack(rates), axis=0)  # NaN where any line is missing
    fc = forecast_rate(total, start_s, bucket_s, horizon, config)
    if not fc.reliable:
        return 1.0
    since, until = span_s
    mean, upper = fc.peak(until, since_s=since)
    return float(min(max((upper - mean) / total_margin, 0.0), 1.0))
