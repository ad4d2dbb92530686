"""The simulated fleet's static description: one model's pools, their engines and prices.

``scale_policy`` scales the fleet to a trace's load. A 70B replica of the demo fleet is an
8-GPU node with 256 batch slots; the 1-hour Azure conversation trace keeps a third of one
busy, so no routing or scaling decision would matter. With ``factor`` f every replica
becomes f of its node: batch slots, goodput and price all times f, TPOT still running from
the profile's base (one sequence) to its full value (every slot busy). $/token and the
TTFT of a lone request are unchanged; replica bounds stay as written, so the same pools
now hold 1/f less capacity. Fluid-wise, f = 1/32 is the unscaled fleet under a 32×
heavier trace, at 1/32 of the cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from base.types import FloatArray, IntArray
from router.compiled import CompiledPolicy, compile_policy, usd_per_token
from router.policy import Policy, PoolSpec, ScalingSpec, SLOClass
from simengine.perf_model import PROFILES, EngineProfile, profile_name
from simulator.errors import SimulationError

ProfileOf = Callable[[PoolSpec], EngineProfile]


def demo_profile(pool: PoolSpec) -> EngineProfile:
    """The simulated engine's profile for ``pool``: its GPU family and model."""
    return PROFILES[profile_name(pool.gpu_type, pool.model)]


def parse_fraction(text: str) -> float:
    """``"1/32"`` or ``"0.03125"`` -> 0.03125. Raises SimulationError unless in (0, 1]."""
    try:
        num, _, den = text.partition("/")
        value = float(num) / float(den) if den else float(num)
    except (ValueError, ZeroDivisionError) as exc:
        raise SimulationError(f"not a fraction: {text!r}") from exc
    if not 0 < value <= 1:
        raise SimulationError(f"fleet scale must be in (0, 1], got {text}")
    return value


def scale_policy(policy: Policy, factor: float) -> Policy:
    """Each replica becomes ``factor`` of its node: price, goodput and slots times ``factor``.

    Raises SimulationError for a pool without a policy price (the simulator has no feed).
    """
    pools = []
    for pool in policy.pools:
        price = pool.price.usd_per_gpu_hour
        if price is None:
            raise SimulationError(f"pool {pool.id}: the simulator needs price.usd_per_gpu_hour")
        g = pool.goodput
        goodput = g.model_copy(
            update={
                "tokens_per_s": g.tokens_per_s * factor,
                "max_concurrency": max(1, round(g.max_concurrency * factor)),
            }
        )
        cost = pool.price.model_copy(update={"usd_per_gpu_hour": price * factor})
        pools.append(pool.model_copy(update={"price": cost, "goodput": goodput}))
    return policy.model_copy(update={"pools": pools})


def slice_profile(profile: EngineProfile, factor: float) -> EngineProfile:
    """``profile`` with ``factor`` of its batch slots (at least one), same base/full TPOT."""
    if factor == 1.0:
        return profile
    slots = max(1, round(profile.batch_slots * factor))
    return replace(profile, name=f"{profile.name}*{factor:g}", batch_slots=slots)


def fluid_goodput_tokens_per_s(profile: EngineProfile, tpot_slo_ms: float) -> float:
    """Most output tokens/s one replica can emit with average TPOT within ``tpot_slo_ms``.

    The perf model's TPOT line evaluated at the fractional occupancy n where it meets the
    SLO (capped at the batch slots): n / tpot(n). No mix of occupancies whose
    token-weighted TPOT meets the SLO emits more, so a bound built on it stays a bound
    (``goodput_tokens_per_s`` rounds n down and can be beaten by such a mix).
    """
    base, slots = profile.tpot_base_ms, profile.batch_slots
    if tpot_slo_ms < base:
        return 0.0
    slope = 0.0 if slots == 1 else (profile.tpot_full_ms - base) / (slots - 1)
    n = float(slots) if slope == 0.0 else min(float(slots), 1.0 + (tpot_slo_ms - base) / slope)
    return n * 1000.0 / (base + slope * (n - 1.0))


