"""Kill a pool's engine under steady load: no request fails, the pool is ejected,
and it is readmitted after its engine comes back."""

from __future__ import annotations

import time

from tests.figures import report
from tests.gateway.conftest import Fleet
from tests.gateway.faults.conftest import CHAT_BODY, wait_for_state
from tests.gateway.faults.loadgen import Load
from tests.gateway.harness import Engine, Gateway, unique_prefix

CHEAP = "gcp:us-central1:cheap"


def test_killed_engine_loses_no_request_is_ejected_and_readmitted(
    fast_fleet: Fleet, redis_url: str
) -> None:
    gw = Gateway(fast_fleet.policy_path, redis_url, unique_prefix()).start()
    cheap = fast_fleet.engines["cheap"]
    try:
        with Load(f"{gw.base}/v1/chat/completions", CHAT_BODY, workers=8, max_s=30) as load:
            time.sleep(1.5)
            cheap.kill()
            killed_at = time.monotonic()
            to_eject = wait_for_state(gw, CHEAP, {"ejected", "probing"}, timeout_s=10)
            time.sleep(1.0)
            restarted = Engine(
                cheap.profile, cheap.model, cheap.time_scale, seed=1, port=cheap.port
            ).start()
            fast_fleet.engines["cheap"] = restarted
            restarted_at = time.monotonic()
            to_readmit = wait_for_state(gw, CHEAP, {"healthy"}, timeout_s=15)
            time.sleep(2.0)  # ramp (1 s) and traffic back
            result = load.stop()
        back = result.pools_between(time.monotonic() - 1.0, time.monotonic())
        report(
            f"engine killed: {result.sent} requests, {len(result.failures)} failed; "
            f"ejected {to_eject:.2f}s after the kill; readmitted {to_readmit:.2f}s after restart; "
            f"last second on the cheap pool: {back[CHEAP]}/{sum(back.values())}"
            if to_eject is not None and to_readmit is not None
            else f"engine killed: eject={to_eject} readmit={to_readmit}"
        )
        assert result.sent > 100
        assert result.failures == [], result.failures[:3]
        assert to_eject is not None, "the dead pool was never ejected"
        assert to_readmit is not None, "the restarted pool was never readmitted"
        assert back[CHEAP] > 0, "traffic did not come back to the cheapest pool"
        assert killed_at < restarted_at
    finally:
        gw.stop()
