"""Fixtures for gateway integration tests: a three-pool fleet of real simulated
engines behind a real gateway process, and the real ``openai`` client."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from tests.gateway.harness import (
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    write_policy,
)

CHAT = "chat-model"
EMBED = "embed-model"


@dataclass
class Fleet:
    """Engines by role (cheap, mid, pricey, embed) and the policy that prices them so."""

    engines: dict[str, Engine]
    policy_path: Path

    def stop(self) -> None:
        for engine in self.engines.values():
            engine.kill()


def fleet_policy(engines: dict[str, Engine], **routing: object) -> dict[str, object]:
    """cheap (gcp, $0.40) < mid (aws, $1.00) < pricey (azure, $3.00) per GPU-hour."""
    pools = [
        pool("gcp:us-central1:cheap", engines["cheap"], provider="gcp", region="us-central1", model=CHAT, usd_per_gpu_hour=0.40),
        pool("aws:us-east-1:mid", engines["mid"], provider="aws", region="us-east-1", model=CHAT, usd_per_gpu_hour=1.00),
        pool("azure:eastus:pricey", engines["pricey"], provider="azure", region="eastus", model=CHAT, usd_per_gpu_hour=3.00),
        pool("aws:us-east-1:embed", engines["embed"], provider="aws", region="us-east-1", model=EMBED, usd_per_gpu_hour=1.00),
    ]  # fmt: skip
    doc = policy_doc(pools, [CHAT, EMBED], **routing)
    doc["models"][EMBED] = {
        "kind": "embedding",
        "default_slo": "interactive",
        "expected_output_tokens": 0,
    }  # type: ignore[index]
    return doc


def start_fleet(tmp: Path, time_scale: float = 1.0) -> Fleet:
    engines = {
        "cheap": Engine("a10g-llama-3.1-8b", "upstream-chat", time_scale, seed=1).start(),
        "mid": Engine("a10g-llama-3.1-8b", "upstream-chat", time_scale, seed=2).start(),
        "pricey": Engine("a10g-llama-3.1-8b", "upstream-chat", time_scale, seed=3).start(),
        "embed": Engine("a10g-bge-large", "upstream-embed", time_scale, seed=4).start(),
    }
    return Fleet(engines, write_policy(tmp / "policy.yaml", fleet_policy(engines)))


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """A fresh fleet per test (tests kill engines and rewrite the policy)."""
    f = start_fleet(tmp_path)
    try:
        yield f
    finally:
        f.stop()


@pytest.fixture
def gateway(fleet: Fleet, redis_url: str) -> Iterator[Gateway]:
    """One gateway replica in front of ``fleet``, on a key prefix of its own."""
    gw = Gateway(fleet.policy_path, redis_url, unique_prefix()).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def client(gateway: Gateway) -> Iterator[openai.OpenAI]:
    """The official openai client pointed at the gateway."""
    c = openai.OpenAI(base_url=f"{gateway.base}/v1", api_key=API_KEY, max_retries=0, timeout=30)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def module_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One fleet for a whole file of tests that change nothing in it (no engine killed,
    no policy rewritten): starting a fleet and a gateway per test cost ~6 s each."""
    f = start_fleet(tmp_path_factory.mktemp("fleet"))
    try:
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="module")
def module_gateway(module_fleet: Fleet, redis_url: str) -> Iterator[Gateway]:
    """One gateway replica in front of ``module_fleet`` for a whole file."""
    gw = Gateway(module_fleet.policy_path, redis_url, unique_prefix()).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def module_client(module_gateway: Gateway) -> Iterator[openai.OpenAI]:
    """The official openai client pointed at ``module_gateway``."""
    c = openai.OpenAI(
        base_url=f"{module_gateway.base}/v1", api_key=API_KEY, max_retries=0, timeout=30
    )
    try:
        yield c
    finally:
        c.close()
