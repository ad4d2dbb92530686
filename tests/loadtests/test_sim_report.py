"""The report's verdict on a run: which baseline skyroute is compared with, and the
summary row. Pure: a run's result document is written out by hand."""

from __future__ import annotations

from typing import Any

from loadtests.sim_report import verdict


def _doc(**policies: tuple[float, float]) -> dict[str, Any]:
    return {
        "policies": [
            {"summary": {"policy": name, "provisioned_usd": usd, "slo_attainment": at}}
            for name, (usd, at) in policies.items()
        ],
        "relaxation_bound": {"total_usd": 2.0},
    }


REFERENCE = {"threshold": 0.99, "best": {"usd": 5.0, "attainment": 0.995}}


def test_the_rival_is_the_cheapest_baseline_that_reaches_the_threshold() -> None:
    doc = _doc(
        skyroute=(6.0, 0.999),
        cheap_but_short=(4.0, 0.98),  # below the threshold: not a rival
        rival=(8.0, 0.991),  # below skyroute's attainment but above the threshold
        dear=(9.0, 1.0),
    )
    v = verdict(doc, REFERENCE)
    assert v is not None and v.rival is not None
    assert v.rival["policy"] == "rival"
    assert v.saving == 1 - 6.0 / 8.0
    row = v.row("conversation", "reactive", 1)
    assert row.startswith(
        "| conversation | reactive | 1 | 6.00 | 99.90 | yes | rival 8.00 | +25.0%"
    )
    assert row.endswith("| +20.0% | +200.0% |")
    assert "skyroute 25.0% cheaper" in v.line()


def test_a_run_below_the_threshold_is_compared_at_its_own_attainment() -> None:
    v = verdict(_doc(skyroute=(6.0, 0.95), below=(5.0, 0.94), above=(7.0, 0.96)), REFERENCE)
    assert v is not None and v.rival is not None
    assert v.rival["policy"] == "above"
    assert "| no |" in v.row("bursts", "reactive", 0)
    assert "misses it" in v.line()


def test_no_rival_and_no_reference() -> None:
    v = verdict(_doc(skyroute=(6.0, 0.9), other=(5.0, 0.5)), None)
    assert v is not None and v.rival is None and v.saving is None
    assert "none reaches it" in v.row("mooncake", "planner", 0)
    assert verdict(_doc(other=(1.0, 1.0)), None) is None
