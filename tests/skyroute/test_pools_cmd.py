"""``skyroute pools`` renders the admin API's pool list as a table."""

from __future__ import annotations

from skyroute.pools_cmd import render_pools

POOL = {
    "id": "gcp:us-central1:cheap",
    "state": "healthy",
    "reason": "readmitted after 3 good probes",
    "weight": 0.4,
    "needs_replacement": True,
    "inflight": 3.0,
    "ready_replicas": 2.0,
    "ttft_ewma_ms": 120.0,
    "tpot_ewma_ms": 31.5,
    "rtt_ms": None,
    "usd_per_gpu_hour": 0.397,
}


def test_pools_table_shows_state_inflight_latency_price_and_flags() -> None:
    table = render_pools([POOL])
    row = table.splitlines()[2]
    for text in (
        "gcp:us-central1:cheap",
        "healthy",
        "120",
        "31.5",
        "0.397",
        "NEEDS-REPLACEMENT",
        "ramp 40%",
    ):
        assert text in row, text
    assert " - " in row  # unknown RTT
