"""Budget period ids and roll-up field names (pure)."""

from __future__ import annotations

import pytest

from live.usage_rollups import METRICS, period_ids, rollup_field, rollup_name

FIELD = rollup_field("aws:us-east-1:h100", "llama", "aws:us-east-1", "aws", "cost_nusd")


def test_periods_are_the_utc_hour_day_and_month() -> None:
    # 2025-11-24 16:00:00.25 UTC
    assert period_ids(1_764_000_000.25) == ("h2025112416", "d20251124", "m202511")
    assert period_ids(1_764_003_599.9)[0] == "h2025112416"
    assert period_ids(1_764_003_600.0)[0] == "h2025112417"


@pytest.mark.parametrize(
    ("group_by", "value"),
    [("pool", "aws:us-east-1:h100"), ("model", "llama"), ("region", "aws:us-east-1"),
     ("provider", "aws"), ("total", "all")],
)  # fmt: skip
def test_one_field_counts_under_every_way_of_grouping(group_by: str, value: str) -> None:
    assert rollup_name(FIELD, group_by) == (value, "cost_nusd")


def test_fields_of_the_older_layout_count_only_under_their_own_grouping() -> None:
    assert rollup_name("model|llama|requests", "model") == ("llama", "requests")
    assert rollup_name("model|llama|requests", "pool") is None
    assert rollup_name("not a roll-up field", "pool") is None
    assert "requests" in METRICS
