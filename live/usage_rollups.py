"""Budget periods and usage roll-up fields: the names the usage writer
(``live.access_table.AccessTables.add_usage``) and its readers (the admin usage report,
the store's ledger and its restore) share. Pure.

A budget period is an hour, a day or a month of UTC, named ``h2026112417``, ``d20261124``
and ``m202611``. A roll-up hash holds one tenant's hour; each field is
``pool|model|region|provider|metric`` and counts one metric of that group, so a reader
sums fields by pool, model, region or provider (hours written before that held
``group|value|metric`` per way of grouping, and still read).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

__all__ = ["METRICS", "hour_period_ids", "period_ids", "rollup_field", "rollup_name"]

# The counted metrics of a roll-up group, in the order the writer sums them.
METRICS = ("requests", "prompt_tokens", "completion_tokens", "cost_nusd")
_GROUP_INDEX = {"pool": 0, "model": 1, "region": 2, "provider": 3}


def period_ids(now_s: float) -> tuple[str, str, str]:
    """(hour, day, month) ids of the budget periods containing ``now_s`` (UTC)."""
    return hour_period_ids(int(now_s // 3600))


@functools.lru_cache(maxsize=256)
def hour_period_ids(hour: int) -> tuple[str, str, str]:
    """(hour, day, month) ids of the periods containing hour number ``hour`` since the
    epoch. Cached: every usage flush asks it for each record, and the answer only
    changes once an hour."""
    t = datetime.fromtimestamp(hour * 3600, UTC)
    return t.strftime("h%Y%m%d%H"), t.strftime("d%Y%m%d"), t.strftime("m%Y%m")


def rollup_field(pool: str, model: str, region: str, provider: str, metric: str) -> str:
    """The roll-up field counting ``metric`` of one (pool, model, region, provider) group."""
    return f"{pool}|{model}|{region}|{provider}|{metric}"


def rollup_name(field_name: str, group_by: str) -> tuple[str, str] | None:
    """(group value, metric) of a roll-up field for ``group_by`` (pool, model, region,
    provider or total), or None if the field does not count there."""
    parts = field_name.split("|")
    if len(parts) == 3:
        return (parts[1], parts[2]) if parts[0] == group_by else None
    if len(parts) != 5:
        return None
    if group_by == "total":
        return "all", parts[4]
    return parts[_GROUP_INDEX[group_by]], parts[4]
