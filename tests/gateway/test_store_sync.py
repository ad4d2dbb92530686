"""The store opens after the gateway is ready (``gateway.store_sync``): a worker serves
without having imported SQLAlchemy, callers of the store wait for its opening, and an
admin call that outwaits it gets a 503 in OpenAI's error shape, never a wrong answer."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from base.errors import StoreError
from gateway.app import create_app
from gateway.settings import GatewaySettings
from gateway.store_sync import StoreSync
from live.access_table import AccessTables
from live.redis_client import connect
from router.policy import TenantSpec
from skyroute.demo import demo_policy_path
from tests.aio import run_async
from tests.gateway.harness import ADMIN_TOKEN, unique_prefix

ROOT = Path(__file__).resolve().parents[2]
# The path ``skyroute serve`` takes to its first request (bench_startup's child too).
SERVE_IMPORTS = """
import sys
from skyroute.cli import build_parser
build_parser("serve")
import skyroute.serve, gateway.app
print(",".join(m for m in ("sqlalchemy", "alembic", "aiosqlite", "asyncpg", "dns")
               if m in sys.modules))
"""


def test_a_serving_worker_has_not_imported_the_store_or_dnspython() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SERVE_IMPORTS],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert out.strip() == ""


async def _no_op() -> None:
    return None


@contextlib.asynccontextmanager
async def store_sync(redis_url: str, db: Path, open_wait_s: float) -> AsyncIterator[StoreSync]:
    """A StoreSync on a fresh SQLite file, under a key prefix of its own."""
    tables = AccessTables(connect(redis_url), prefix=unique_prefix())
    sync = StoreSync(f"sqlite+aiosqlite:///{db}", tables, "replica-1", _no_op,
                     open_wait_s=open_wait_s)  # fmt: skip
    try:
        yield sync
    finally:
        await sync.close()
        await tables.redis.aclose()


@run_async
async def test_the_store_is_refused_while_it_has_not_opened(redis_url: str, tmp_path: Path) -> None:
    async with store_sync(redis_url, tmp_path / "store.db", open_wait_s=0.0) as sync:
        with pytest.raises(StoreError, match="still opening"):
            await sync.store()
        assert (sync.written, sync.malformed, sync.restores, sync.migrated) == (0, 0, 0, False)


@run_async
async def test_a_caller_waiting_for_the_store_gets_it_once_it_opens(
    redis_url: str, tmp_path: Path
) -> None:
    async with store_sync(redis_url, tmp_path / "store.db", open_wait_s=120.0) as sync:
        loaded: list[bool] = []
        sync.on_loaded = lambda: loaded.append(True)
        waiter = asyncio.create_task(sync.store())
        runner = asyncio.create_task(sync.run())
        try:
            store = await waiter
            await store.put_tenant("t1", TenantSpec(rpm=5), now_ms=1)
            assert [t.name for t in await store.tenants()] == ["t1"]
            assert sync.migrated
            assert loaded == [True]
        finally:
            await sync.stop()  # as the lifespan does: never cancel a store call mid-way
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)


@run_async
async def test_a_shutdown_during_the_opening_lets_it_finish_before_closing(
    redis_url: str, tmp_path: Path
) -> None:
    async with store_sync(redis_url, tmp_path / "store.db", open_wait_s=120.0) as sync:
        runner = asyncio.create_task(sync.run())
        await asyncio.sleep(0)  # one loop step: run() has started the opening
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await sync.close()
        assert sync.migrated  # not cut off in the middle of the migration


@run_async
async def test_a_stop_ends_the_background_loops_between_steps(
    redis_url: str, tmp_path: Path
) -> None:
    async with store_sync(redis_url, tmp_path / "store.db", open_wait_s=120.0) as sync:
        runner = asyncio.create_task(sync.run())
        try:
            await sync.store()  # opened and migrated: the loops start with no more waits
            await asyncio.sleep(0)
            await sync.stop(timeout_s=60)
            assert runner.done() and not runner.cancelled()
            assert runner.exception() is None
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)


@run_async
async def test_a_stop_during_the_opening_starts_no_loops(redis_url: str, tmp_path: Path) -> None:
    async with store_sync(redis_url, tmp_path / "store.db", open_wait_s=120.0) as sync:
        runner = asyncio.create_task(sync.run())
        await asyncio.sleep(0)  # one loop step: run() has started the opening
        await sync.stop(timeout_s=60)
        assert runner.done() and not runner.cancelled()
        assert sync.migrated  # the opening was let finish, and nothing started after it
        assert sync.written == 0


def test_an_admin_call_that_outwaits_the_opening_is_a_503_in_openai_shape(
    redis_url: str,
) -> None:
    settings = GatewaySettings(
        policy=demo_policy_path(),
        redis_url=redis_url,
        redis_prefix=unique_prefix(),
        admin_token=SecretStr(ADMIN_TOKEN),
    )
    app = create_app(settings)
    # No lifespan here: nothing opens the store, as in the moments after start-up.
    app.state.gateway.store_sync.open_wait_s = 0.0
    client = TestClient(app, base_url="http://127.0.0.1")
    try:
        reply = client.put(
            "/admin/tenants/t1",
            json={"rpm": 5},
            headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
        )
    finally:
        client.close()
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["code"] == "store_unavailable"
    assert "still opening" in error["message"]
