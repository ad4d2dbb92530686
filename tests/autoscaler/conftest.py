"""Fixtures for the autoscaler tests: small policies, demand histories and a Redis prefix.

Unit tests of ``decide()`` build a policy in code (``make_policy``) and a history of
constant or given demand (``history``); integration tests get the session's real Redis
under a key prefix of their own (``target``), deleted afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from redis.asyncio import Redis

from autoscaler.config import ScalerConfig
from autoscaler.demand import DemandHistory
from autoscaler.fleet import PoolStatus
from live.demand_table import DemandSeries
from router.policy import Policy

# A Monday 00:00 UTC, so time-of-week is easy to read in tests.
T0 = 1_700_438_400.0
MODEL = "chat"
BUCKET_S = 300.0


def pool_doc(
    pool_id: str,
    *,
    region: str = "us-east-1",
    provider: str = "aws",
    usd: float = 1.0,
    tokens_per_s: float = 1000.0,
    purchase: str = "on_demand",
    max_replicas: int = 20,
    min_replicas: int = 0,
    model: str = MODEL,
    prefill: float = 10_000.0,
) -> dict[str, Any]:
    """A pool of one GPU per replica; its goodput is ``tokens_per_s`` at the model's SLO."""
    return {
        "id": pool_id,
        "provider": provider,
        "region": region,
        "model": model,
        "upstream_model": "upstream",
        "gpu_type": "A10G",
        "gpus_per_replica": 1,
        "endpoints": ["http://127.0.0.1:9"],
        "price": {"source": "policy", "usd_per_gpu_hour": usd, "purchase": purchase},
        "goodput": {
            "tokens_per_s": tokens_per_s,
            "prefill_tokens_per_s": prefill,
            # TPOT 50 ms with a full batch: under the 100 ms SLO, so goodput = tokens_per_s.
            "max_concurrency": max(int(tokens_per_s * 0.05), 1),
            "tpot_ms": 20.0,
        },
        "replicas": {"min": min_replicas, "max": max_replicas, "initial": min_replicas},
        "scaling": {"group": pool_id.replace(":", "-"), "provisioning_s": 300.0},
    }


def make_policy(
    pools: Sequence[dict[str, Any]],
    regions: dict[str, dict[str, float]] | None = None,
    ttft_ms: float = 2000.0,
) -> Policy:
    """A policy with one chat model (SLO: ``ttft_ms``, TPOT 100 ms) over ``pools``; by
    default one client region ``us`` that may use every pool at 5 ms."""
    locations = sorted({f"{p['provider']}:{p['region']}" for p in pools})
    regions = regions or {"us": dict.fromkeys(locations, 5.0)}
    return Policy.model_validate(
        {
            "slo_classes": {"std": {"ttft_ms": ttft_ms, "tpot_ms": 100.0}},
            "models": {MODEL: {"default_slo": "std", "expected_output_tokens": 100}},
            "pools": list(pools),
            "client_regions": {k: {"rtt_ms": v} for k, v in regions.items()},
            "routing": {"default_client_region": next(iter(regions))},
        }
    )


def series(
    tokens_per_s: Sequence[float] | np.ndarray, prompt_tokens: float = 500.0
) -> DemandSeries:
    """Demand at the given output tokens/s per 300 s bucket from T0 (100 tokens/request)."""
    out = np.asarray(tokens_per_s, dtype=np.float64) * BUCKET_S
    requests = out / 100.0
    return DemandSeries(T0, BUCKET_S, requests, requests * prompt_tokens, out, np.zeros(len(out)))


def history(per_region: dict[str, Sequence[float] | np.ndarray], **kw: Any) -> DemandHistory:
    """History ending now (at the end of the series) per client region of ``MODEL``."""
    made = {(MODEL, region): series(values, **kw) for region, values in per_region.items()}
    end = max(s.end_s for s in made.values())
    return DemandHistory(end, made)


def steady(tokens_per_s: float, hours: float = 12.0) -> np.ndarray:
    """Constant demand (output tokens/s) over ``hours``."""
    return np.full(int(hours * 3600 / BUCKET_S), tokens_per_s)


def statuses(policy: Policy, replicas: dict[str, int] | None = None) -> list[PoolStatus]:
    """Every pool managed, healthy, at ``replicas`` (default 0), all ready."""
    replicas = replicas or {}
    return [PoolStatus(p.id, replicas.get(p.id, 0), replicas.get(p.id, 0)) for p in policy.pools]


def prices(policy: Policy) -> dict[str, float]:
    """The policy's own prices (USD per GPU-hour)."""
    return {p.id: float(p.price.usd_per_gpu_hour or 0) for p in policy.pools}


# Planning knobs for unit tests: no damping unless a test asks for it, bucket as above.
def config(**kw: Any) -> ScalerConfig:
    base: dict[str, Any] = {
        "headroom": 1.0,
        "spot_cap": 1.0,
        "max_step": 100,
        "cooldown_s": 0.0,
        "scale_down_window_s": 0.0,
        "scale_down_margin": 0.0,
        "forecast_bucket_s": BUCKET_S,
        "interval_s": 60.0,
    }
    return ScalerConfig(**{**base, **kw})


@dataclass(frozen=True)
class RedisTarget:
    """The session's Redis and a key prefix of this test's own."""

    url: str
    prefix: str

    def client(self) -> Redis:
        """A new client, bound to the running event loop; close it when done."""
        return Redis.from_url(self.url)


async def _delete_prefix(target: RedisTarget) -> None:
    client = target.client()
    try:
        keys = [k async for k in client.scan_iter(match=f"{target.prefix}:*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
def target(redis_url: str) -> Iterator[RedisTarget]:
    """A fresh ``srtest:<uuid>`` prefix on the session's Redis, cleaned up after."""
    made = RedisTarget(redis_url, f"srtest:{uuid.uuid4().hex[:12]}")
    yield made
    asyncio.run(_delete_prefix(made))


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    """moto's server on 127.0.0.1 (behind the AWS tests' fault-injecting proxy)."""
    from tests.adapters.cloud.aws_fake import MotoWithFaults  # noqa: PLC0415

    server = MotoWithFaults().start()
    yield server
    server.stop()
