"""Drain a pool under load: no new request reaches it, the in-flight ones finish, and
the drain reports completion."""

from __future__ import annotations

import re
import time

import httpx

from tests.figures import report
from tests.gateway.conftest import Fleet
from tests.gateway.faults.conftest import CHAT_BODY, pool_state
from tests.gateway.faults.loadgen import Load
from tests.gateway.harness import Engine, Gateway, unique_prefix

CHEAP = "gcp:us-central1:cheap"


def _received(engine: Engine) -> int:
    text = httpx.get(f"{engine.url}/metrics").text
    match = re.search(r"^sim:requests_received_total\{[^}]*\} (\d+)", text, re.MULTILINE)
    assert match, text[:500]
    return int(match.group(1))


def test_drain_under_load_stops_new_requests_and_reports_completion(
    fast_fleet: Fleet, redis_url: str
) -> None:
    gw = Gateway(fast_fleet.policy_path, redis_url, unique_prefix()).start()
    cheap = fast_fleet.engines["cheap"]
    body = {**CHAT_BODY, "max_tokens": 16}  # about half a second each, so some are in flight
    try:
        with Load(f"{gw.base}/v1/chat/completions", body, workers=8, max_s=30) as load:
            time.sleep(1.5)
            before = _received(cheap)
            reply = gw.admin("POST", f"/admin/pools/{CHEAP}/drain?wait=true&deadline_s=10").json()
            after_drain = _received(cheap)
            time.sleep(2.0)
            later = _received(cheap)
            result = load.stop()
        state = pool_state(gw, CHEAP)
        report(
            f"drain under load: {result.sent} requests, {len(result.failures)} failed; drain reported "
            f"drained={reply['drained']} after {reply['waited_s']:.2f}s; cheap pool got {before} requests before, "
            f"{after_drain - before} during the drain call, {later - after_drain} after it"
        )
        assert result.failures == []
        assert before > 0
        assert reply["drained"] is True
        assert later == after_drain, "a drained pool received new requests"
        assert state["state"] == "draining" and state["inflight"] == 0

        uncordoned = gw.admin("POST", f"/admin/pools/{CHEAP}/uncordon").json()
        assert uncordoned["state"] == "healthy"
    finally:
        gw.stop()
