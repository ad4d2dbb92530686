"""A stale cached verdict is re-checked in Redis once, whatever the number of requests
that arrive meanwhile: they wait for that one answer (admitted, or refused if the key
was revoked), and a waiter whose client leaves does not cancel it for the others."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from base.auth_digest import digest_hex
from base.errors import AuthenticationError
from gateway.access import FRESH_S, AccessControl
from live.access_table import AccessTables, Admission, KeyRecord
from router.policy import TenantSpec
from router.policy_loader import parse_policy
from tests.aio import run_async
from tests.live import conftest as live_fixtures
from tests.live.conftest import RedisTarget

POLICY = parse_policy((Path(__file__).parents[1] / "fixtures" / "router_policy.yaml").read_text())
KEY = digest_hex("sk-free")
# The live-table tests' fixture: a real Redis and a key prefix of the test's own.
live_redis = live_fixtures.live_redis


class HeldTables(AccessTables):
    """The real tables, counting admissions in Redis; while ``hold`` is clear, an
    admission waits for it once it has its answer (so that others arrive meanwhile)."""

    def __init__(self, target: RedisTarget) -> None:
        super().__init__(target.client(), prefix=target.prefix)
        self.admissions = 0
        self.hold = asyncio.Event()
        self.hold.set()
        self.waiting = asyncio.Event()

    async def admit(self, digest_hex: str, now_s: float, est_tokens: int) -> Admission:
        self.admissions += 1
        verdict = await super().admit(digest_hex, now_s, est_tokens)
        self.waiting.set()
        await self.hold.wait()
        return verdict


@asynccontextmanager
async def admitted_once(
    target: RedisTarget,
) -> AsyncIterator[tuple[AccessControl, HeldTables, list[float]]]:
    """Access control over tenant ``free`` (no limits: verdicts are cached) with one key,
    admitted once; the list holds the clock's time, which the test moves."""
    tables = HeldTables(target)
    now = [time.time()]
    await tables.put_tenant("free", TenantSpec())
    await tables.store_key(KEY, KeyRecord("key_free", "free", "ci", now[0], 0.0, False))
    access = AccessControl(tables, POLICY, None, clock=lambda: now[0])
    try:
        await access.refresh()
        assert (await access.admit(KEY, 1)).tenant == "free"
        assert tables.admissions == 1
        yield access, tables, now
    finally:
        await tables.redis.aclose()


async def stale_burst(
    access: AccessControl, tables: HeldTables, n: int
) -> list[asyncio.Task[object]]:
    """``n`` admissions of the key once its verdict is stale, the re-check then held
    once Redis has answered it. All ``n`` start before Redis can answer anything (an
    answer needs the event loop's I/O poll, which comes after every task ready to run
    has taken its first step), so the first starts the re-check and the others join it."""
    tables.hold.clear()
    tables.waiting.clear()
    tasks: list[asyncio.Task[object]] = [
        asyncio.ensure_future(access.admit(KEY, 1)) for _ in range(n)
    ]
    await tables.waiting.wait()
    return tasks


@run_async
async def test_requests_during_a_recheck_wait_for_it_instead_of_asking_redis(
    live_redis: RedisTarget,
) -> None:
    async with admitted_once(live_redis) as (access, tables, now):
        now[0] += FRESH_S / 2
        assert (await access.admit(KEY, 1)).key_id == "key_free"
        assert tables.admissions == 1  # fresh: no round trip at all
        now[0] += FRESH_S
        tasks = await stale_burst(access, tables, 20)
        tables.hold.set()
        callers = await asyncio.gather(*tasks)
        assert {c.key_id for c in callers} == {"key_free"}  # type: ignore[attr-defined]
        assert tables.admissions == 2
        # The answer is cached again: fresh for FRESH_S from the re-check.
        await access.admit(KEY, 1)
        assert tables.admissions == 2


@run_async
async def test_a_key_revoked_meanwhile_is_refused_to_every_waiter(live_redis: RedisTarget) -> None:
    async with admitted_once(live_redis) as (access, tables, now):
        assert await tables.revoke_key("key_free")
        now[0] += FRESH_S
        tasks = await stale_burst(access, tables, 5)
        tables.hold.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, AuthenticationError) for r in results), results
        assert tables.admissions == 2


@run_async
async def test_a_waiter_cancelled_leaves_the_recheck_to_the_others(live_redis: RedisTarget) -> None:
    async with admitted_once(live_redis) as (access, tables, now):
        now[0] += FRESH_S
        first, *others = await stale_burst(access, tables, 3)
        first.cancel()  # the request that started the re-check: its client left
        with pytest.raises(asyncio.CancelledError):
            await first
        tables.hold.set()
        assert [c.tenant for c in await asyncio.gather(*others)] == ["free", "free"]  # type: ignore[attr-defined]
        assert tables.admissions == 2
