"""Builders for tiny, hand-checkable fleets: policies with test engine profiles."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from router.policy import Policy, PoolSpec
from simengine.perf_model import EngineProfile
from simulator.engine import SimConfig, Workload
from simulator.spec import FleetSpec
from simulator.trace import from_columns
from skyroute.simulate_cmd import register

DATA = Path(__file__).parent / "data"
AZURE_HEAD = DATA / "azure_conv_first400.csv"

# gpu_type -> profile. "SLOW": prefill 1000 tok/s, TPOT 10 ms alone .. 20 ms with 2 running.
PROFILES = {
    "SLOW": EngineProfile("slow", 2, 1000.0, 10.0, 20.0, 1000.0, 100_000),
    "FAST": EngineProfile("fast", 2, 4000.0, 5.0, 10.0, 4000.0, 100_000),
}


def profile_of(pool: PoolSpec) -> EngineProfile:
    """Test profiles by GPU type."""
    return PROFILES[pool.gpu_type]


def pool(
    name: str,
    gpu: str = "SLOW",
    *,
    region: str = "us-east-1",
    usd_per_gpu_hour: float = 3.6,
    tokens_per_s: float = 100.0,
    replicas: tuple[int, int, int] = (0, 4, 1),
) -> dict[str, Any]:
    """One pool of model ``m`` as a policy dict (1 GPU per replica)."""
    prof = PROFILES[gpu]
    return {
        "id": f"aws:{region}:{name}",
        "provider": "aws",
        "region": region,
        "model": "m",
        "upstream_model": "m",
        "gpu_type": gpu,
        "gpus_per_replica": 1,
        "endpoints": ["http://127.0.0.1:1"],
        "price": {"source": "policy", "usd_per_gpu_hour": usd_per_gpu_hour},
        "goodput": {
            "tokens_per_s": tokens_per_s,
            "prefill_tokens_per_s": prof.prefill_tokens_per_s,
            "max_concurrency": prof.batch_slots,
            "tpot_ms": prof.tpot_base_ms,
        },
        "replicas": dict(zip(("min", "max", "initial"), replicas, strict=True)),
    }


def policy(
    pools: list[dict[str, Any]],
    rtt_ms: dict[str, dict[str, float]] | None = None,
    *,
    ttft_ms: float = 500.0,
    tpot_ms: float = 15.0,
) -> Policy:
    """A policy serving model ``m`` from ``pools``; by default one client region
    ``aws:us-east-1`` 20 ms from every pool."""
    if rtt_ms is None:
        rtt_ms = {"aws:us-east-1": {f"aws:{p['region']}": 20.0 for p in pools}}
    return Policy.model_validate(
        {
            "slo_classes": {"s": {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms}},
            "models": {"m": {"default_slo": "s", "expected_output_tokens": 10}},
            "pools": pools,
            "client_regions": {k: {"rtt_ms": v} for k, v in rtt_ms.items()},
            # Hand-worked numbers sit right at the targets: no safety margin here.
            "routing": {"default_client_region": next(iter(rtt_ms)), "slo_headroom": 0.0},
        }
    )


def spec_of(pol: Policy, **kwargs: Any) -> FleetSpec:
    """The fleet spec of model ``m`` with the test profiles."""
    return FleetSpec.build(pol, profile_of=profile_of, **kwargs)


def workload(spec: FleetSpec, rows: list[tuple[float, int, int]], *, seed: int = 0) -> Workload:
    """A workload of (arrival s, prompt, output) rows, no warm-up, first client region."""
    t, prompt, out = (list(c) for c in zip(*rows, strict=True))
    trace = from_columns(t, prompt, out, "test")
    config = SimConfig(seed=seed, warmup_s=0.0)
    return Workload.build(trace, spec, {spec.regions[0]: 1.0}, config)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator."""
    return np.random.default_rng(0)


def simulate_cli(out: Path, *args: str) -> dict[str, Any]:
    """Run ``skyroute simulate`` on the head of the Azure trace at fleet scale 1/64 with a
    20 s warm-up and no plots, plus ``args``; check it exits 0 and return result.json."""
    parser = argparse.ArgumentParser(prog="skyroute")
    register(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args([
        "simulate", "--trace", str(AZURE_HEAD), "--scale-fleet", "1/64", "--warmup-s", "20",
        "--out", str(out), "--no-plots", *args,
    ])  # fmt: skip
    assert parsed.func(parsed) == 0
    doc: dict[str, Any] = json.loads((out / "result.json").read_text())
    return doc
