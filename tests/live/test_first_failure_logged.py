"""The first Redis failure of admission is logged with its cause, and only the first of a
run of them (a gateway pointed at a wrong or unreachable Redis must say why it answers
503, without a log line per request)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from base.auth_digest import digest_hex
from base.errors import TableError
from gateway.access import AccessControl
from live.access_table import AccessTables
from live.redis_client import connect
from router.policy_loader import parse_policy
from skyroute.embedded_redis import free_port
from tests.aio import run_async

POLICY = parse_policy((Path(__file__).parents[1] / "fixtures" / "router_policy.yaml").read_text())


@run_async
async def test_the_first_admission_failure_is_logged_with_its_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = connect(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    access = AccessControl(AccessTables(client, prefix="srtest:down"), POLICY, None)
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.access"):
            for _ in range(3):
                with pytest.raises(TableError):
                    await access.admit(digest_hex("sk-never"), 1)
    finally:
        await client.aclose()

    lines = [
        r.getMessage() for r in caplog.records if "admission in redis failed" in r.getMessage()
    ]
    assert len(lines) == 1 and "ConnectionError" in lines[0]
