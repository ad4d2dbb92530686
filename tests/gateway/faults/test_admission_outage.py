"""A key this replica has never seen, while Redis is down: the client gets 503
``tables_unavailable``, and the access log says 503 too (it used to say 500)."""

from __future__ import annotations

import json

import httpx

from skyroute.embedded_redis import EmbeddedRedis, free_port
from tests.gateway.conftest import Fleet
from tests.gateway.faults.conftest import CHAT_BODY
from tests.gateway.harness import Gateway, unique_prefix, wait_for


def test_a_table_error_in_admission_is_logged_with_the_status_the_client_got(
    fast_fleet: Fleet,
) -> None:
    server = EmbeddedRedis()
    server.start()
    gw = Gateway(fast_fleet.policy_path, server.url, unique_prefix()).start()
    try:
        server.stop()
        wait_for(lambda: httpx.get(f"{gw.base}/readyz").json()["redis"] != "ok", "degraded")
        reply = httpx.post(
            f"{gw.base}/v1/chat/completions",
            json=CHAT_BODY,
            headers={"Authorization": "Bearer sk-never-seen-here-0123456789"},
            timeout=30,
        )
        assert reply.status_code == 503
        assert reply.json()["error"]["code"] == "tables_unavailable"

        def access_lines() -> list[dict[str, object]]:
            lines = [json.loads(ln) for ln in gw.logs().splitlines() if ln.startswith("{")]
            return [ln for ln in lines if ln.get("logger") == "skyroute.access"]

        wait_for(lambda: bool(access_lines()), "the access log line")
        (line,) = [ln for ln in access_lines() if ln.get("status") == "tables_unavailable"]
        assert line["http_status"] == 503
    finally:
        gw.stop()
        server.stop()


def test_a_gateway_started_without_redis_logs_the_first_failure_once(fast_fleet: Fleet) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    gw = Gateway(fast_fleet.policy_path, dead, unique_prefix()).start()
    try:
        assert httpx.get(f"{gw.base}/readyz").json()["redis"] == "unreachable"
        wait_for(lambda: "redis unreachable (refresh)" in gw.logs(), "the refresh loop's failure")
        logs = gw.logs()
        assert "redis unreachable (first refresh)" in logs and "TableError" in logs
        assert logs.count("redis unreachable (refresh)") == 1  # repeats are only counted
    finally:
        gw.stop()
