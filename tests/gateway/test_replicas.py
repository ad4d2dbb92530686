"""Replicas inside a pool, end to end: one pool of two simulated engines behind a real
gateway. A dead or frozen replica costs clients nothing while its peer serves; a replica
whose engine is busy with other clients' work loses traffic; prefix and session
affinity keep related requests on one replica. Where requests went is read from each
engine's own counter of requests received."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.harness import (
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    wait_for,
    write_policy,
)

MODEL = "chat-model"
POOL = "aws:us-east-1:pair"
# A shared system prompt of ~1500 tokens: 24 prefix blocks of the gateway's index.
SYSTEM = " ".join(f"rule {i}: route to the cheapest pool that meets the SLO." for i in range(120))


def _received(engine: Engine) -> int:
    """Inference requests the engine has received (its own counter)."""
    text = httpx.get(f"{engine.url}/metrics", timeout=5).text
    found = re.search(r"^sim:requests_received_total\{[^}]*\} (\d+)", text, re.M)
    assert found is not None
    return int(found.group(1))


def _start(
    tmp_path: Path, redis_url: str, engines: list[Engine], *, prefix_affinity: bool = False
) -> Gateway:
    spec = pool(POOL, engines[0], provider="aws", region="us-east-1", model=MODEL,
                usd_per_gpu_hour=1.0, endpoints=[e.url for e in engines])  # fmt: skip
    doc = policy_doc(
        [spec], [MODEL], health={"scrape_interval_s": 0.2, "scrape_timeout_s": 0.2},
        deadline_floor_ms=500,
    )  # fmt: skip
    doc["models"][MODEL]["prefix_affinity"] = prefix_affinity
    return Gateway(write_policy(tmp_path / "policy.yaml", doc), redis_url, unique_prefix()).start()


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    pair = [Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05, seed=i).start() for i in (1, 2)]
    try:
        yield pair
    finally:
        for engine in pair:
            if engine.proc is not None and engine.proc.poll() is None:
                os.kill(engine.proc.pid, signal.SIGCONT)
            engine.kill()


@pytest.fixture
def gateway_factory(tmp_path: Path, redis_url: str) -> Iterator[Any]:
    started: list[Gateway] = []

    def start(engines: list[Engine], **kwargs: Any) -> Gateway:
        gw = _start(tmp_path, redis_url, engines, **kwargs)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


def _chat(gw: Gateway, user: str, *, system: str = "", session: str | None = None) -> int:
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}
    ]
    headers = {"Authorization": f"Bearer {API_KEY}"}
    if session:
        headers["x-session-id"] = session
    resp = httpx.post(
        f"{gw.base}/v1/chat/completions",
        json={"model": MODEL, "messages": messages, "max_tokens": 4},
        headers=headers,
        timeout=30,
    )
    return resp.status_code


def _replicas(gw: Gateway) -> list[dict[str, Any]]:
    resp = gw.admin("GET", f"/admin/pools/{POOL}")
    resp.raise_for_status()
    replicas: list[dict[str, Any]] = resp.json()["replicas"]
    return replicas


@pytest.mark.parametrize("fault", ["sigstop", "kill"])
def test_a_pool_keeps_serving_from_its_other_replica_with_no_client_failures(
    engines: list[Engine], gateway_factory: Any, fault: str
) -> None:
    gw = gateway_factory(engines)
    assert [_chat(gw, f"warm {i}") for i in range(4)] == [200] * 4
    sick, healthy = engines
    assert sick.proc is not None
    if fault == "sigstop":
        os.kill(sick.proc.pid, signal.SIGSTOP)
    else:
        sick.kill()
    with ThreadPoolExecutor(4) as pool_:
        statuses = list(pool_.map(lambda i: _chat(gw, f"question {i}"), range(40)))
    assert statuses == [200] * 40
    wait_for(lambda: _replicas(gw)[0]["state"] != "ready", "the sick replica to be taken out")
    before = _received(healthy)
    assert [_chat(gw, f"after {i}") for i in range(6)] == [200] * 6
    assert _received(healthy) - before == 6


def test_a_request_waiting_on_a_replica_found_hung_goes_to_its_peer_at_once(
    engines: list[Engine], gateway_factory: Any
) -> None:
    # A batch-class request may wait 2 x (30 s + 100 x 500 ms) = 160 s for its answer.
    # Its session pins it to one replica, which hangs as it arrives; the scrapes (every
    # 0.2 s here) take that replica out, and that fails the request over to the peer
    # at once instead of after its deadline.
    gw = gateway_factory(engines)
    before = [_received(e) for e in engines]
    assert _chat(gw, "warm", session="user-7") == 200
    sick = next(e for e, b in zip(engines, before, strict=True) if _received(e) > b)
    assert sick.proc is not None
    os.kill(sick.proc.pid, signal.SIGSTOP)
    reply = httpx.post(
        f"{gw.base}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "long"}],
              "max_tokens": 100},
        headers={"Authorization": f"Bearer {API_KEY}", "x-session-id": "user-7",
                 "x-skyroute-slo": "batch"},
        timeout=60,  # far short of the 160 s deadline
    )  # fmt: skip
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-skyroute-attempts"] == "2"
    assert "failed over at once" in gw.logs()


def test_a_replica_failing_its_requests_is_ejected_alone_and_costs_clients_nothing(
    engines: list[Engine], gateway_factory: Any
) -> None:
    failing = engines[0]
    gw = gateway_factory(engines)
    failing.set_faults(fail_rate=1.0, fail_status=503)
    assert [_chat(gw, f"question {i}") for i in range(12)] == [200] * 12
    replicas = _replicas(gw)
    assert replicas[0]["state"] == "ejected" and replicas[0]["errors"] == 3
    detail = gw.admin("GET", f"/admin/pools/{POOL}").json()
    assert detail["state"] == "healthy" and replicas[1]["served"] == 12


@contextlib.contextmanager
def _work_from_elsewhere(engine: Engine, n: int = 40) -> Iterator[None]:
    """``n`` slow streamed requests straight to ``engine`` (32 batch slots), none through
    the gateway, held open on raw sockets until the block ends."""
    engine.set_faults(slowdown=1000.0)
    body = orjson.dumps({"model": "upstream-chat", "max_tokens": 2000, "stream": True,
                         "messages": [{"role": "user", "content": "elsewhere"}]})  # fmt: skip
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    sockets = [socket.create_connection(("127.0.0.1", engine.port)) for _ in range(n)]
    try:
        for sock in sockets:
            sock.sendall(head + body)
        yield
    finally:
        for sock in sockets:
            sock.close()


def test_a_replica_whose_engine_is_busy_with_other_work_loses_traffic(
    engines: list[Engine], gateway_factory: Any
) -> None:
    busy, idle = engines
    gw = gateway_factory(engines)
    with _work_from_elsewhere(busy):
        wait_for(
            lambda: (_replicas(gw)[0]["engine_waiting"] or 0) >= 8,
            "the gateway to see the busy engine's queue",
        )
        received = _received(busy), _received(idle)
        assert [_chat(gw, f"mine {i}") for i in range(10)] == [200] * 10
        after = _received(busy), _received(idle)
        assert (after[0] - received[0], after[1] - received[1]) == (0, 10)
        assert _replicas(gw)[0]["inflight"] == 0.0


def test_a_pool_whose_engines_are_busy_with_other_work_loses_traffic_to_a_dearer_one(
    engines: list[Engine], tmp_path: Path, redis_url: str
) -> None:
    busy, idle = engines
    pools = [
        pool("gcp:us-central1:cheap", busy, provider="gcp", region="us-central1", model=MODEL,
             usd_per_gpu_hour=0.4),
        pool("aws:us-east-1:dear", idle, provider="aws", region="us-east-1", model=MODEL,
             usd_per_gpu_hour=1.0),
    ]  # fmt: skip
    doc = policy_doc(pools, [MODEL], health={"scrape_interval_s": 0.2})
    gw = Gateway(write_policy(tmp_path / "policy.yaml", doc), redis_url, unique_prefix()).start()
    try:
        assert _chat(gw, "before") == 200 and _received(busy) == 1
        with _work_from_elsewhere(busy):
            wait_for(
                lambda: gw.admin("GET", "/admin/pools/gcp:us-central1:cheap").json()[
                    "engine_extra"] >= 40,
                "the gateway to see the cheap pool's load from elsewhere",
            )  # fmt: skip
            before = _received(busy), _received(idle)
            assert [_chat(gw, f"mine {i}") for i in range(6)] == [200] * 6
            assert (_received(busy) - before[0], _received(idle) - before[1]) == (0, 6)
    finally:
        gw.stop()


def _spread(gw: Gateway, engines: list[Engine], send: Any, n: int = 8) -> list[int]:
    before = [_received(e) for e in engines]
    assert [send(i) for i in range(n)] == [200] * n
    return [_received(e) - b for e, b in zip(engines, before, strict=True)]


def test_requests_sharing_a_long_prefix_land_on_one_replica_with_prefix_affinity(
    engines: list[Engine], gateway_factory: Any
) -> None:
    gw = gateway_factory(engines, prefix_affinity=True)
    spread = _spread(gw, engines, lambda i: _chat(gw, f"question {i}", system=SYSTEM))
    assert sorted(spread) == [0, 8]


def test_without_prefix_affinity_the_same_requests_spread_over_both_replicas(
    engines: list[Engine], gateway_factory: Any
) -> None:
    gw = gateway_factory(engines)
    spread = _spread(gw, engines, lambda i: _chat(gw, f"question {i}", system=SYSTEM))
    assert min(spread) > 0 and sum(spread) == 8


def test_requests_of_one_session_stay_on_one_replica(
    engines: list[Engine], gateway_factory: Any
) -> None:
    gw = gateway_factory(engines)
    spread = _spread(gw, engines, lambda i: _chat(gw, f"turn {i}", session="user-42"))
    assert sorted(spread) == [0, 8]


def test_the_admin_api_shows_each_replicas_engine_load(
    engines: list[Engine], gateway_factory: Any
) -> None:
    gw = gateway_factory(engines)
    assert _chat(gw, "hello") == 200
    # A scrape that ran while the request was on its engine shows it running (CI met one):
    # wait for scrapes that show both engines idle again.
    wait_for(
        lambda: all(
            r["scrape_age_s"] is not None and r["engine_running"] == 0 for r in _replicas(gw)
        ),
        "a scrape of both engines idle",
    )
    replicas = _replicas(gw)
    assert [r["address"] for r in replicas] == [e.url for e in engines]
    assert all(r["state"] == "ready" and r["engine"] == "vllm" for r in replicas)
    assert all(r["kv_cache_usage"] is not None for r in replicas)
    assert sum(r["served"] for r in replicas) == 1
    assert gw.admin("GET", "/admin/pools/nope").status_code == 404


def test_a_drained_replica_takes_no_new_requests_until_it_is_uncordoned(
    engines: list[Engine], gateway_factory: Any
) -> None:
    gw = gateway_factory(engines)
    first, second = engines
    wait_for(lambda: all(r["scrape_age_s"] is not None for r in _replicas(gw)), "a scrape")
    drained = gw.admin("POST", f"/admin/pools/{POOL}/replicas/drain?address={first.url}&wait=true")
    assert drained.status_code == 200, drained.text
    assert drained.json()["drained"] is True
    before = _received(first), _received(second)
    assert all(_chat(gw, f"after the drain {n}") == 200 for n in range(10))
    assert _received(first) == before[0]  # not one request on the drained replica
    assert _received(second) == before[1] + 10
    states = {r["address"]: r["state"] for r in _replicas(gw)}
    assert states[first.url] == "drained"
    back = gw.admin("POST", f"/admin/pools/{POOL}/replicas/uncordon?address={first.url}")
    assert back.status_code == 200 and back.json()["state"] == "ready"
    assert all(_chat(gw, f"after uncordon {n}") == 200 for n in range(10))
    assert _received(first) > before[0]


def test_draining_an_unknown_replica_is_a_404_naming_the_known_ones(
    engines: list[Engine], gateway_factory: Any
) -> None:
    gw = gateway_factory(engines)
    reply = gw.admin("POST", f"/admin/pools/{POOL}/replicas/drain?address=http://10.9.9.9:1")
    assert reply.status_code == 404
    assert engines[0].url in reply.json()["error"]["message"]
