"""Two gateway replicas against the 3-master Redis Cluster, driven by the real ``openai``
client: admin-API tenants and keys, shared admission limits, revocation, the health
CAS and its announcement (drain), usage reaching the store, and nothing logged as a
Redis failure (a MOVED, CROSSSLOT or NOSCRIPT anywhere would show up as one)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.harness import (
    ADMIN_TOKEN,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    wait_for,
    write_policy,
)

MESSAGES: Any = [{"role": "user", "content": "Hello, cluster."}]
CHAT = "chat-model"
CHEAP = "gcp:us-central1:cheap"


@dataclass
class Pair:
    """Two replicas of one deployment (one prefix, one store) on the cluster."""

    one: Gateway
    two: Gateway

    def client(self, gw: Gateway, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{gw.base}/v1", api_key=key, max_retries=0, timeout=20)

    def new_key(self, tenant: str, **limits: Any) -> tuple[str, str]:
        """A tenant (``limits``) and a key of it, made through replica one: (id, secret)."""
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        r = httpx.put(f"{self.one.base}/admin/tenants/{tenant}", json=limits, headers=headers)
        assert r.is_success, r.text
        r = httpx.post(f"{self.one.base}/admin/keys", json={"tenant": tenant}, headers=headers)
        assert r.status_code == 201, r.text
        body = r.json()
        return body["id"], body["secret"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, redis_cluster_url: str) -> Iterator[Pair]:
    tmp: Path = tmp_path_factory.mktemp("cluster-gw")
    engine = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05).start()
    pools = [
        pool(CHEAP, engine, provider="gcp", region="us-central1", model=CHAT,
             usd_per_gpu_hour=0.4),
        pool("aws:us-east-1:mid", engine, provider="aws", region="us-east-1", model=CHAT,
             usd_per_gpu_hour=1.0),
    ]  # fmt: skip
    policy = write_policy(tmp / "policy.yaml", policy_doc(pools, [CHAT]))
    prefix = unique_prefix()
    one = two = None
    try:
        one = Gateway(policy, redis_cluster_url, prefix).start()
        two = Gateway(policy, redis_cluster_url, prefix).start()
        yield Pair(one, two)
    finally:
        for gw in (one, two):
            if gw is not None:
                gw.stop()
        engine.kill()


def test_openai_client_is_served_by_both_replicas(pair: Pair) -> None:
    _, secret = pair.new_key("acme-chat")
    for gw in (pair.one, pair.two):
        raw = pair.client(gw, secret).chat.completions.with_raw_response.create(
            model=CHAT, messages=MESSAGES, max_tokens=4
        )
        assert raw.headers["x-skyroute-pool"] and raw.parse().choices[0].message.content
        chunks = pair.client(gw, secret).chat.completions.create(
            model=CHAT, messages=MESSAGES, max_tokens=4, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_a_rate_limit_is_shared_by_the_replicas(pair: Pair) -> None:
    _, secret = pair.new_key("acme-rpm", rpm=3)
    outcomes = []
    for gw in (pair.one, pair.two, pair.one, pair.two):
        try:
            pair.client(gw, secret).chat.completions.create(
                model=CHAT, messages=MESSAGES, max_tokens=2
            )
            outcomes.append(200)
        except openai.RateLimitError:
            outcomes.append(429)
    assert outcomes == [200, 200, 200, 429]


def test_a_key_revoked_through_one_replica_is_refused_by_the_other(pair: Pair) -> None:
    key_id, secret = pair.new_key("acme-revoke")
    pair.client(pair.two, secret).models.list()
    assert pair.one.admin("DELETE", f"/admin/keys/{key_id}").is_success

    def refused() -> bool:
        try:
            pair.client(pair.two, secret).chat.completions.create(
                model=CHAT, messages=MESSAGES, max_tokens=2
            )
        except openai.AuthenticationError:
            return True
        return False

    wait_for(refused, "replica two to refuse the revoked key", timeout_s=10)


def test_a_drain_through_one_replica_reaches_the_other(pair: Pair) -> None:
    assert pair.one.admin("POST", f"/admin/pools/{CHEAP}/drain").is_success

    def draining() -> bool:
        pools = pair.two.admin("GET", "/admin/pools").json()["pools"]
        return next(p for p in pools if p["id"] == CHEAP)["state"] == "draining"

    try:
        wait_for(draining, "replica two to see the drain", timeout_s=10)
    finally:
        pair.one.admin("POST", f"/admin/pools/{CHEAP}/uncordon")


def test_usage_reaches_the_store_exactly_once(pair: Pair) -> None:
    _, secret = pair.new_key("acme-usage")
    for gw in (pair.one, pair.two, pair.one):
        pair.client(gw, secret).chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=2)

    def recorded() -> Any:
        body = pair.one.admin("GET", "/admin/usage?tenant=acme-usage").json()
        return body if body["groups"].get("all", {}).get("requests") == 3 else None

    wait_for(lambda: recorded() is not None, "3 usage records in the store", timeout_s=15)
    assert recorded()["source"] == "store"


def test_no_replica_logged_a_redis_failure(pair: Pair) -> None:
    pair.client(pair.one, pair.new_key("acme-logs")[1]).models.list()
    for gw in (pair.one, pair.two):
        logs = gw.logs()
        for bad in ("redis unreachable", "MOVED", "CROSSSLOT", "NOSCRIPT", "Traceback"):
            assert bad not in logs, logs[-3000:]
