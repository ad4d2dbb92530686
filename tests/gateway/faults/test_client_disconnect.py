"""A client that goes away: while the answer is generated (the upstream attempt is
closed, never failed over, and logged at INFO), or halfway through sending its body (no
500, no traceback)."""

from __future__ import annotations

import json
import socket

from tests.gateway.conftest import CHAT, Fleet
from tests.gateway.harness import API_KEY, Gateway, running, unique_prefix, wait_for


def _raw(port: int, body: bytes, declared: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


def test_a_client_gone_during_generation_cancels_the_attempt_without_failover(
    fleet: Fleet, redis_url: str
) -> None:
    gw = Gateway(fleet.policy_path, redis_url, unique_prefix()).start()
    try:
        # ~200 tokens at the engine's real pace: seconds of generation to walk away from.
        body = json.dumps({"model": CHAT, "max_tokens": 200,
                           "messages": [{"role": "user", "content": "long"}]}).encode()  # fmt: skip
        sock = _raw(gw.port, body, len(body))
        wait_for(lambda: running(fleet.engines.values()) > 0, "the request to reach an engine")
        sock.close()
        wait_for(lambda: "client disconnected before the answer" in gw.logs(), "the INFO line")
        logs = gw.logs()
        assert '"level":"ERROR"' not in logs and "Traceback" not in logs
        assert "attempt 1 on pool" not in logs  # never treated as a pool failure
    finally:
        gw.stop()


def test_a_client_gone_mid_body_is_an_info_line_not_a_500(fleet: Fleet, redis_url: str) -> None:
    gw = Gateway(fleet.policy_path, redis_url, unique_prefix()).start()
    try:
        sock = _raw(gw.port, b'{"model": "chat', 1000)  # promises 1000 bytes, sends 15
        sock.close()
        wait_for(lambda: "client disconnected before the answer" in gw.logs(), "the INFO line")
        assert '"level":"ERROR"' not in gw.logs() and "Traceback" not in gw.logs()
    finally:
        gw.stop()
