"""Tenants through real gateway replicas: which models a tenant may use, tenant changes
through the admin API reaching every replica, per-tenant caps, and data residency: an
EU-only tenant is never served outside the EU, even when every EU pool is slow or
failing, and gets a clear 503 when no EU pool is left."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.gateway.access.conftest import (
    NO_DRAIN_DELAY,
    admin,
    create_key,
    openai_client,
    put_tenant,
    tenant_name,
)
from tests.gateway.conftest import CHAT, EMBED
from tests.gateway.harness import (
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    write_policy,
)

EU = ("gcp:europe-west4", "aws:eu-west-1")
EU_A, EU_B, US = "gcp:europe-west4:eu-a", "aws:eu-west-1:eu-b", "azure:eastus:us"
EU_TENANT = "eu-only"
MESSAGES: Any = [{"role": "user", "content": "where am I served?"}]


def _embed(client: openai.OpenAI) -> None:
    client.embeddings.create(model=EMBED, input="hello")


def _chat(client: openai.OpenAI) -> str:
    """One chat request; the pool that answered it."""
    raw = client.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=2
    )
    assert raw.parse().choices[0].message.content
    return raw.headers["x-skyroute-pool"]


# -- models and caps (the shared fleet, two replicas) -------------------------------------
@pytest.fixture(scope="module")
def chat_only(pair: list[Gateway]) -> str:
    """The secret of a key whose tenant may use the chat model only."""
    name = tenant_name("chat-only")
    put_tenant(pair, name, allowed_models=[CHAT], max_tokens=16)
    return str(create_key(pair[0], name)["secret"])


def test_a_tenant_gets_403_on_a_model_it_may_not_use(pair: list[Gateway], chat_only: str) -> None:
    with (
        openai_client(pair[1], chat_only) as client,
        pytest.raises(openai.PermissionDeniedError) as info,
    ):
        _embed(client)
    assert (info.value.status_code, info.value.code) == (403, "permission_denied")


def test_a_tenant_may_use_a_model_it_is_allowed(pair: list[Gateway], chat_only: str) -> None:
    with openai_client(pair[1], chat_only) as client:
        assert _chat(client)  # answered by a pool of the model


def test_models_lists_only_the_models_a_tenant_may_use(pair: list[Gateway], chat_only: str) -> None:
    with openai_client(pair[0], chat_only) as client:
        assert [m.id for m in client.models.list()] == [CHAT]


def test_a_tenant_max_tokens_cap_refuses_a_larger_request(
    pair: list[Gateway], chat_only: str
) -> None:
    with openai_client(pair[0], chat_only) as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=17)
    assert info.value.param == "max_tokens"


def test_a_tenant_changed_through_one_replica_is_enforced_by_the_other(
    pair: list[Gateway],
) -> None:
    one, two = pair
    name = tenant_name("narrowed")
    put_tenant(pair, name)
    secret = create_key(one, name)["secret"]
    assert admin(one, "PUT", f"/admin/tenants/{name}", {"allowed_models": [CHAT]}).is_success
    deadline = time.monotonic() + 3
    refused = False
    with openai_client(two, secret) as client:
        while not refused and time.monotonic() < deadline:
            try:
                _embed(client)
                time.sleep(0.05)
            except openai.PermissionDeniedError:
                refused = True
    assert refused


def test_a_tenant_naming_an_unknown_model_is_refused(pair: list[Gateway]) -> None:
    reply = admin(
        pair[0], "PUT", f"/admin/tenants/{tenant_name('bad')}", {"allowed_models": ["gpt-x"]}
    )
    assert (reply.status_code, reply.json()["error"]["code"]) == (404, "model_not_found")


# -- data residency (a fleet of its own: one US pool, two slow EU pools) ------------------
@dataclass
class EuFleet:
    """The engines, the policy that makes its EU pools slow, and a gateway on it with a
    key of the EU-only tenant."""

    engines: dict[str, Engine]
    policy: Path
    gateway: Gateway
    eu_key: str


SLOW = {"slowdown": 4.0}


def eu_policy(engines: dict[str, Engine]) -> dict[str, Any]:
    """EU pools that are cheap but slow (their profile misses the SLO's 60 ms per token,
    and so do their engines), and a pricey, fast US pool: an unrestricted tenant goes
    to the US; the EU tenant may only fall back to the slow EU pools."""
    slow: dict[str, Any] = {"tpot_ms": 200.0, "tokens_per_s": 100.0}
    pools = [
        pool(US, engines["us"], provider="azure", region="eastus", model=CHAT, usd_per_gpu_hour=3.0),
        pool(EU_A, engines["eu-a"], provider="gcp", region="europe-west4", model=CHAT, usd_per_gpu_hour=0.4, **slow),
        pool(EU_B, engines["eu-b"], provider="aws", region="eu-west-1", model=CHAT, usd_per_gpu_hour=1.0, **slow),
    ]  # fmt: skip
    doc = policy_doc(pools, [CHAT])
    doc["tenants"] = {EU_TENANT: {"allowed_regions": list(EU)}}
    return doc


def eu_gateway(policy: Path, redis_url: str) -> tuple[Gateway, str]:
    """A replica on a fresh prefix (its own pool health) and an EU-only key on it."""
    gateway = Gateway(policy, redis_url, unique_prefix(), extra_env=NO_DRAIN_DELAY).start()
    return gateway, str(create_key(gateway, EU_TENANT)["secret"])


@pytest.fixture(scope="module")
def eu(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[EuFleet]:
    engines = {
        name: Engine("a10g-llama-3.1-8b", "upstream-chat", 1.0, seed=i).start()
        for i, name in enumerate(("us", "eu-a", "eu-b"))
    }
    gateway: Gateway | None = None
    try:
        for name in ("eu-a", "eu-b"):
            engines[name].set_faults(**SLOW)
        policy = write_policy(tmp_path_factory.mktemp("eu") / "policy.yaml", eu_policy(engines))
        gateway, key = eu_gateway(policy, redis_url)
        yield EuFleet(engines, policy, gateway, key)
    finally:
        if gateway is not None:
            gateway.stop()
        for engine in engines.values():
            engine.kill()


@pytest.fixture
def eu_own(eu: EuFleet, redis_url: str) -> Iterator[EuFleet]:
    """The EU engines behind a replica of their own, for a test that fails or drains
    pools; the engines' slowness is restored after."""
    gateway, key = eu_gateway(eu.policy, redis_url)
    try:
        yield EuFleet(eu.engines, eu.policy, gateway, key)
    finally:
        gateway.stop()
        for name in ("eu-a", "eu-b"):
            eu.engines[name].set_faults(**SLOW)


