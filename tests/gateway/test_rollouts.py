"""A gateway under a rollout, with real engines and the real ``openai`` client: the canary
share, stickiness, residency, failover from the canary to stable, counts per stage, and
shadow copies that change nothing for the client.

The rollout records are written straight into Redis (``live.rollout_table``), as the
leader and the admin API write them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest

from live.redis_client import connect
from live.rollout_table import RolloutRecord, RolloutTable, plan_from_yaml
from router.rollout import Rollout, Stage
from router.rollout_tally import StageCounts
from tests.gateway.harness import (
    ADMIN_TOKEN,
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    wait_for,
    write_policy,
)

MODEL = "chat-model"
US_STABLE, EU_STABLE, US_CANARY = "aws:us-east-1:v1", "gcp:europe-west4:v1", "azure:eastus:v2"


@dataclass
class Setup:
    gateway: Gateway
    engines: dict[str, Engine]
    redis_url: str
    eu_key: str
    billed_key: str  # of a tenant only the shadow test sends from

    def client(self, key: str = API_KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.gateway.base}/v1", api_key=key, max_retries=0)

    def write(self, rid: str, stage: Stage, step: int) -> None:
        """Store the model's rollout ``rid`` at ``stage`` and ``step``, after whatever the
        model's record is now (each test runs on its own, in any order)."""

        async def main() -> None:
            redis = connect(self.redis_url)
            try:
                table = RolloutTable(redis, prefix=self.gateway.prefix)
                current = await table.read(MODEL)
                revision = current.revision if current is not None else 0
                assert await table.write(_record(rid, stage, step, revision + 1), revision, ())
            finally:
                await redis.aclose()

        asyncio.run(main())

    def counts(self, rollout_id: str, stage: Stage, step: int) -> StageCounts:
        async def main() -> StageCounts:
            redis = connect(self.redis_url)
            try:
                table = RolloutTable(redis, prefix=self.gateway.prefix)
                return await table.read_counts(rollout_id, stage, step)
            finally:
                await redis.aclose()

        return asyncio.run(main())


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("rollouts")
    engines = {
        name: Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05, seed=seed).start()
        for seed, name in enumerate((US_STABLE, EU_STABLE, US_CANARY), start=1)
    }
    try:
        pools = []
        for pid, engine in engines.items():
            provider, region, version = pid.split(":")
            doc = pool(pid, engine, provider=provider, region=region, model=MODEL,
                       usd_per_gpu_hour=1.0 if version == "v1" else 0.5)  # fmt: skip
            doc["version"] = version
            pools.append(doc)
        policy = policy_doc(pools, [MODEL])
        policy["models"][MODEL]["version"] = "v1"
        # US clients use the US pools only; EU clients the EU pool only.
        del policy["client_regions"]["us"]["rtt_ms"]["gcp:europe-west4"]
        policy["client_regions"]["eu"] = {"rtt_ms": {"gcp:europe-west4": 5.0}}
        policy["tenants"] = {
            "default": {},
            "eu": {"client_region": "eu", "allowed_regions": ["gcp:europe-west4"]},
            "billed": {},
        }
        gateway = Gateway(write_policy(tmp / "policy.yaml", policy), redis_url, unique_prefix())
        gateway.start()
        try:
            keys = {
                t: gateway.admin_json("POST", "/admin/keys", {"tenant": t, "name": t})["secret"]
                for t in ("eu", "billed")
            }
            yield Setup(gateway, engines, redis_url, keys["eu"], keys["billed"])
        finally:
            gateway.stop()
    finally:
        for engine in engines.values():
            engine.kill()


PLAN = plan_from_yaml(
    "sticky: session\nshadow: {share: 1.0, min_requests: 10, similarity: 0.9}\n"
    "steps: [{share: 0.3}, {share: 0.6}]\n"
)


def _record(rid: str, stage: Stage, step: int, revision: int) -> RolloutRecord:
    rollout = Rollout(MODEL, "v1", "v2", stage, step, time.time())
    return RolloutRecord(rid, rollout, PLAN, revision, time.time(), time.time())


def _pools_of(setup: Setup, n: int, key: str = API_KEY, session: str | None = None) -> Counter[str]:
    seen: Counter[str] = Counter()
    headers = {"x-session-id": session} if session else None
    client = setup.client(key)
    for i in range(n):
        resp = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": f"hello {i}"}], max_tokens=4,
            extra_headers=headers,
        )  # fmt: skip
        seen[resp.headers["x-skyroute-pool"]] += 1
    return seen


