"""AccessTables against a real Redis under a prefix of its own: admission verdicts, the
RPM/TPM token buckets and their refill, the TPM correction at the end of a request,
budget periods, and usage roll-ups that reconcile exactly with the records.

Time is passed in (``now_s``), so refills and periods are tested without sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from redis.asyncio import Redis

from base.auth_digest import digest_hex
from live.access_table import (
    NANO,
    AccessTables,
    AdmitCode,
    KeyRecord,
    UsageRecord,
)
from live.usage_rollups import period_ids
from router.policy import TenantSpec
from tests.live.conftest import RedisTarget

T = TypeVar("T")
TENANT = "acme"
SECRET = "sk-sr-unit-test-secret-0123456789"
DIGEST = digest_hex(SECRET)
# 2031-05-14 10:20:00 UTC: well inside an hour, a day and a month.
NOW = datetime(2031, 5, 14, 10, 20, tzinfo=UTC).timestamp()


def run(target: RedisTarget, body: Callable[[AccessTables, Redis], Awaitable[T]]) -> T:
    """Run ``body`` with AccessTables on the test's prefix, on a client closed after."""

    async def main() -> T:
        redis = target.client()
        try:
            return await body(AccessTables(redis, prefix=target.prefix), redis)
        finally:
            await redis.aclose()

    return asyncio.run(main())


async def setup(tables: AccessTables, *, expires_s: float = 0.0, **limits: Any) -> None:
    """One key of TENANT, whose limits are ``limits`` (TenantSpec fields)."""
    record = KeyRecord("key_1", TENANT, "unit", NOW - 60, expires_s, False)
    await tables.store_key(DIGEST, record)
    await tables.write_limits({TENANT: TenantSpec(**limits)})


def record(
    ts_s: float = NOW,
    *,
    pool: str = "gcp:us-central1:cheap",
    model: str = "chat",
    region: str = "gcp:us-central1",
    provider: str = "gcp",
    prompt: int = 10,
    completion: int = 20,
    cost_nusd: int = 1_000,
    status: str = "ok",
    est_tokens: int = 0,
    tenant: str = TENANT,
) -> UsageRecord:
    return UsageRecord(
        ts_s, f"req-{ts_s}-{pool}-{cost_nusd}", tenant, model, pool, provider, region,
        prompt, completion, cost_nusd, status, est_tokens,
    )  # fmt: skip


async def add(tables: AccessTables, redis: Redis, records: list[UsageRecord]) -> None:
    pipe = redis.pipeline(transaction=True)
    tables.add_usage(pipe, records)
    await pipe.execute()