def _served_from(client: openai.OpenAI, stream: bool) -> tuple[str, str]:
    """(location, attempts) of one chat request, streamed or not."""
    if stream:
        with client.chat.completions.with_streaming_response.create(
            model=CHAT, messages=MESSAGES, max_tokens=2, stream=True
        ) as resp:
            for _ in resp.iter_lines():
                pass
            headers = resp.headers
    else:
        raw = client.chat.completions.with_raw_response.create(
            model=CHAT, messages=MESSAGES, max_tokens=2
        )
        raw.parse()
        headers = raw.headers
    location = f"{headers['x-skyroute-provider']}:{headers['x-skyroute-region']}"
    return location, headers["x-skyroute-attempts"]


def test_an_unrestricted_tenant_is_served_outside_the_slow_eu_pools(eu: EuFleet) -> None:
    with openai_client(eu.gateway, API_KEY) as client:
        served = {_served_from(client, stream=False)[0] for _ in range(4)}
    assert served == {"azure:eastus"}


def test_an_eu_only_tenant_stays_in_the_eu_when_every_eu_pool_is_slow(eu: EuFleet) -> None:
    with openai_client(eu.gateway, eu.eu_key) as client:
        served = [_served_from(client, stream=i % 2 == 1)[0] for i in range(8)]
    assert set(served) <= set(EU)


def test_an_eu_only_tenant_fails_over_only_within_the_eu(eu_own: EuFleet) -> None:
    with openai_client(eu_own.gateway, eu_own.eu_key) as client:
        first, _ = _served_from(client, stream=False)
        failing = eu_own.engines["eu-a" if first == EU[0] else "eu-b"]
        failing.set_faults(**SLOW, fail_rate=1.0, fail_status=503)
        after = [_served_from(client, stream=i % 2 == 1) for i in range(6)]
    assert {location for location, _ in after} == set(EU) - {first}
    assert after[0][1] == "2"  # the first request after the kill did fail over


def test_an_eu_only_tenant_gets_503_when_no_eu_pool_is_available(eu_own: EuFleet) -> None:
    for pool_id in (EU_A, EU_B):
        assert admin(eu_own.gateway, "POST", f"/admin/pools/{pool_id}/drain").is_success
    with (
        openai_client(eu_own.gateway, eu_own.eu_key) as client,
        pytest.raises(openai.InternalServerError) as info,
    ):
        _chat(client)
    assert (info.value.status_code, info.value.code) == (503, "no_available_pool")
    assert CHAT in info.value.message
