"""Fixtures and helpers for the tenant, key, limit and usage tests: one fleet of real
simulated engines and one pair of gateway replicas on a shared Redis prefix for the
whole package (tests keep apart by using tenants of their own), replicas of their own
for tests that need a special policy or stop them, and helpers that go through the
admin API as an operator would."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from redis.asyncio import Redis

from live.access_table import AccessTables
from tests.gateway.conftest import CHAT, Fleet, fleet_policy, start_fleet
from tests.gateway.harness import ADMIN_TOKEN, Gateway, unique_prefix, write_policy

# Engines run at a tenth of real time: these tests are about who may call, not latency.
TIME_SCALE = 0.1
# Replicas stop at once on SIGTERM: no load balancer waits for them to leave.
NO_DRAIN_DELAY = {"SKYROUTE_DRAIN_DELAY_S": "0"}


def tenant_name(label: str) -> str:
    """A tenant name no other test uses."""
    return f"{label}-{uuid.uuid4().hex[:8]}"


def chat_body(**over: Any) -> dict[str, Any]:
    return {"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **over}


@pytest.fixture(scope="package")
def access_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """The three chat pools and the embedding pool of ``tests.gateway.conftest``."""
    fleet = start_fleet(tmp_path_factory.mktemp("access-fleet"), time_scale=TIME_SCALE)
    try:
        yield fleet
    finally:
        fleet.stop()


def access_policy(fleet: Fleet, tenants: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fleet's policy, with ``tenants`` declared in it."""
    doc: dict[str, Any] = fleet_policy(fleet.engines)
    doc["tenants"] = tenants or {}
    return doc


@contextmanager
def replicas(
    tmp: Path, doc: dict[str, Any], redis_url: str, n: int, **extra_env: str
) -> Iterator[list[Gateway]]:
    """``n`` gateway replicas of the policy ``doc`` sharing one fresh Redis prefix.
    They stop without the load-balancer drain delay unless ``extra_env`` sets one."""
    policy = write_policy(tmp / "policy.yaml", doc)
    prefix = unique_prefix()
    env = {**NO_DRAIN_DELAY, **extra_env}
    started: list[Gateway] = []
    try:
        for _ in range(n):
            started.append(Gateway(policy, redis_url, prefix, extra_env=env).start())
        yield started
    finally:
        for gw in started:
            gw.stop()


@pytest.fixture(scope="package")
def pair(
    access_fleet: Fleet, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Gateway]]:
    """Two replicas of the plain fleet policy on one Redis prefix of their own, shared by
    the package's tests (each works with tenants of its own)."""
    with replicas(
        tmp_path_factory.mktemp("pair"), access_policy(access_fleet), redis_url, 2
    ) as gws:
        yield gws


def admin(
    gw: Gateway, method: str, path: str, body: Any = None, token: str = ADMIN_TOKEN
) -> httpx.Response:
    """One admin API call with a JSON body, as ``token``."""
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.request(method, f"{gw.base}{path}", json=body, headers=headers, timeout=10)


def put_tenant(gateways: list[Gateway], name: str, **spec: Any) -> dict[str, Any]:
    """Create a tenant through the first replica's admin API and wait (≤ 5 s) until
    every replica has it in effect. Returns the spec as the gateway stored it."""
    reply = admin(gateways[0], "PUT", f"/admin/tenants/{name}", spec)
    assert reply.status_code == 200, reply.text
    stored: dict[str, Any] = reply.json()
    stored.pop("tenant")
    deadline = time.monotonic() + 5
    pending = list(gateways)
    while pending and time.monotonic() < deadline:
        pending = [
            gw for gw in pending if gw.admin("GET", "/admin/tenants").json().get(name) != stored
        ]
        if pending:
            time.sleep(0.05)
    assert not pending, f"tenant {name} not in effect on {[gw.base for gw in pending]}"
    return stored


def create_key(gw: Gateway, tenant: str, **body: Any) -> dict[str, Any]:
    """A new API key for ``tenant`` (the only reply that carries its secret)."""
    reply = admin(gw, "POST", "/admin/keys", {"tenant": tenant, **body})
    assert reply.status_code == 201, reply.text
    return reply.json()  # type: ignore[no-any-return]


def post_chat(gw: Gateway, key: str | None, **over: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.post(
        f"{gw.base}/v1/chat/completions", json=chat_body(**over), headers=headers, timeout=30
    )


@contextmanager
def openai_client(gw: Gateway, key: str) -> Iterator[openai.OpenAI]:
    """The official client on ``gw`` with ``key``; no retries, so every status shows."""
    client = openai.OpenAI(base_url=f"{gw.base}/v1", api_key=key, max_retries=0, timeout=30)
    try:
        yield client
    finally:
        client.close()


def usage_records(redis_url: str, prefix: str, tenant: str) -> list[dict[str, str]]:
    """The per-request usage records of ``tenant`` in the stream, oldest first."""

    async def read() -> list[dict[str, str]]:
        redis = Redis.from_url(redis_url)
        try:
            records = await AccessTables(redis, prefix=prefix).usage_records()
        finally:
            await redis.aclose()
        return [r for r in records if r["tenant"] == tenant]

    return asyncio.run(read())


def wait_for_records(
    redis_url: str, prefix: str, tenant: str, want: int, timeout_s: float = 10.0
) -> list[dict[str, str]]:
    """The tenant's records once at least ``want`` are in Redis (or at the timeout),
    read once more a few flush intervals later so that extra records would show."""
    deadline = time.monotonic() + timeout_s
    while len(usage_records(redis_url, prefix, tenant)) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    return usage_records(redis_url, prefix, tenant)