@dataclass(frozen=True, eq=False)
class FleetSpec:
    """One model's pools as the simulator sees them; arrays are over those pools (local
    index ``p``), and ``members[p]`` is the pool's index in ``compiled.pool_ids``.

    Prices in USD per replica-hour and per token; times in s; ``rtt_s[r, p]`` is the round
    trip from client region ``regions[r]`` to pool p (inf: not allowed).
    """

    compiled: CompiledPolicy
    model: str
    slo_class: str
    slo: SLOClass
    scale: float
    members: IntArray
    pool_ids: tuple[str, ...]
    providers: tuple[str, ...]
    profiles: tuple[EngineProfile, ...]
    usd_per_replica_hour: FloatArray
    usd_per_token: FloatArray
    min_replicas: IntArray
    max_replicas: IntArray
    initial_replicas: IntArray
    provisioning_s: FloatArray
    regions: tuple[str, ...]
    rtt_s: FloatArray

    @property
    def size(self) -> int:
        """Number of pools simulated."""
        return len(self.pool_ids)

    @property
    def batch_slots(self) -> IntArray:
        """Batch slots per replica."""
        return np.asarray([pr.batch_slots for pr in self.profiles], dtype=np.intp)

    @property
    def slo_slots(self) -> IntArray:
        """Occupancy per replica at which TPOT still meets the SLO (0: never)."""
        tpot = self.slo.tpot_ms
        return np.asarray([pr.max_running_within(tpot) for pr in self.profiles], dtype=np.intp)

    def tpot_table_s(self, p: int) -> list[float]:
        """Pool p's TPOT in s by running sequences 0..slots (0 reads as 1)."""
        pr = self.profiles[p]
        return [pr.tpot_ms(max(n, 1)) / 1000.0 for n in range(pr.batch_slots + 1)]

    def prefill_s(self, prompt_tokens: IntArray) -> FloatArray:
        """Prefill time in s of each prompt on each pool, shape (requests, pools)."""
        rate = np.asarray([pr.prefill_tokens_per_s for pr in self.profiles])
        out: FloatArray = np.maximum(prompt_tokens, 0)[:, None] / rate[None, :]
        return out

    @classmethod
    def build(
        cls,
        policy: Policy,
        *,
        model: str | None = None,
        slo_class: str | None = None,
        scale: float = 1.0,
        profile_of: ProfileOf = demo_profile,
        provisioning_s: float | None = None,
    ) -> FleetSpec:
        """The spec of ``model``'s pools (default: the first chat model) in ``policy``
        scaled by ``scale``; ``provisioning_s`` overrides each pool's scaling lead time.

        Raises SimulationError for an unknown model or SLO class or a pool without price.
        """
        chat = [m for m, spec in policy.models.items() if spec.kind == "chat"]
        model = model or (chat[0] if chat else next(iter(policy.models)))
        if model not in policy.models:
            raise SimulationError(f"model {model!r} is not in the policy")
        slo_class = slo_class or policy.models[model].default_slo
        if slo_class not in policy.slo_classes:
            raise SimulationError(f"SLO class {slo_class!r} is not in the policy")
        scaled = scale_policy(policy, scale)
        compiled = compile_policy(scaled)
        members = compiled.by_model[model]
        pools = [scaled.pools[i] for i in members]
        gpus = compiled.gpus[members]
        price = compiled.override_usd_per_gpu_hour[members]
        default_lead = float(ScalingSpec.model_fields["provisioning_s"].default)
        lead = [
            provisioning_s
            if provisioning_s is not None
            else (p.scaling.provisioning_s if p.scaling else default_lead)
            for p in pools
        ]
        regions = tuple(scaled.client_regions)
        rtt = np.asarray([compiled.rtt_ms[r][members] for r in regions]) / 1000.0
        return cls(
            compiled=compiled,
            model=model,
            slo_class=slo_class,
            slo=scaled.slo_classes[slo_class],
            scale=scale,
            members=members,
            pool_ids=tuple(p.id for p in pools),
            providers=tuple(p.provider for p in pools),
            profiles=tuple(slice_profile(profile_of(p), scale) for p in pools),
            usd_per_replica_hour=price * gpus,
            usd_per_token=usd_per_token(price, gpus, compiled.goodput_tps[members]),
            min_replicas=np.asarray([p.replicas.min for p in pools], dtype=np.intp),
            max_replicas=np.asarray([p.replicas.max for p in pools], dtype=np.intp),
            initial_replicas=np.asarray([p.replicas.initial for p in pools], dtype=np.intp),
            provisioning_s=np.asarray(lead, dtype=np.float64),
            regions=regions,
            rtt_s=rtt,
        )

    def region_index(self, weights: Mapping[str, float]) -> tuple[IntArray, FloatArray]:
        """Indices into ``regions`` and normalised weights. Raises SimulationError."""
        unknown = sorted(set(weights) - set(self.regions))
        if unknown:
            raise SimulationError(f"client regions not in the policy: {unknown}")
        w = np.asarray(list(weights.values()), dtype=np.float64)
        if len(w) == 0 or (w < 0).any() or not math.isfinite(w.sum()) or w.sum() <= 0:
            raise SimulationError("client region weights must be >= 0 and sum to > 0")
        idx = np.asarray([self.regions.index(r) for r in weights], dtype=np.intp)
        return idx, w / w.sum()


def auto_scale(
    policy: Policy,
    mean_output_tokens_per_s: float,
    *,
    mean_prompt_tokens_per_s: float = 0.0,
    model: str | None = None,
    slo_class: str | None = None,
    profile_of: ProfileOf = demo_profile,
) -> float:
    """The fleet scale at which the model's cheapest pool per token, at its max replicas,
    carries the trace's mean load at the SLO: it carries the average but not the peaks.
    Snapped to whole batch slots of that pool, in (0, 1].

    A request holds a batch slot through its prefill as well as its decode, so the load
    is counted in busy slots: decode (output tokens/s at the pool's fluid goodput) plus
    prefill (prompt tokens/s over the prefill rate), against the occupancy at which TPOT
    still meets the SLO. Counting output alone gave a long-prompt, short-output trace a
    single slot per replica.
    """
    spec = FleetSpec.build(policy, model=model, slo_class=slo_class, profile_of=profile_of)
    p = int(np.argmin(spec.usd_per_token))
    profile = spec.profiles[p]
    replicas = float(spec.max_replicas[p])
    goodput = fluid_goodput_tokens_per_s(profile, spec.slo.tpot_ms)
    slo_slots = int(spec.slo_slots[p])
    if goodput <= 0 or slo_slots <= 0 or replicas <= 0:
        raise SimulationError(f"pool {spec.pool_ids[p]} cannot meet the TPOT SLO")
    decode = mean_output_tokens_per_s / (goodput * replicas)
    prefill = mean_prompt_tokens_per_s / (profile.prefill_tokens_per_s * slo_slots * replicas)
    slots = round(profile.batch_slots * (decode + prefill))
    return float(min(max(slots, 1), profile.batch_slots) / profile.batch_slots)
