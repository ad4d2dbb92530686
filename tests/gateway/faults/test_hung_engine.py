"""An engine that hangs (SIGSTOP) under load: requests routed to it fail over after an
SLO-derived deadline (about 2 x the 800 ms TTFT target), not after a 60 s constant, and
no client sees a failure. A long non-streaming request still completes."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import yaml

from tests.figures import report
from tests.gateway.conftest import Fleet
from tests.gateway.faults.conftest import CHAT_BODY
from tests.gateway.harness import API_KEY, Gateway, unique_prefix, write_policy


def _timed(client: httpx.Client, url: str, stream: bool) -> tuple[float, int, bytes]:
    started = time.monotonic()
    with client.stream("POST", url, json={**CHAT_BODY, "stream": stream}) as reply:
        body = reply.read()
    return time.monotonic() - started, reply.status_code, body


@contextmanager
def _cheap_engine_hung(
    fleet: Fleet, redis_url: str, edit: Callable[[dict[str, Any]], None] | None = None
) -> Iterator[tuple[Gateway, httpx.Client, str]]:
    """A gateway over ``fleet`` (its policy changed by ``edit`` first) whose cheap pool
    has served one request, and whose engine then hangs (SIGSTOP). Yields the gateway, a
    client with the API key and the chat URL; resumes the engine and stops the gateway
    on exit."""
    if edit is not None:
        doc = yaml.safe_load(fleet.policy_path.read_text())
        edit(doc)
        write_policy(fleet.policy_path, doc)
    gw = Gateway(fleet.policy_path, redis_url, unique_prefix()).start()
    cheap = fleet.engines["cheap"]
    assert cheap.proc is not None
    url = f"{gw.base}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    try:
        with httpx.Client(headers=headers, timeout=200) as client:
            assert _timed(client, url, stream=False)[1] == 200  # warm: the cheap pool serves
            os.kill(cheap.proc.pid, signal.SIGSTOP)
            yield gw, client, url
    finally:
        os.kill(cheap.proc.pid, signal.SIGCONT)
        gw.stop()


def test_a_hung_engine_costs_a_client_one_deadline_and_no_failure(
    fast_fleet: Fleet, redis_url: str
) -> None:
    # The cheapest pool's engine hangs: requests go there until it is taken out.
    with _cheap_engine_hung(fast_fleet, redis_url) as (_, client, url):
        for stream in (False, True, False, True):
            waited, status, body = _timed(client, url, stream)
            report(f"hung engine ({'stream' if stream else 'unary'}): {status} "
                   f"after {waited:.2f}s (deadline ~1.6-1.9s + one failover)")  # fmt: skip
            assert status == 200 and (not stream or b"data: [DONE]" in body)
            # Under the old 60 s first-byte constant this waited a minute.
            assert waited < 10.0


@pytest.mark.parametrize("found_by", ["probes", "deadlines"])
def test_requests_waiting_on_an_engine_found_hung_fail_over_when_it_is_taken_out(
    fast_fleet: Fleet, redis_url: str, found_by: str
) -> None:
    # A batch-class request for 100 tokens may wait 2 x (30 s + 100 x 500 ms) = 160 s
    # for its whole answer. Sent to the cheap pool as its engine hangs, it would sit that
    # out. What takes the pool out fails it over at once instead: the probes (every
    # 0.2 s here), or, with probes too rare to notice, the short interactive requests
    # after it, whose ~1.7 s deadlines pass (two in a row eject the pool).

    def rare_probes(doc: dict[str, Any]) -> None:
        doc["health"]["probe_interval_s"] = 600.0

    edit = rare_probes if found_by == "deadlines" else None
    with (
        _cheap_engine_hung(fast_fleet, redis_url, edit) as (gw, client, url),
        ThreadPoolExecutor(1) as bg,
    ):
        started = time.monotonic()
        long_one = bg.submit(
            client.post, url, json={**CHAT_BODY, "max_tokens": 100},
            headers={"x-skyroute-slo": "batch"},
        )  # fmt: skip
        for _ in range(4):
            assert _timed(client, url, stream=False)[1] == 200
            if long_one.done():
                break
        # Far short of the 160 s it would otherwise wait (the answer takes ~3 s).
        reply = long_one.result(timeout=60)
        waited = time.monotonic() - started
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-skyroute-attempts"] == "2"
    assert reply.headers["x-skyroute-pool"] != "gcp:us-central1:cheap"
    assert "failed over at once" in gw.logs()
    report(f"hung engine found by {found_by}: a request waiting on it failed over "
           f"{waited:.1f} s after the hang (its own deadline: 160 s)")  # fmt: skip


def test_a_long_valid_request_is_never_a_pool_failure(fast_fleet: Fleet, redis_url: str) -> None:
    # A first-byte cap far below the ~6 s this answer takes: a non-streaming answer
    # comes whole after its last token, so its deadline scales with the tokens asked
    # for and the cap (for streams) does not apply.
    doc = yaml.safe_load(fast_fleet.policy_path.read_text())
    doc["routing"]["first_byte_timeout_ms"] = 2000
    write_policy(fast_fleet.policy_path, doc)
    gw = Gateway(fast_fleet.policy_path, redis_url, unique_prefix()).start()
    try:
        reply = httpx.post(
            f"{gw.base}/v1/chat/completions",
            json={**CHAT_BODY, "max_tokens": 200, "min_tokens": 200},
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 200
        assert reply.headers["x-skyroute-attempts"] == "1"
    finally:
        gw.stop()


def test_with_hedging_a_hung_engine_is_raced_not_waited_out(
    fast_fleet: Fleet, redis_url: str
) -> None:
    # The interactive class hedges: a request to the hung engine gets a second attempt
    # after the TTFT target (800 ms) instead of failing over at the ~2 s deadline, and
    # the hung pool's silence raises its predicted TTFT so the next requests avoid it.

    def hedged(doc: dict[str, Any]) -> None:
        doc["slo_classes"]["interactive"]["hedge"] = True

    with _cheap_engine_hung(fast_fleet, redis_url, hedged) as (gw, client, url):
        pools = []
        for stream in (False, True, False, True):
            reply = client.post(url, json={**CHAT_BODY, "stream": stream})
            assert reply.status_code == 200, reply.text
            assert not stream or b"data: [DONE]" in reply.content
            pools.append(reply.headers["x-skyroute-pool"])
        metrics = gw.admin("GET", "/metrics").text
    assert "gcp:us-central1:cheap" not in pools
    hedges = [line for line in metrics.splitlines() if line.startswith("skyroute_hedges_total{")]
    assert hedges and float(hedges[0].split()[-1]) >= 1, metrics[-500:]
