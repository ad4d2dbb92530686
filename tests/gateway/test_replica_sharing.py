"""Replica ejections shared between gateway processes (``live.replica_health``): one
gateway's failed requests take a replica out for every gateway, through the periodic
flush and the snapshot, never through a round trip of their own. Pure state first,
then through a real Redis, then two real gateway processes."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.routing_state import RoutingState
from live.replica_health import ReplicaEjection, parse_ejections
from live.tables import LiveTables
from tests.gateway.harness import (
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    wait_for,
    write_policy,
)
from tests.gateway.test_replica_state import POOL, _policy

NOW = 1000.0
WALL = 1_700_000_000.0
URLS = ["http://r0.example:8000", "http://r1.example:8000"]


def _state() -> RoutingState:
    return RoutingState(_policy(URLS))


def test_a_replica_another_gateway_ejected_sits_out_until_its_ejection_ends() -> None:
    pool_ = _state().replicas.by_id[POOL]
    pool_.set_shared({URLS[0]: (WALL + 5.0, "503")}, NOW, WALL)
    assert pool_.state_of(0, NOW) == "ejected_elsewhere"
    assert {pool_.pick(None, NOW + 1).index for _ in range(4)} == {1}  # type: ignore[union-attr]
    assert pool_.pick(None, NOW + 6) is not None and pool_.usable == 2


def test_an_ejection_that_is_already_over_ejects_nothing() -> None:
    pool_ = _state().replicas.by_id[POOL]
    pool_.set_shared({URLS[0]: (WALL - 1.0, "503")}, NOW, WALL)
    assert pool_.usable == 2


def test_shared_ejections_never_take_out_the_pools_last_usable_replica() -> None:
    pool_ = _state().replicas.by_id[POOL]
    pool_.set_shared({u: (WALL + 5.0, "503") for u in URLS}, NOW, WALL)
    assert pool_.usable == 2


def test_an_ejection_here_goes_to_the_outbox_once_with_its_end_in_unix_time() -> None:
    state = _state()
    pool_ = state.replicas.by_id[POOL]
    for _ in range(2):
        pool_.on_failure(0, "upstream 503", NOW)
    out = state.replicas.take_ejections(NOW, WALL)
    assert [(e.address, e.until_s, e.reason) for e in out] == [
        (URLS[0], WALL + 5.0, "upstream 503")
    ]
    assert state.replicas.take_ejections(NOW, WALL) == []


def test_a_malformed_ejection_value_ejects_nothing() -> None:
    assert parse_ejections({"a": "soon 503", "b": "12000 x"}) == {"b": (12.0, "x")}


def test_an_ejection_written_by_one_gateways_flush_reaches_anothers_snapshot(
    redis_url: str,
) -> None:
    async def run() -> None:
        redis = Redis.from_url(redis_url)
        tables = LiveTables(redis, prefix=unique_prefix())
        try:
            wall = time.time()
            ejection = ReplicaEjection(POOL, URLS[0], wall + 30.0, "upstream 503")
            await tables.flush(
                "gw-a", now_ms=int(wall * 1000), inflight={},
                observations={},
                extra=lambda pipe: tables.add_replica_ejections(pipe, [ejection]),
            )  # fmt: skip
            rows = await tables.read([POOL], int(wall * 1000), 2000, "gw-b", with_samples=False)
            ttl_ms = await redis.pttl(f"{tables.prefix}:pool:{{{POOL}}}:ejections")
        finally:
            await redis.aclose()
        assert 29_000 < ttl_ms <= 31_000  # expires once the ejection is over
        other = _state()
        other.swap_snapshot(rows, wall)
        pool_ = other.replicas.by_id[POOL]
        assert pool_.state_of(0, time.monotonic()) == "ejected_elsewhere"
        assert pool_.replicas[0].shared_reason == "upstream 503"

    asyncio.run(run())


# -- two gateway processes -------------------------------------------------------------


@pytest.fixture
def engines() -> list[Engine]:
    return [Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05, seed=i) for i in (1, 2)]


def test_a_replica_one_gateway_ejected_gets_no_requests_from_the_other(
    tmp_path: Path, redis_url: str, engines: list[Engine]
) -> None:
    started: list[Gateway] = []
    try:
        for engine in engines:
            engine.start()
        spec = pool(POOL, engines[0], provider="aws", region="us-east-1", model="chat-model",
                    usd_per_gpu_hour=1.0, endpoints=[e.url for e in engines])  # fmt: skip
        doc = policy_doc([spec], ["chat-model"], health={"scrape_interval_s": 0.2},
                         deadline_floor_ms=500)  # fmt: skip
        path = write_policy(tmp_path / "policy.yaml", doc)
        prefix = unique_prefix()
        for _ in range(2):
            started.append(Gateway(path, redis_url, prefix).start())
        a, b = started
        failing = engines[0]
        failing.set_faults(fail_rate=1.0, fail_status=503)
        assert [a.chat_status(f"question {i}") for i in range(8)] == [200] * 8
        assert a.replicas(POOL)[0]["state"] == "ejected"
        wait_for(
            lambda: b.replicas(POOL)[0]["state"] == "ejected_elsewhere",
            "gateway b to see the ejection",
        )
        with ThreadPoolExecutor(6) as workers:
            statuses = list(workers.map(lambda i: b.chat_status(f"from b {i}"), range(6)))
        assert statuses == [200] * 6
        replicas = b.replicas(POOL)
        # b never tried the failing replica: no error there, every answer from the other.
        assert (replicas[0]["errors"], replicas[1]["served"]) == (0, 6)
    finally:
        for gw in started:
            gw.stop()
        for engine in engines:
            engine.kill()
