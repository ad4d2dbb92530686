"""The JSON access log of a real gateway process: one line per request with its
fields, and no prompt text or key material in any line it writes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.conftest import CHAT, Fleet, start_fleet
from tests.gateway.harness import ADMIN_TOKEN, API_KEY, Gateway, unique_prefix, wait_for

ACCESS = "skyroute.access"
# Not shaped like an ``sk-`` key, so the formatter's masking cannot hide a leak of it.
WRONG_KEY = f"wrongkey{uuid.uuid4().hex}"
WAIT_S = 10.0
# The requests that each write one access line: routed ones, and ones refused before routing.
ROUTED = ("plain", "stream", "failover")
REFUSED = ("unknown_model", "too_many_tokens")


@dataclass
class Sent:
    """What the module sent, by role: request ids and the responses."""

    prompt: str
    responses: dict[str, httpx.Response] = field(default_factory=dict)
    request_ids: dict[str, str] = field(default_factory=dict)


@dataclass
class Logged:
    gateway: Gateway
    sent: Sent

    def text(self) -> str:
        return self.gateway.logs()

    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.text().splitlines() if line.startswith("{")]

    def access(self, role: str) -> list[dict[str, Any]]:
        rid = self.sent.request_ids[role]
        return [
            line
            for line in self.lines()
            if line.get("logger") == ACCESS and line.get("request_id") == rid
        ]


def _post(gw: Gateway, body: dict[str, Any], request_id: str, key: str = API_KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "x-request-id": request_id}
    with httpx.Client(timeout=30) as client:
        return client.post(f"{gw.base}/v1/chat/completions", json=body, headers=headers)


def _send_all(fleet: Fleet, gw: Gateway, sent: Sent) -> None:
    messages = [{"role": "user", "content": sent.prompt}]
    plain = {"model": CHAT, "messages": messages, "max_tokens": 6}
    bodies = {
        "plain": plain,
        "stream": {**plain, "stream": True, "stream_options": {"include_usage": True}},
        "failover": plain,
        "unknown_model": {**plain, "model": "no-such-model"},
        "too_many_tokens": {**plain, "max_tokens": 10**7},
        "wrong_key": plain,
    }
    for role, body in bodies.items():
        if role == "failover":
            _send_failover(fleet, gw, sent, body)
            continue
        rid = f"{role}-{uuid.uuid4().hex}"
        sent.request_ids[role] = rid
        key = WRONG_KEY if role == "wrong_key" else API_KEY
        sent.responses[role] = _post(gw, body, rid, key)
    # The admin credential is used too, so that its paths would show a leak.
    assert gw.admin("GET", "/metrics").status_code == 200
    assert gw.admin("GET", "/admin/pools").status_code == 200


def _send_failover(fleet: Fleet, gw: Gateway, sent: Sent, body: dict[str, Any]) -> None:
    """A request that fails on the cheap pool and is answered by the next one. The router
    tries the cheap pool first unless it measured it slow (a loaded machine can make the
    first requests slow): then it goes straight to the next pool and there is no failover
    to log. So a request that was not failed over is sent again until one is, which it
    is once the measurement has expired (``measurement_ttl_s``, 2 s)."""

    def failed_over() -> bool:
        rid = f"failover-{uuid.uuid4().hex}"
        sent.request_ids["failover"] = rid
        sent.responses["failover"] = _post(gw, body, rid)
        return sent.responses["failover"].headers.get("x-skyroute-attempts") == "2"

    fleet.engines["cheap"].set_faults(fail_rate=1.0, fail_status=503)
    try:
        wait_for(failed_over, "a request failed over from the cheap pool", WAIT_S)
    finally:
        fleet.engines["cheap"].set_faults()


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Logged]:
    """One gateway (JSON logs at INFO), sent a fixed set of requests once."""
    fleet = start_fleet(tmp_path_factory.mktemp("access-log"))
    try:
        gw = Gateway(fleet.policy_path, redis_url, unique_prefix()).start()
        try:
            sent = Sent(prompt=f"distinctive-prompt-{uuid.uuid4().hex}-aardvark")
            _send_all(fleet, gw, sent)
            result = Logged(gw, sent)
            # Access lines are written in batches (up to 0.25 s late: skyroute.logs), so
            # wait for every request's own line, the refused ones' too: a batch that
            # holds the routed lines may be written before the refusals are logged.
            deadline = time.monotonic() + WAIT_S
            while (
                not all(result.access(r) for r in ROUTED + REFUSED) and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            yield result
        finally:
            gw.stop()
    finally:
        fleet.stop()


def test_requests_get_their_expected_answers(logged: Logged) -> None:
    statuses = {role: r.status_code for role, r in logged.sent.responses.items()}
    assert statuses == {"plain": 200, "stream": 200, "failover": 200, "unknown_model": 404,
                        "too_many_tokens": 400, "wrong_key": 401}  # fmt: skip


@pytest.mark.parametrize("role", ROUTED)
def test_routed_request_writes_exactly_one_access_line(logged: Logged, role: str) -> None:
    assert len(logged.access(role)) == 1


def test_access_line_has_request_tenant_model_pool_status_tokens_cost_and_latency(
    logged: Logged,
) -> None:
    (line,) = logged.access("plain")
    resp = logged.sent.responses["plain"]
    usage = resp.json()["usage"]
    assert line["level"] == "INFO"
    assert line["request_id"] == logged.sent.request_ids["plain"]
    assert line["tenant"] == "default"
    assert line["model"] == CHAT
    assert line["pool"] == resp.headers["x-skyroute-pool"]
    assert line["status"] == "ok"
    assert line["prompt_tokens"] == usage["prompt_tokens"]
    assert line["completion_tokens"] == usage["completion_tokens"]
    assert line["cost_usd"] == pytest.approx(float(resp.headers["x-skyroute-cost-usd"]), abs=1e-8)
    assert line["latency_ms"] > 0


def test_streamed_request_line_has_ttft_and_streamed_tokens(logged: Logged) -> None:
    (line,) = logged.access("stream")
    assert line["status"] == "ok"
    assert line["completion_tokens"] == 6
    assert 0 < line["ttft_ms"] <= line["latency_ms"]


def test_failed_over_request_line_names_the_pool_that_answered(logged: Logged) -> None:
    (line,) = logged.access("failover")
    assert line["pool"] == logged.sent.responses["failover"].headers["x-skyroute-pool"]
    assert line["pool"] == "aws:us-east-1:mid"
    assert line["attempts"] == 2


@pytest.mark.parametrize("role", REFUSED)
def test_request_refused_before_routing_writes_one_access_line(logged: Logged, role: str) -> None:
    assert len(logged.access(role)) == 1


def test_every_log_line_is_one_json_object(logged: Logged) -> None:
    for line in logged.text().splitlines():
        assert isinstance(orjson.loads(line), dict), line


def test_no_log_line_contains_the_prompt_text(logged: Logged) -> None:
    assert logged.sent.prompt not in logged.text()
    assert "aardvark" not in logged.text()


@pytest.mark.parametrize(
    "secret",
    [API_KEY, ADMIN_TOKEN, WRONG_KEY],
    ids=["api-key", "admin-token", "rejected-key"],
)
def test_no_log_line_contains_key_material(logged: Logged, secret: str) -> None:
    assert secret not in logged.text()
