"""Replicas from DNS (``gateway.replica_discovery``) against a real DNS server of the
tests' own (``LocalDns``): the loop's rounds one at a time with a fake clock, then a
real gateway process whose pool follows SRV records as they change."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gateway.replica_discovery import DnsDiscoveryLoop
from gateway.routing_state import RoutingState
from router.compiled import CompiledPolicy, compile_policy
from router.policy_loader import parse_policy
from tests.adapters.upstream.dns_server import LocalDns
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

NAME = "_http._tcp.engines.skyroute.test."
STATIC = "http://static.example:8000"


@pytest.fixture
def server() -> Iterator[LocalDns]:
    dns = LocalDns()
    yield dns
    dns.close()


def _dns_policy(server: LocalDns, record: str = "SRV") -> CompiledPolicy:
    doc = yaml.safe_load(yaml.safe_dump(_policy([STATIC]).policy.model_dump(mode="json")))
    doc["pools"][0]["dns"] = {"name": NAME, "record": record, "port": 8000,
                              "nameserver": server.address, "interval_s": 2.0}  # fmt: skip
    return compile_policy(parse_policy(yaml.safe_dump(doc)))


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _srv(server: LocalDns, ports: list[int]) -> None:
    server.set(NAME, "SRV", [f"0 0 {p} pod-{p}.skyroute.test." for p in ports])
    for p in ports:
        server.set(f"pod-{p}.skyroute.test.", "A", ["10.0.0.1"])


def _ids(state: RoutingState) -> tuple[str, ...]:
    return state.replicas.by_id[POOL].table.ids


def test_a_pools_replicas_follow_its_srv_records_round_by_round(server: LocalDns) -> None:
    state = RoutingState(_dns_policy(server))
    clock = _Clock()
    loop = DnsDiscoveryLoop(state, monotonic=clock)
    _srv(server, [8001])
    asyncio.run(loop.round())
    assert _ids(state) == ("http://10.0.0.1:8001",)
    _srv(server, [8001, 8002])
    asyncio.run(loop.round())  # not due yet: the interval has not passed
    assert _ids(state) == ("http://10.0.0.1:8001",)
    clock.now += 2.0
    asyncio.run(loop.round())
    assert _ids(state) == ("http://10.0.0.1:8001", "http://10.0.0.1:8002")
    _srv(server, [8002])
    clock.now += 2.0
    asyncio.run(loop.round())
    assert _ids(state) == ("http://10.0.0.1:8002",)


def test_a_replica_that_stays_keeps_its_state_when_another_joins(server: LocalDns) -> None:
    state = RoutingState(_dns_policy(server))
    clock = _Clock()
    loop = DnsDiscoveryLoop(state, monotonic=clock)
    _srv(server, [8001])
    asyncio.run(loop.round())
    state.replicas.by_id[POOL].acquire(0)
    _srv(server, [8000, 8001])
    clock.now += 2.0
    asyncio.run(loop.round())
    pool_ = state.replicas.by_id[POOL]
    assert pool_.table.ids[1] == "http://10.0.0.1:8001" and list(pool_.inflight) == [0.0, 1.0]


def test_a_name_that_resolves_to_nothing_hands_the_pool_back_to_its_endpoints(
    server: LocalDns,
) -> None:
    state = RoutingState(_dns_policy(server, record="A"))
    clock = _Clock()
    loop = DnsDiscoveryLoop(state, monotonic=clock)
    server.set(NAME, "A", ["10.0.0.9"])
    asyncio.run(loop.round())
    assert _ids(state) == ("http://10.0.0.9:8000",)
    server.set(NAME, "A", [])
    clock.now += 2.0
    asyncio.run(loop.round())
    assert _ids(state) == (STATIC,)


def test_a_dns_server_that_stops_answering_changes_nothing(server: LocalDns) -> None:
    state = RoutingState(_dns_policy(server))
    clock = _Clock()
    loop = DnsDiscoveryLoop(state, monotonic=clock)
    _srv(server, [8001])
    asyncio.run(loop.round())
    server.close()
    clock.now += 2.0
    asyncio.run(loop.round())
    assert loop.rounds == 2 and _ids(state) == ("http://10.0.0.1:8001",)


# -- a real gateway --------------------------------------------------------------------


def test_a_gateway_takes_replicas_that_join_and_leaves_those_removed_from_dns(
    tmp_path: Path, redis_url: str, server: LocalDns
) -> None:
    engines = [Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05, seed=i) for i in (1, 2)]
    gw: Gateway | None = None
    try:
        for engine in engines:
            engine.start()
        first, second = engines
        spec = pool(POOL, first, provider="aws", region="us-east-1", model="chat-model",
                    usd_per_gpu_hour=1.0, endpoints=[first.url])  # fmt: skip
        spec["dns"] = {"name": NAME, "record": "SRV", "interval_s": 0.2,
                       "nameserver": server.address}  # fmt: skip
        for engine in engines:
            server.set(f"e{engine.port}.skyroute.test.", "A", ["127.0.0.1"])
        server.set(NAME, "SRV", [f"0 0 {first.port} e{first.port}.skyroute.test."])
        doc = policy_doc([spec], ["chat-model"], deadline_floor_ms=500)
        gw = Gateway(write_policy(tmp_path / "policy.yaml", doc), redis_url, unique_prefix())
        gw.start()
        assert [r["address"] for r in gw.replicas(POOL)] == [first.url]
        server.set(NAME, "SRV", [f"0 0 {e.port} e{e.port}.skyroute.test." for e in engines])
        wait_for(lambda: sorted([r["address"] for r in gw.replicas(POOL)]) == sorted(e.url for e in engines),
                 "the new replica to join")  # fmt: skip
        server.set(NAME, "SRV", [f"0 0 {second.port} e{second.port}.skyroute.test."])
        wait_for(
            lambda: [r["address"] for r in gw.replicas(POOL)] == [second.url],
            "the removed replica to leave",
        )
        assert [gw.chat_status(f"q {i}") for i in range(4)] == [200] * 4
        served = gw.admin("GET", f"/admin/pools/{POOL}").json()["replicas"][0]["served"]
        assert served == 4
    finally:
        if gw is not None:
            gw.stop()
        for engine in engines:
            engine.kill()