def _wait_version(setup: Setup, pool_id: str) -> None:
    wait_for(lambda: _pools_of(setup, 1)[pool_id] == 1, f"traffic on {pool_id}", timeout_s=20)


def test_a_canary_step_takes_its_share_counts_each_version_and_sticks_per_session(
    setup: Setup,
) -> None:
    # Before any rollout only the serving version (v1) is routed to.
    assert set(_pools_of(setup, 10)) == {US_STABLE}
    setup.write("r-share", Stage.CANARY, 0)
    wait_for(lambda: US_CANARY in _pools_of(setup, 10), "canary traffic", timeout_s=20)

    n = 300
    seen = _pools_of(setup, n)
    share = seen[US_CANARY] / n
    sd = math.sqrt(0.3 * 0.7 / n)
    assert abs(share - 0.3) < 4 * sd, seen
    assert set(seen) == {US_STABLE, US_CANARY}

    # A session stays on the version it reached.
    for session in ("s-1", "s-2", "s-3", "s-4", "s-5", "s-6"):
        assert len(_pools_of(setup, 5, session=session)) == 1

    def counted() -> bool:
        counts = setup.counts("r-share", Stage.CANARY, 0).versions
        return counts.get("v2") is not None and counts["v2"].n >= seen[US_CANARY]

    wait_for(counted, "the step's counts in Redis", timeout_s=10)
    counts = setup.counts("r-share", Stage.CANARY, 0).versions
    assert counts["v1"].n >= seen[US_STABLE] and counts["v1"].err == 0
    # The dashboard shows the split and the comparison the leader judges on.
    (shown,) = setup.gateway.admin_json("GET", "/admin/dashboard/data")["rollouts"]
    assert (shown["stage"], shown["share"], shown["canary"]) == ("canary", 0.3, "v2")
    assert any(line.startswith("error_rate: canary 0/") for line in shown["evidence"])
    assert sum(counts["v2"].out.values()) == counts["v2"].n - counts["v2"].err

    # A residency rule wins over the rollout: the EU-only tenant never reaches the
    # canary version (its only pool is in the US), promoted to all traffic either.
    setup.write("r-share", Stage.PROMOTED, 1)
    wait_for(lambda: set(_pools_of(setup, 5)) == {US_CANARY}, "all traffic on v2", timeout_s=20)
    assert set(_pools_of(setup, 40, key=setup.eu_key)) == {EU_STABLE}

    # Rolled back: everything on v1 again.
    setup.write("r-share", Stage.ROLLED_BACK, 1)
    wait_for(lambda: set(_pools_of(setup, 10)) == {US_STABLE}, "back on v1", timeout_s=20)


def test_a_dead_canary_fails_over_to_stable_and_no_client_sees_an_error(setup: Setup) -> None:
    setup.write("r-dead", Stage.CANARY, 1)
    _wait_version(setup, US_CANARY)
    setup.engines[US_CANARY].kill()
    try:
        seen = _pools_of(setup, 30)  # raises on any client error
        assert seen[US_STABLE] == 30 - seen[US_CANARY]
        assert seen[US_CANARY] == 0
        counts = setup.counts("r-dead", Stage.CANARY, 1).versions
        wait_for(
            lambda: setup.counts("r-dead", Stage.CANARY, 1).versions.get("v2") is not None,
            "the canary's failures counted",
            timeout_s=10,
        )
        counts = setup.counts("r-dead", Stage.CANARY, 1).versions
        assert counts["v2"].err >= 1
    finally:
        setup.engines[US_CANARY].start()
        setup.write("r-dead", Stage.ROLLED_BACK, 1)


