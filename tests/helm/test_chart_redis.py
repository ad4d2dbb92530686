"""The chart's Redis: persistent by default when the chart runs it, and external Redis
URLs of every kind the gateway connects to (one server, Cluster, Sentinel)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.helm.chart import CHART, render


def _redis(values: dict[str, Any]) -> dict[str, Any]:
    docs = render(values).docs
    return next(
        d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"].endswith("redis")
    )


def test_the_built_in_redis_persists_to_a_claim_with_an_append_only_file() -> None:
    sts = _redis({})
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "volatile-lru"
    assert [c["metadata"]["name"] for c in sts["spec"]["volumeClaimTemplates"]] == ["data"]


def test_persistence_can_be_turned_off() -> None:
    sts = _redis({"redis": {"persistence": {"enabled": False}}})
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "no"
    assert "volumeClaimTemplates" not in sts["spec"]


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://cfg.example.internal:6379",
        "rediss+cluster://:pw@a.internal:6380,b.internal:6380",
        "redis+sentinel://s1.internal:26379,s2.internal:26379/mymaster",
    ],
)
def test_cluster_and_sentinel_urls_are_accepted(url: str) -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema({"redis": {"enabled": False}, "externalRedis": {"url": url}})
