"""End to end: a real gateway process routes to the cheaper of two Azure pools; the Retail
Prices feed changes so the other pool is cheaper; after one refresh the gateway's
``x-skyroute-pool`` flips. The flip time (refresh done -> first request routed to the new
pool) is printed, never asserted beyond a generous bound."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from live.policy_file import load_policy
from pricing.azure import AzureFeed, AzureFeedConfig
from tests.gateway.harness import API_KEY, Engine, Gateway, policy_doc, pool, write_policy
from tests.pricing.fake_azure import PATH, FakeRetailPrices
from tests.pricing.helpers import rig, run

SKU = "Standard_NC24ads_A100_v4"
POOL_A, POOL_B = "azure:eastus:a100", "azure:westus2:a100"
CHAT = "chat-model"
FLIP_BOUND_S = 30.0


def _azure_pool(pool_id: str, region: str, engine: Engine) -> dict[str, Any]:
    doc = pool(pool_id, engine, provider="azure", region=region, model=CHAT, usd_per_gpu_hour=1.0)
    doc["price"] = {"source": "azure", "instance_type": SKU, "purchase": "on_demand"}
    return doc


@pytest.fixture
def engines() -> Iterator[tuple[Engine, Engine]]:
    a = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.0, seed=1).start()
    b = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.0, seed=2).start()
    try:
        yield a, b
    finally:
        a.kill()
        b.kill()


def _routed_to(client: httpx.Client) -> str:
    body = {"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    response = client.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    return response.headers["x-skyroute-pool"]


def test_gateway_flips_to_the_pool_a_price_change_made_cheaper(
    engines: tuple[Engine, Engine], redis_url: str, prefix: str, tmp_path: Path
) -> None:
    pools = [_azure_pool(POOL_A, "eastus", engines[0]), _azure_pool(POOL_B, "westus2", engines[1])]
    policy_path = write_policy(tmp_path / "policy.yaml", policy_doc(pools, [CHAT]))
    policy = load_policy(policy_path)
    with FakeRetailPrices() as azure:
        azure.set_price(SKU, "westus2", "on_demand", 5.0)  # A (eastus) 3.673 is cheaper

        async def refresh() -> None:
            feed = AzureFeed(AzureFeedConfig(url=f"{azure.url}{PATH}", timeout_s=5.0))
            async with rig(redis_url, prefix, policy, {"azure": feed}) as r:
                await r.refresher.refresh()

        run(refresh())
        gateway = Gateway(policy_path, redis_url, prefix).start()
        headers = {"Authorization": f"Bearer {API_KEY}"}
        try:
            with httpx.Client(base_url=gateway.base, headers=headers, timeout=10) as client:
                before = {_routed_to(client) for _ in range(5)}
                azure.set_price(SKU, "westus2", "on_demand", 2.0)  # now B is cheaper
                started = time.perf_counter()
                run(refresh())
                refreshed = time.perf_counter()
                after = _routed_to(client)
                while after != POOL_B and time.perf_counter() - refreshed < FLIP_BOUND_S:
                    time.sleep(0.005)
                    after = _routed_to(client)
                flipped = time.perf_counter()
        except BaseException:
            print(f"gateway log tail:\n{gateway.logs()[-3000:]}")
            raise
        finally:
            gateway.stop()

    print(
        f"\nprice flip: refresh (fetch + write) {1000 * (refreshed - started):.1f} ms, "
        f"refresh done -> first request routed to {POOL_B}: {1000 * (flipped - refreshed):.1f} ms"
    )
    assert before == {POOL_A} and after == POOL_B
