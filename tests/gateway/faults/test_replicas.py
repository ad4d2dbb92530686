"""Two gateway replicas sharing one Redis agree on in-flight counts, ejections and
drains; a replica that dies with requests in flight does not leave its counts behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import yaml

from tests.figures import report
from tests.gateway.conftest import Fleet
from tests.gateway.faults.conftest import CHAT_BODY, pool_state, wait_for_state
from tests.gateway.harness import API_KEY, Gateway, unique_prefix, wait_for, write_policy

CHEAP = "gcp:us-central1:cheap"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture
def replicas(fast_fleet: Fleet, redis_url: str) -> Iterator[tuple[Gateway, Gateway]]:
    prefix = unique_prefix()
    one = Gateway(fast_fleet.policy_path, redis_url, prefix).start()
    two = Gateway(fast_fleet.policy_path, redis_url, prefix).start()
    try:
        yield one, two
    finally:
        one.stop()
        two.stop()


def _chat(gw: Gateway, **over: object) -> httpx.Response:
    return httpx.post(
        f"{gw.base}/v1/chat/completions", json={**CHAT_BODY, **over}, headers=AUTH, timeout=30
    )


def _open_streams(gw: Gateway, n: int) -> list[threading.Thread]:
    body = {**CHAT_BODY, "max_tokens": 200, "stream": True}  # ~6 s each

    def run() -> None:
        try:
            with httpx.stream(
                "POST", f"{gw.base}/v1/chat/completions", json=body, headers=AUTH, timeout=60
            ) as r:
                for _ in r.iter_lines():
                    pass
        except httpx.HTTPError:
            pass  # the replica may be killed mid-stream on purpose

    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def _routing_state(gw: Gateway, pool_id: str) -> str | None:
    """The pool's state in the gateway's routing snapshot (``skyroute_pool_state``)."""
    prefix = f'skyroute_pool_state{{pool="{pool_id}",state="'
    for line in gw.admin("GET", "/metrics").text.splitlines():
        if line.startswith(prefix) and float(line.rsplit(" ", 1)[1]) == 1.0:
            return line[len(prefix) :].split('"', 1)[0]
    return None


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.2f}s"


def _wait_inflight(gw: Gateway, want: float, timeout_s: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if pool_state(gw, CHEAP)["inflight"] == want:
            return time.monotonic() - started
        time.sleep(0.05)
    return None


def test_replicas_agree_on_in_flight_and_a_dead_replicas_share_expires(
    replicas: tuple[Gateway, Gateway],
) -> None:
    one, two = replicas
    _open_streams(one, 5)
    seen_by_two = _wait_inflight(two, 5, timeout_s=5)
    assert one.proc is not None
    one.proc.send_signal(signal.SIGKILL)  # dies with 5 requests in flight
    one.proc.wait(timeout=5)
    expired_after = _wait_inflight(two, 0, timeout_s=10)
    report(
        f"replicas: 5 streams on replica one seen as in-flight by replica two after "
        f"{_s(seen_by_two)}; after one was SIGKILLed its share expired in {_s(expired_after)} (TTL 3 s)"
    )
    assert seen_by_two is not None
    assert expired_after is not None


def test_an_ejection_seen_by_one_replica_applies_to_the_other(
    replicas: tuple[Gateway, Gateway], fast_fleet: Fleet
) -> None:
    one, two = replicas
    fast_fleet.engines["cheap"].kill()
    for _ in range(3):
        assert _chat(one).status_code == 200
    assert wait_for_state(two, CHEAP, {"ejected", "probing"}, timeout_s=5) is not None
    # The admin view reads the shared table itself; replica two routes from its snapshot,
    # refreshed every 100 ms, which /metrics shows: wait for that too.
    wait_for(
        lambda: _routing_state(two, CHEAP) in {"ejected", "probing"},
        "replica two to route around the ejected pool",
        timeout_s=5,
    )
    reply = _chat(two)
    assert reply.status_code == 200
    assert (reply.headers["x-skyroute-pool"], reply.headers["x-skyroute-attempts"]) != (CHEAP, "1")
    assert reply.headers["x-skyroute-attempts"] == "1"


def test_a_request_waiting_on_an_engine_another_replica_found_hung_fails_over(
    fast_fleet: Fleet, redis_url: str
) -> None:
    # Probes and scrapes too rare to notice: only replica one's requests find the hang
    # (two missed ~1.7 s deadlines eject the pool). Replica two has a batch-class request
    # waiting on the hung engine, which may wait 2 x (30 s + 100 x 500 ms) = 160 s for
    # its answer; seeing the shared ejection, replica two probes the engine once, finds
    # it silent and fails the request over.
    doc = yaml.safe_load(fast_fleet.policy_path.read_text())
    doc["health"].update(probe_interval_s=600.0, scrape_interval_s=600.0)
    write_policy(fast_fleet.policy_path, doc)
    prefix = unique_prefix()
    one = Gateway(fast_fleet.policy_path, redis_url, prefix).start()
    two = Gateway(fast_fleet.policy_path, redis_url, prefix).start()
    cheap = fast_fleet.engines["cheap"]
    assert cheap.proc is not None
    try:
        assert _chat(one).headers["x-skyroute-pool"] == CHEAP
        assert _chat(two).headers["x-skyroute-pool"] == CHEAP
        os.kill(cheap.proc.pid, signal.SIGSTOP)
        with ThreadPoolExecutor(1) as bg:
            waiting = bg.submit(
                httpx.post, f"{two.base}/v1/chat/completions",
                json={**CHAT_BODY, "max_tokens": 100},
                headers={**AUTH, "x-skyroute-slo": "batch"}, timeout=200,
            )  # fmt: skip
            for _ in range(4):
                assert _chat(one).status_code == 200
                if waiting.done():
                    break
            reply = waiting.result(timeout=60)  # far short of its 160 s deadline
    finally:
        os.kill(cheap.proc.pid, signal.SIGCONT)
        one.stop()
        two.stop()
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-skyroute-attempts"] == "2"
    assert "silent to this replica's probe" in two.logs()


def test_a_drain_through_one_replica_stops_traffic_on_both(
    replicas: tuple[Gateway, Gateway],
) -> None:
    one, two = replicas
    assert _chat(two).headers["x-skyroute-pool"] == CHEAP
    assert one.admin("POST", f"/admin/pools/{CHEAP}/drain").status_code == 200
    time.sleep(0.3)  # the events channel wakes replica two's refresh (bound: 250 ms)
    assert {_chat(two).headers["x-skyroute-pool"] for _ in range(10)} == {"aws:us-east-1:mid"}
