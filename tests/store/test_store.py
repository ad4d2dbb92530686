"""The store's tenants, keys and ledger on every backend."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from base.errors import StoreError
from live.usage_rollups import period_ids
from router.policy import TenantSpec
from store.migrate import migrate
from store.records import LedgerRow, StoredKey
from store.store import Store
from tests.aio import run_async

TS_MS = 1_764_000_000_000


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[Store]:
    await migrate(url)
    store = Store.open(url)
    try:
        yield store
    finally:
        await store.close()


def row(n: int, tenant: str = "acme", cost: int = 1000, ts_ms: int = TS_MS) -> LedgerRow:
    return LedgerRow(
        f"{n}-0/req{n}", f"req{n}", tenant, "m", "aws:us-east-1:p", "aws", "us-east-1",
        10, 5, cost, "ok", ts_ms,
    )  # fmt: skip


@run_async
async def test_a_tenant_put_deleted_and_put_again_round_trips(db_url: str) -> None:
    async with opened(db_url) as store:
        spec = TenantSpec(rpm=10, budget_usd=2.5)
        await store.put_tenant("acme", spec, now_ms=1)
        assert await store.delete_tenant("acme", now_ms=2)
        assert not await store.delete_tenant("acme", now_ms=3)
        [gone] = await store.tenants()
        assert gone.deleted and gone.spec == spec and gone.updated_ms == 2
        await store.put_tenant("acme", TenantSpec(rpm=20), now_ms=4)
        [back] = await store.tenants()
        assert not back.deleted and back.spec.rpm == 20


@run_async
async def test_a_revocation_keeps_its_first_time_and_unknown_keys_say_so(db_url: str) -> None:
    async with opened(db_url) as store:
        key = StoredKey("key_1", "acme", "ab" * 32, "ci", created_ms=5, expires_ms=None)
        await store.add_key(key)
        await store.add_key(key)
        assert await store.revoke_key("key_1", now_ms=7)
        assert await store.revoke_key("key_1", now_ms=9)
        assert not await store.revoke_key("key_2", now_ms=9)
        assert await store.keys("acme") == [StoredKey("key_1", "acme", "ab" * 32, "ci", 5, None, 7)]


@run_async
async def test_writing_a_batch_twice_stores_and_spends_it_once(db_url: str) -> None:
    async with opened(db_url) as store:
        batch = [row(1), row(2, cost=2000), row(3, tenant="other")]
        assert len(await store.ledger.write(batch)) == 3
        assert await store.ledger.write([*batch, row(4)]) == [row(4)]
        assert await store.ledger.count() == 4
        hour, day, month = period_ids(TS_MS / 1000)
        spent = await store.ledger.spend([hour, day, month])
        assert spent[("acme", hour)] == spent[("acme", month)] == 4000
        assert spent[("other", day)] == 1000
        totals = await store.ledger.totals("acme", TS_MS, TS_MS + 1, "total")
        assert totals == {
            "all": {"requests": 3, "prompt_tokens": 30, "completion_tokens": 15, "cost_nusd": 4000}
        }
        by_pool = await store.ledger.totals("acme", TS_MS, TS_MS + 1, "pool")
        assert list(by_pool) == ["aws:us-east-1:p"]
        assert await store.ledger.totals("acme", 0, TS_MS, "total") == {}


@run_async
async def test_a_row_given_twice_in_a_batch_is_stored_and_spent_once(db_url: str) -> None:
    async with opened(db_url) as store:
        assert await store.ledger.write([row(1), row(2), row(1)]) == [row(1), row(2)]
        assert await store.ledger.count() == 2
        hour, _, _ = period_ids(TS_MS / 1000)
        assert (await store.ledger.spend([hour]))[("acme", hour)] == 2000


@run_async
async def test_rows_another_writer_stores_meanwhile_fail_the_batch_and_commit_nothing(
    db_url: str,
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip(
            "SQLite only: PostgreSQL's INSERT ... RETURNING names the rows it inserted, "
            "so there is no count check for another writer to break"
        )
    async with opened(db_url) as store:
        # A trigger plays the other writer: storing row 1 stores row 2 as well, after
        # the batch has looked its ids up and found neither.
        async with store.db.transaction() as conn:
            await conn.execute(
                "CREATE TRIGGER other_writer AFTER INSERT ON usage_ledger"
                " WHEN NEW.request_id = 'req1' BEGIN"
                " INSERT INTO usage_ledger (idempotency_id, request_id, tenant, model, pool,"
                " provider, region, prompt_tokens, completion_tokens, cost_nusd, status, ts_ms)"
                f" VALUES ('2-0/req2', 'req2', 'acme', 'm', 'p', 'aws', 'r', 1, 1, 1, 'ok', {TS_MS});"
                " END"
            )
        with pytest.raises(StoreError, match="another writer"):
            await store.ledger.write([row(1), row(2)])
        assert await store.ledger.count() == 0
        assert await store.ledger.spend(period_ids(TS_MS / 1000)) == {}
        async with store.db.transaction() as conn:
            await conn.execute("DROP TRIGGER other_writer")
        assert await store.ledger.write([row(1), row(2)]) == [row(1), row(2)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@run_async
async def test_an_unreachable_database_raises_store_error() -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{_closed_port()}/none"
    with pytest.raises(StoreError):
        await migrate(url)


def test_an_unsupported_url_is_refused() -> None:
    with pytest.raises(StoreError, match="unsupported"):
        Store.open("mysql+aiomysql://root@127.0.0.1/x")
