"""Make an engine slow (very high TPOT): SLO-bound traffic moves to other pools, and
comes back after the engine recovers."""

from __future__ import annotations

import time

from tests.figures import report
from tests.gateway.conftest import Fleet
from tests.gateway.faults.conftest import CHAT_BODY
from tests.gateway.faults.loadgen import Load
from tests.gateway.harness import Gateway, unique_prefix

CHEAP = "gcp:us-central1:cheap"


def _share(load: Load, window_s: float = 1.0) -> float:
    now = time.monotonic()
    pools = load.result.pools_between(now - window_s, now)
    return pools[CHEAP] / max(sum(pools.values()), 1)


def _wait_share(load: Load, want_low: bool, timeout_s: float) -> float | None:
    started = time.monotonic()
    time.sleep(1.0)
    while time.monotonic() - started < timeout_s:
        share = _share(load)
        if (share < 0.1) if want_low else (share > 0.5):
            return time.monotonic() - started
        time.sleep(0.2)
    return None


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f}s"


def test_slow_engine_loses_slo_traffic_and_wins_it_back(fast_fleet: Fleet, redis_url: str) -> None:
    gw = Gateway(fast_fleet.policy_path, redis_url, unique_prefix()).start()
    cheap = fast_fleet.engines["cheap"]
    body = {**CHAT_BODY, "max_tokens": 8}  # TPOT is measured from 8+ token answers
    try:
        with Load(f"{gw.base}/v1/chat/completions", body, workers=4, max_s=60) as load:
            time.sleep(1.5)
            share_before = _share(load)
            cheap.set_faults(slowdown=6.0)  # ~30 ms -> ~180 ms a token; the SLO is 60 ms
            moved_after = _wait_share(load, want_low=True, timeout_s=15)
            cheap.set_faults(slowdown=1.0)
            back_after = _wait_share(load, want_low=False, timeout_s=20)
            result = load.stop()
        report(
            f"slow engine: {result.sent} requests, {len(result.failures)} failed; cheap-pool share "
            f"{share_before:.0%} before; traffic moved off it {_s(moved_after)} after the slowdown; "
            f"back {_s(back_after)} after recovery (measurement TTL 2 s)"
        )
        assert result.failures == []
        assert share_before > 0.5
        assert moved_after is not None, "traffic stayed on the slow pool"
        assert back_after is not None, "traffic never came back after the pool recovered"
    finally:
        gw.stop()
