"""Fixtures for fault-injection tests: the three-pool fleet with a fast health policy
(probes every 0.2 s, short backoffs), and helpers to watch the shared pool state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.conftest import Fleet, fleet_policy, start_fleet
from tests.gateway.harness import Gateway, write_policy

FAST_HEALTH = {
    "probe_interval_s": 0.2,
    "probe_timeout_s": 0.5,
    "unhealthy_threshold": 2,
    "healthy_threshold": 2,
    "ramp_s": 1.0,
    "drain_deadline_s": 10.0,
}
FAST_ROUTING = {
    "outlier": {"consecutive_failures": 2, "base_ejection_s": 0.5, "max_ejection_s": 2.0},
    "measurement_ttl_s": 2.0,
    "connect_timeout_ms": 500,
}
CHAT_BODY = {
    "model": "chat-model",
    "messages": [{"role": "user", "content": "fault test"}],
    "max_tokens": 2,
}


@pytest.fixture
def fast_fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = start_fleet(tmp_path)
    doc: dict[str, Any] = fleet_policy(fleet.engines, **FAST_ROUTING)
    doc["health"] = FAST_HEALTH
    write_policy(fleet.policy_path, doc)
    try:
        yield fleet
    finally:
        fleet.stop()


def pool_state(gateway: Gateway, pool_id: str) -> dict[str, Any]:
    pools = gateway.admin("GET", "/admin/pools").json()["pools"]
    return next(p for p in pools if p["id"] == pool_id)


def wait_for_state(
    gateway: Gateway, pool_id: str, states: set[str], timeout_s: float
) -> float | None:
    """Seconds until the pool's shared state is one of ``states`` (None on timeout)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if pool_state(gateway, pool_id)["state"] in states:
            return time.monotonic() - started
        time.sleep(0.05)
    return None
