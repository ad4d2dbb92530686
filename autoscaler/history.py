"""Reads demand history for every cycle without re-reading whole weeks each time.

Days that ended before yesterday no longer change, so they are read once and kept;
yesterday and today are read afresh every cycle (a late gateway flush may still land).
"""

from __future__ import annotations

import numpy as np

from autoscaler.demand import DemandHistory
from live.demand_table import DAY_S, DemandSeries, DemandTables

__all__ = ["HistoryReader"]


def _join(old: DemandSeries, new: DemandSeries) -> DemandSeries:
    """``old`` followed by ``new`` (which must start where ``old`` ends)."""
    return DemandSeries(
        old.start_s,
        old.bucket_s,
        np.concatenate([old.requests, new.requests]),
        np.concatenate([old.prompt_tokens, new.prompt_tokens]),
        np.concatenate([old.output_tokens, new.output_tokens]),
        np.concatenate([old.slo_misses, new.slo_misses]),
    )


class HistoryReader:
    """Demand history over the last ``history_s`` seconds, with settled days cached."""

    def __init__(self, tables: DemandTables, history_s: float) -> None:
        self.tables = tables
        self.history_s = history_s
        self._settled: dict[tuple[str, str], DemandSeries] = {}
        self._settled_span: tuple[float, float] = (0.0, 0.0)

    async def read(self, now_s: float) -> DemandHistory:
        """Every recorded (model, client region) up to ``now_s``. Raises TableError."""
        pairs = await self.tables.pairs()
        start = (now_s - self.history_s) // DAY_S * DAY_S  # whole days, so the cache holds
        cut = (now_s // DAY_S - 1) * DAY_S  # start of yesterday
        span = (start, max(cut, start))
        missing = [p for p in pairs if p not in self._settled]
        if span != self._settled_span:
            self._settled, missing = {}, pairs
            self._settled_span = span
        if missing and span[1] > span[0]:
            self._settled.update(await self.tables.read(missing, span[0], span[1]))
        fresh = await self.tables.read(pairs, span[1], now_s)
        series = {
            p: _join(self._settled[p], fresh[p]) if p in self._settled else fresh[p] for p in pairs
        }
        return DemandHistory(now_s, series)