# -- keys ---------------------------------------------------------------------------------
def test_an_unknown_key_is_refused_as_unknown(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> int:
        return (await tables.admit(DIGEST, NOW, 10)).code

    assert run(live_redis, body) == AdmitCode.UNKNOWN


def test_a_stored_key_is_admitted_with_its_tenant_and_id(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> tuple[int, str, str]:
        await setup(tables)
        verdict = await tables.admit(DIGEST, NOW, 10)
        return verdict.code, verdict.tenant, verdict.key_id

    assert run(live_redis, body) == (AdmitCode.OK, TENANT, "key_1")


def test_a_revoked_key_is_refused_as_revoked(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> int:
        await setup(tables)
        assert await tables.revoke_key("key_1")
        return (await tables.admit(DIGEST, NOW, 10)).code

    assert run(live_redis, body) == AdmitCode.REVOKED


def test_revoking_an_unknown_key_id_reports_false(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> bool:
        return await tables.revoke_key("key_missing")

    assert run(live_redis, body) is False


def test_a_key_past_its_expiry_is_refused_as_expired(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> int:
        await setup(tables, expires_s=NOW - 0.001)
        return (await tables.admit(DIGEST, NOW, 10)).code

    assert run(live_redis, body) == AdmitCode.EXPIRED


def test_a_key_before_its_expiry_is_admitted(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> int:
        await setup(tables, expires_s=NOW + 1)
        return (await tables.admit(DIGEST, NOW, 10)).code

    assert run(live_redis, body) == AdmitCode.OK


def test_listed_keys_carry_no_secret_and_no_hash(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> str:
        await setup(tables)
        return repr(await tables.list_keys(TENANT))

    listed = run(live_redis, body)
    assert "key_1" in listed
    assert (SECRET in listed, DIGEST in listed) == (False, False)


# -- RPM and TPM buckets ------------------------------------------------------------------
def test_rpm_admits_the_limit_then_refuses_with_the_wait_for_one_token(
    live_redis: RedisTarget,
) -> None:
    async def body(tables: AccessTables, _: Redis) -> list[tuple[int, float]]:
        await setup(tables, rpm=3)
        out = []
        for _n in range(4):
            verdict = await tables.admit(DIGEST, NOW, 1)
            out.append((verdict.code, verdict.retry_after_s))
        return out

    # 3 per minute: one token every 20 s.
    assert run(live_redis, body) == [(0, 0.0)] * 3 + [(AdmitCode.RPM, 20.0)]


def test_rpm_bucket_refills_at_the_limit_per_minute(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> list[int]:
        await setup(tables, rpm=3)
        for _n in range(3):
            await tables.admit(DIGEST, NOW, 1)
        return [
            (await tables.admit(DIGEST, NOW + 19.9, 1)).code,
            (await tables.admit(DIGEST, NOW + 20.0, 1)).code,
            (await tables.admit(DIGEST, NOW + 20.0, 1)).code,
        ]

    assert run(live_redis, body) == [AdmitCode.RPM, AdmitCode.OK, AdmitCode.RPM]


def test_tpm_charges_the_estimate_and_refuses_what_does_not_fit(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> list[tuple[int, float]]:
        await setup(tables, tpm=100)
        out = []
        for _n in range(2):
            verdict = await tables.admit(DIGEST, NOW, 60)
            out.append((verdict.code, verdict.retry_after_s))
        return out

    # 40 tokens left, 20 missing at 100 tokens/min: 12 s.
    assert run(live_redis, body) == [(AdmitCode.OK, 0.0), (AdmitCode.TPM, 12.0)]


def test_a_tpm_refusal_does_not_charge_the_rpm_bucket(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> list[int]:
        await setup(tables, rpm=2, tpm=100)
        return [
            (await tables.admit(DIGEST, NOW, 100)).code,
            (await tables.admit(DIGEST, NOW, 100)).code,
            (await tables.admit(DIGEST, NOW, 0)).code,
        ]

    assert run(live_redis, body) == [AdmitCode.OK, AdmitCode.TPM, AdmitCode.OK]


def test_a_tenant_without_limits_is_always_admitted(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, _: Redis) -> set[int]:
        await setup(tables)
        return {(await tables.admit(DIGEST, NOW, 10_000)).code for _n in range(50)}

    assert run(live_redis, body) == {AdmitCode.OK}


def test_tpm_correction_gives_back_unused_estimated_tokens(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> list[int]:
        await setup(tables, tpm=100)
        first = (await tables.admit(DIGEST, NOW, 60)).code
        # The request used 15 of the 60 estimated tokens: 45 come back (40 -> 85).
        await add(tables, redis, [record(prompt=5, completion=10, est_tokens=60)])
        return [first, (await tables.admit(DIGEST, NOW, 80)).code]

    assert run(live_redis, body) == [AdmitCode.OK, AdmitCode.OK]


def test_tpm_correction_charges_tokens_used_beyond_the_estimate(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> list[int]:
        await setup(tables, tpm=100)
        first = (await tables.admit(DIGEST, NOW, 30)).code
        # The request used 90 tokens, not 30: 60 more are charged (70 -> 10).
        await add(tables, redis, [record(prompt=40, completion=50, est_tokens=30)])
        return [first, (await tables.admit(DIGEST, NOW, 20)).code]

    assert run(live_redis, body) == [AdmitCode.OK, AdmitCode.TPM]


def test_tpm_correction_of_an_estimate_over_the_limit_charges_the_real_usage(
    live_redis: RedisTarget,
) -> None:
    async def body(tables: AccessTables, redis: Redis) -> list[int]:
        await setup(tables, tpm=100)
        first = (await tables.admit(DIGEST, NOW, 1000)).code
        await add(tables, redis, [record(prompt=100, completion=300, est_tokens=1000)])
        return [first, (await tables.admit(DIGEST, NOW + 1, 50)).code]

    assert run(live_redis, body) == [AdmitCode.OK, AdmitCode.TPM]


def test_tpm_correction_after_the_bucket_expired_leaves_it_full(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> int:
        await setup(tables, tpm=100)
        await tables.admit(DIGEST, NOW, 60)
        # What PEXPIRE does 120 s after that admission, while the request still runs.
        await redis.delete(f"{live_redis.prefix}:{{access}}:bucket:{TENANT}:tpm")
        await add(tables, redis, [record(prompt=10, completion=40, est_tokens=60)])
        return (await tables.admit(DIGEST, NOW + 180, 60)).code

    assert run(live_redis, body) == AdmitCode.OK


# -- budgets ------------------------------------------------------------------------------
def test_a_budget_admits_while_spend_is_below_it(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> int:
        await setup(tables, budget_usd=0.000002)
        await add(tables, redis, [record(cost_nusd=1_999)])
        return (await tables.admit(DIGEST, NOW, 1)).code

    assert run(live_redis, body) == AdmitCode.OK


def test_a_budget_refuses_once_spend_reaches_it(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> int:
        await setup(tables, budget_usd=0.000002)
        await add(tables, redis, [record(cost_nusd=1_500), record(cost_nusd=500)])
        return (await tables.admit(DIGEST, NOW, 1)).code

    assert run(live_redis, body) == AdmitCode.BUDGET


def test_a_budget_refusal_carries_no_retry_after_from_the_buckets(
    live_redis: RedisTarget,
) -> None:
    async def body(tables: AccessTables, redis: Redis) -> float:
        await setup(tables, budget_usd=0.0)
        return (await tables.admit(DIGEST, NOW, 1)).retry_after_s

    assert run(live_redis, body) == 0.0


@pytest.mark.parametrize(
    ("period", "earlier_s", "code"),
    [
        ("hour", 3600, AdmitCode.OK),  # last hour's spend does not count
        ("hour", 60, AdmitCode.BUDGET),  # earlier in the same hour
        ("day", 3600, AdmitCode.BUDGET),  # an hour ago, same day
        ("day", 86400, AdmitCode.OK),  # yesterday
        ("month", 86400, AdmitCode.BUDGET),  # yesterday, same month
        ("month", 31 * 86400, AdmitCode.OK),  # last month
    ],
)
def test_a_budget_counts_only_the_spend_of_its_period(
    live_redis: RedisTarget, period: str, earlier_s: float, code: int
) -> None:
    async def body(tables: AccessTables, redis: Redis) -> int:
        await setup(tables, budget_usd=0.000001, budget_period=period)
        await add(tables, redis, [record(NOW - earlier_s, cost_nusd=5_000)])
        return (await tables.admit(DIGEST, NOW, 1)).code

    assert run(live_redis, body) == code


def test_budgets_are_written_in_nano_usd(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> Any:
        await setup(tables, budget_usd=1.25)
        return await redis.hget(f"{live_redis.prefix}:{{access}}:limits:{TENANT}", "budget_nusd")

    assert run(live_redis, body) == str(round(1.25 * NANO)).encode()


# -- usage roll-ups -----------------------------------------------------------------------
MIXED = [
    record(NOW, pool="p-a", model="m1", region="gcp:eu", provider="gcp", prompt=7, completion=3, cost_nusd=123_456_789),
    record(NOW + 1, pool="p-a", model="m2", region="gcp:eu", provider="gcp", prompt=1, completion=0, cost_nusd=1),
    record(NOW + 2, pool="p-b", model="m1", region="aws:us", provider="aws", prompt=0, completion=0, cost_nusd=0, status="upstream_error"),
    record(NOW + 3600, pool="p-c", model="m1", region="azure:us", provider="azure", prompt=900, completion=4000, cost_nusd=999_999_999_999),
    record(NOW + 3601, pool="", model="m2", region="", provider="", prompt=0, completion=0, cost_nusd=0, status="no_pool"),
    record(NOW, tenant="other", pool="p-a", prompt=5, completion=5, cost_nusd=77),
]  # fmt: skip
METRICS = ("requests", "prompt_tokens", "completion_tokens", "cost_nusd")


def _sums(records: list[dict[str, str]], group: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in records:
        slot = out.setdefault("all" if group == "total" else r[group], dict.fromkeys(METRICS, 0))
        slot["requests"] += 1
        for metric in METRICS[1:]:
            slot[metric] += int(r[metric])
    return out


@pytest.mark.parametrize("group", ["total", "pool", "model", "region", "provider"])
def test_usage_roll_ups_equal_the_sums_of_the_records(live_redis: RedisTarget, group: str) -> None:
    async def body(
        tables: AccessTables, redis: Redis
    ) -> tuple[dict[str, dict[str, int]], list[dict[str, str]]]:
        await add(tables, redis, MIXED)
        rolled = await tables.usage(TENANT, NOW - 3600, NOW + 7200, group)
        return rolled, await tables.usage_records()

    rolled, records = run(live_redis, body)
    assert rolled == _sums([r for r in records if r["tenant"] == TENANT], group)


def test_usage_records_keep_every_field_in_order(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> list[dict[str, str]]:
        await add(tables, redis, MIXED)
        return await tables.usage_records()

    records = run(live_redis, body)
    assert [
        (r["id"], r["tenant"], r["pool"], r["provider"], r["region"], r["model"],
         int(r["prompt_tokens"]), int(r["completion_tokens"]), int(r["cost_nusd"]), r["status"])
        for r in records
    ] == [
        (m.request_id, m.tenant, m.pool, m.provider, m.region, m.model,
         m.prompt_tokens, m.completion_tokens, m.cost_nusd, m.status)
        for m in MIXED
    ]  # fmt: skip


def test_usage_covers_only_the_hours_asked_for(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> dict[str, dict[str, int]]:
        await add(tables, redis, MIXED)
        hour_start = NOW - NOW % 3600
        return await tables.usage(TENANT, hour_start, hour_start + 3600, "total")

    first_hour = [r for r in MIXED[:3]]
    assert run(live_redis, body) == {
        "all": {
            "requests": 3,
            "prompt_tokens": sum(r.prompt_tokens for r in first_hour),
            "completion_tokens": sum(r.completion_tokens for r in first_hour),
            "cost_nusd": sum(r.cost_nusd for r in first_hour),
        }
    }


def test_spend_accumulates_in_every_period_of_a_record(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> list[Any]:
        await add(tables, redis, [record(cost_nusd=40), record(cost_nusd=2)])
        return [
            await redis.get(f"{live_redis.prefix}:{{access}}:spend:{TENANT}:{p}")
            for p in period_ids(NOW)
        ]

    assert run(live_redis, body) == [b"42", b"42", b"42"]


# -- tenants set through the admin API ----------------------------------------------------
def test_admin_tenants_round_trip_and_can_be_deleted(live_redis: RedisTarget) -> None:
    spec = TenantSpec(allowed_models=["chat"], rpm=5, allowed_regions=["gcp:europe-west4"])

    async def body(tables: AccessTables, _: Redis) -> tuple[Any, bool, Any]:
        await tables.put_tenant("eu", spec)
        stored = await tables.tenant_overrides()
        deleted = await tables.delete_tenant("eu")
        return stored, deleted, await tables.tenant_overrides()

    assert run(live_redis, body) == ({"eu": spec}, True, {})


def test_hours_rolled_up_in_the_older_field_layout_still_read(live_redis: RedisTarget) -> None:
    async def body(tables: AccessTables, redis: Redis) -> dict[str, dict[str, int]]:
        hour = tables._k("usage", TENANT, period_ids(NOW)[0])
        await redis.hset(hour, mapping={"pool|p-old|requests": 2, "model|m|requests": 2,
                                        "total|all|requests": 2})  # fmt: skip
        await add(tables, redis, MIXED[:1])
        return await tables.usage(TENANT, NOW - NOW % 3600, NOW - NOW % 3600 + 3600, "pool")

    rolled = run(live_redis, body)
    assert rolled["p-old"] == {"requests": 2}
    assert rolled[MIXED[0].pool]["requests"] == 1
