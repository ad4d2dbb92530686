"""A policy compiled to NumPy arrays, so that scoring is a handful of vector operations.

Compiling happens once per policy load, never per request. Arrays are aligned with
``pool_ids``; each model's candidate pools are an index array into them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from base.types import FloatArray, IntArray
from router.policy import Policy, SLOClass


@dataclass(frozen=True, eq=False)
class CompiledPolicy:
    """Static per-pool arrays of one policy. Immutable; share it freely between tasks."""

    policy: Policy
    pool_ids: tuple[str, ...]
    index: Mapping[str, int]
    providers: tuple[str, ...]
    regions: tuple[str, ...]
    gpus: FloatArray
    goodput_tps: FloatArray
    prefill_tps: FloatArray
    concurrency: FloatArray
    tpot_ms: FloatArray
    initial_replicas: FloatArray
    # Policy price override in USD per GPU-hour; NaN where the live table decides.
    override_usd_per_gpu_hour: FloatArray
    # Route key -> candidate pools. A model's own name keys the pools of its serving
    # version (all its pools if it has no versions); ``route_key(model, version)`` keys
    # each declared version's pools, for rollouts.
    by_model: Mapping[str, IntArray]
    # Client region -> RTT in ms to every pool; +inf where the region may not use it.
    rtt_ms: Mapping[str, FloatArray]
    # (client region, model) -> RTT in ms to each of the model's pools (by_model order).
    model_rtt_ms: Mapping[tuple[str, str], FloatArray]
    # (client region, model) -> the highest batch occupancy ((in flight + 1) / slots) at
    # which each of the model's pools takes that region's requests: 1 - near_reserve for
    # a far client of a pool some region is near to, else +inf (routing.near_reserve);
    # None where no pool caps that region, so the request path skips the comparison.
    model_load_cap: Mapping[tuple[str, str], FloatArray | None]
    slo: Mapping[str, SLOClass]
    # 1 - headroom: the share of the TTFT and TPOT targets a prediction must stay under.
    keep_ttft: float
    keep_tpot: float
    # Models with a pool whose engine answers one choice per request: ``n > 1`` is
    # fanned out by the gateway for them (PoolSpec.supports_n).
    fan_out_n: frozenset[str] = frozenset()
    # (client region, model) -> model_rtt_ms, model_load_cap and whether each RTT is
    # finite (the region may use the pool) as Python lists, for the scalar scoring of
    # models with few pools (router.score_core).
    model_lists: Mapping[tuple[str, str], tuple[list[float], list[float] | None, list[bool]]] = (
        field(default_factory=dict)
    )

    # Route key -> the model it belongs to; model -> its declared versions (sorted).
    route_model: Mapping[str, str] = field(default_factory=dict)
    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of pools."""
        return len(self.pool_ids)


def route_key(model: str, version: str | None) -> str:
    """The key of ``model``'s pools of ``version`` in ``CompiledPolicy.by_model`` and the
    snapshot's views (``model`` itself for None: the serving version)."""
    return model if version is None else f"{model}@{version}"


def compile_policy(policy: Policy) -> CompiledPolicy:
    """Turn a validated policy into arrays. Pure and deterministic."""
    pools = policy.pools
    ids = tuple(p.id for p in pools)

    def arr(values: list[float]) -> FloatArray:
        out = np.asarray(values, dtype=np.float64)
        out.setflags(write=False)
        return out

    by_model: dict[str, IntArray] = {}
    route_model: dict[str, str] = {}
    versions: dict[str, tuple[str, ...]] = {}

    def members_of(key: str, model: str, version: str | None) -> None:
        members = np.asarray(
            [
                i
                for i, p in enumerate(pools)
                if p.model == model and (version is None or p.version == version)
            ],
            dtype=np.intp,
        )
        members.setflags(write=False)
        by_model[key], route_model[key] = members, model

    for name, spec in policy.models.items():
        members_of(name, name, spec.version)
        declared = tuple(sorted({p.version for p in pools if p.model == name and p.version}))
        if declared:
            versions[name] = declared
        for version in declared:
            members_of(route_key(name, version), name, version)
    rtt: dict[str, FloatArray] = {}
    for name, region in policy.client_regions.items():
        rtt[name] = arr([region.rtt_ms.get(p.location, np.inf) for p in pools])
    routing = policy.routing
    near = np.zeros(len(pools), dtype=np.bool_)
    for region_rtt in rtt.values():
        near |= region_rtt <= routing.near_rtt_ms
    model_rtt: dict[tuple[str, str], FloatArray] = {}
    load_cap: dict[tuple[str, str], FloatArray | None] = {}
    for region_name, region_rtt in rtt.items():
        far = near & (region_rtt > routing.near_rtt_ms) & (routing.near_reserve > 0)
        cap = np.where(far, 1.0 - routing.near_reserve, np.inf)
        for model_name, members in by_model.items():
            sub = region_rtt[members]
            sub.setflags(write=False)
            model_rtt[(region_name, model_name)] = sub
            sub_cap = cap[members]
            sub_cap.setflags(write=False)
            load_cap[(region_name, model_name)] = sub_cap if np.isfinite(sub_cap).any() else None
    lists: dict[tuple[str, str], tuple[list[float], list[float] | None, list[bool]]] = {}
    for key, sub in model_rtt.items():
        caps = load_cap[key]
        lists[key] = (
            sub.tolist(),
            None if caps is None else caps.tolist(),
            np.isfinite(sub).tolist(),
        )
    tpot_headroom = routing.slo_headroom if routing.tpot_headroom is None else routing.tpot_headroom
    nan = float("nan")
    return CompiledPolicy(
        policy=policy,
        pool_ids=ids,
        index={pid: i for i, pid in enumerate(ids)},
        providers=tuple(p.provider for p in pools),
        regions=tuple(p.location for p in pools),
        gpus=arr([p.gpus_per_replica for p in pools]),
        goodput_tps=arr([p.goodput.tokens_per_s for p in pools]),
        prefill_tps=arr([p.goodput.prefill_tokens_per_s for p in pools]),
        concurrency=arr([p.goodput.max_concurrency for p in pools]),
        tpot_ms=arr([p.goodput.tpot_ms for p in pools]),
        initial_replicas=arr([p.replicas.initial for p in pools]),
        override_usd_per_gpu_hour=arr(
            [
                p.price.usd_per_gpu_hour if p.price.usd_per_gpu_hour is not None else nan
                for p in pools
            ]
        ),
        by_model=by_model,
        rtt_ms=rtt,
        model_rtt_ms=model_rtt,
        model_load_cap=load_cap,
        slo=dict(policy.slo_classes),
        keep_ttft=1.0 - routing.slo_headroom,
        keep_tpot=1.0 - tpot_headroom,
        fan_out_n=frozenset(p.model for p in pools if not p.supports_n),
        model_lists=lists,
        route_model=route_model,
        versions=versions,
    )


def usd_per_token(
    price_usd_per_gpu_hour: FloatArray, gpus: FloatArray, goodput_tps: FloatArray
) -> FloatArray:
    """USD per output token = GPU-hour price × GPUs ÷ (goodput tokens/s × 3600)."""
    result: FloatArray = price_usd_per_gpu_hour * gpus / (goodput_tps * 3600.0)
    return result
