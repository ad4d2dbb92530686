"""``skyroute pools`` renders the admin API's pool list as a table."""

from __future__ import annotations

from skyroute.pools_cmd import render_pools, render_replicas

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


REPLICA = {
    "address": "http://10.0.0.7:8000",
    "state": "scrape_failing",
    "inflight": 2.0,
    "engine_running": 5.0,
    "engine_waiting": 12.0,
    "kv_cache_usage": 0.81,
    "scrape_age_s": 3.2,
    "scrape_failures": 3,
    "request_failures": 0,
    "errors": 4,
    "served": 17,
}


def test_replica_rows_show_state_engine_load_kv_use_and_failures() -> None:
    row = render_replicas([REPLICA, {**REPLICA, "engine_running": None}]).splitlines()
    for text in ("http://10.0.0.7:8000", "scrape_failing", " 12 ", " 81 ", "3.2", " 17"):
        assert text in row[1], text
    assert " - " in row[2]  # not scraped yet


def test_replica_rows_show_recent_ttft_and_tpot_and_another_gateways_ejection() -> None:
    replica = {**REPLICA, "state": "ejected_elsewhere", "ttft_ms": 412.4, "tpot_ms": 31.25}
    row = render_replicas([replica, REPLICA]).splitlines()
    assert "ejected_elsewhere " in row[1] and "   412 " in row[1] and "  31.2 " in row[1]
    assert row[0].index("ttft") < row[0].index("tpot") < row[0].index("age_s")