def test_shadow_copies_change_no_answer_or_bill_and_are_counted_as_the_new_version(
    setup: Setup,
) -> None:
    costs: list[float] = []

    def answers(n: int, key: str = API_KEY) -> list[tuple[str, str]]:
        # The engines answer a request with a ``seed`` the same way every time.
        out = []
        for i in range(n):
            resp = httpx.post(
                f"{setup.gateway.base}/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}],
                      "max_tokens": 6, "seed": i},
                headers={"Authorization": f"Bearer {key}"}, timeout=30,
            )  # fmt: skip
            assert resp.status_code == 200, resp.text
            body = resp.json()
            out.append((body["choices"][0]["message"]["content"], resp.headers["x-skyroute-pool"]))
            costs.append(float(resp.headers["x-skyroute-cost-usd"]))
        return out

    def billed() -> dict[str, float]:
        usage = setup.gateway.admin_json("GET", "/admin/usage?tenant=billed")
        total: dict[str, float] = usage["groups"].get("all", {"requests": 0, "cost_usd": 0.0})
        return total

    wait_for(lambda: set(_pools_of(setup, 5)) == {US_STABLE}, "on v1", timeout_s=20)
    before = answers(20)
    canary_before = setup.engines[US_CANARY].requests_received()
    setup.write("r-shadow", Stage.SHADOW, 0)
    wait_for(
        lambda: (
            _pools_of(setup, 1) and setup.engines[US_CANARY].requests_received() > canary_before
        ),
        "the first shadow copy",
        timeout_s=20,
    )
    canary_before = setup.engines[US_CANARY].requests_received()
    costs.clear()
    during = answers(20, setup.billed_key)
    assert during == before  # same content, same pool: the client sees no difference
    wait_for(
        lambda: setup.engines[US_CANARY].requests_received() >= canary_before + 20,
        "shadow copies of the 20 requests",
        timeout_s=20,
    )

    def counted() -> bool:
        v2 = setup.counts("r-shadow", Stage.SHADOW, 0).versions.get("v2")
        return v2 is not None and v2.n >= 20

    wait_for(counted, "shadow counts", timeout_s=10)
    counts = setup.counts("r-shadow", Stage.SHADOW, 0).versions
    assert counts["v2"].err == 0 and counts["v1"].n >= 20
    # The new version's engine writes other text (another seed): its answers mismatch.
    assert counts["v2"].cmp >= 20 and counts["v2"].mm == counts["v2"].cmp
    # Billing: the tenant pays for its 20 requests, at what their answers said they cost.
    wait_for(lambda: billed()["requests"] >= 20, "the tenant's usage in the store", 20)
    assert billed()["requests"] == 20
    # (each header rounds to 1e-8 USD)
    assert billed()["cost_usd"] == pytest.approx(sum(costs), abs=20 * 0.5e-8 + 1e-12)
    setup.write("r-shadow", Stage.ROLLED_BACK, 0)


def test_the_admin_api_refuses_what_cannot_be_done_with_the_reason(setup: Setup) -> None:
    gw = setup.gateway

    def post(path: str, body: object = None) -> tuple[int, str]:
        resp = httpx.post(f"{gw.base}{path}", json=body, timeout=10,
                          headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})  # fmt: skip
        return resp.status_code, resp.text

    assert post("/admin/rollouts", {"model": MODEL, "to": "v9"})[0] == 400
    assert post("/admin/rollouts", {"model": MODEL, "to": "v1"})[0] == 400  # serves already
    assert post("/admin/rollouts", {"model": "nope", "to": "v2"})[0] == 404
    status, text = post("/admin/rollouts", {"model": MODEL, "to": "v2", "plan": "steps: []"})
    assert status == 400 and "steps" in text
    assert gw.admin("GET", "/admin/rollouts/nope").status_code == 404

    status, text = post("/admin/rollouts", {"model": MODEL, "to": "v2"})  # the default plan
    assert status == 201, text
    assert post("/admin/rollouts", {"model": MODEL, "to": "v2"})[0] == 409
    assert post(f"/admin/rollouts/{MODEL}/explode")[0] == 404
    assert post(f"/admin/rollouts/{MODEL}/pause")[0] == 200
    assert post(f"/admin/rollouts/{MODEL}/pause")[0] == 409  # already paused
    assert post(f"/admin/rollouts/{MODEL}/abort")[0] == 200
    assert post(f"/admin/rollouts/{MODEL}/resume")[0] == 409  # finished
    listed = gw.admin_json("GET", "/admin/rollouts")
    assert [(r["model"], r["stage"]) for r in listed] == [(MODEL, "rolled_back")]
    moves = gw.admin_json("GET", f"/admin/rollouts/{MODEL}")["transitions"]
    assert [m["reason"] for m in moves] == [
        "aborted by operator",
        "paused by operator",
        "started: v1 -> v2",
    ]
