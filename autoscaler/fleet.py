"""The fleet as ``decide()`` sees it: one array per attribute, aligned with the policy's pools."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autoscaler.config import ScalerConfig
from autoscaler.goodput import (
    GoodputObservation,
    goodput_tokens_per_s,
    observed_correction,
    update_correction,
)
from autoscaler.state import ScalerState
from base.types import BoolArray, FloatArray, IntArray
from router.health import PoolState
from router.policy import Policy, PoolSpec

__all__ = ["AUTOSCALER_REASON", "Fleet", "PoolStatus", "build_fleet"]

# Health reasons the autoscaler writes when it drains a pool start with this.
AUTOSCALER_REASON = "autoscaler:"


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """One pool as the sidecar sees it now.

    ``target``: replicas the cloud is asked for (booting included); ``ready``: replicas
    serving. ``managed``: the autoscaler has a node group for it. ``health`` and
    ``health_reason`` come from the shared health record; ``nodes`` are the live node
    ids and ``failed`` those the cloud reports FAILED.
    """

    pool_id: str
    target: int
    ready: int
    managed: bool = True
    health: PoolState = PoolState.HEALTHY
    health_reason: str = ""
    needs_replacement: bool = False
    nodes: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    observation: GoodputObservation | None = None

    @property
    def usable(self) -> bool:
        """Whether its capacity counts: not drained by an operator, not flagged for
        replacement, and not ejected or probing while it has ready replicas (an empty
        pool is ejected because it is empty, and new replicas readmit it)."""
        if self.needs_replacement:
            return False
        if self.health is PoolState.DRAINING:
            return self.health_reason.startswith(AUTOSCALER_REASON)
        return self.health is PoolState.HEALTHY or self.ready == 0


@dataclass(frozen=True, eq=False)
class Fleet:
    """Per-pool arrays in policy order.

    ``cost``: USD/hour per replica (0 where the price is unknown, then ``priced`` is
    False). ``goodput``: tokens/s per replica within the model's default SLO, corrected;
    ``capacity``: the same where the pool is usable, else 0. ``adjustable``: managed,
    priced and usable, so the plan may resize it. ``blocked``: may not grow now.
    """

    specs: tuple[PoolSpec, ...]
    status: tuple[PoolStatus, ...]
    cost: FloatArray
    priced: BoolArray
    goodput: FloatArray
    capacity: FloatArray
    adjustable: BoolArray
    blocked: BoolArray
    spot: BoolArray
    current: IntArray
    ready: IntArray
    low: IntArray
    high: IntArray
    corrections: Mapping[str, float]

    @property
    def size(self) -> int:
        """Number of pools."""
        return len(self.specs)


def build_fleet(
    pools: Sequence[PoolStatus],
    prices: Mapping[str, float],
    policy: Policy,
    state: ScalerState,
    config: ScalerConfig,
    now_s: float,
) -> Fleet:
    """The fleet's arrays, with goodput corrections updated from this cycle's
    observations. A policy pool missing from ``pools`` is unmanaged at its initial size."""
    given = {p.pool_id: p for p in pools}
    specs = tuple(policy.pools)
    status = tuple(
        given.get(s.id) or PoolStatus(s.id, s.replicas.initial, s.replicas.initial, managed=False)
        for s in specs
    )
    corrections = dict(state.corrections)
    goodput = np.zeros(len(specs))
    for i, (spec, st) in enumerate(zip(specs, status, strict=True)):
        model = policy.models[spec.model]
        slo = policy.slo_classes[model.default_slo]
        if st.observation is not None:
            seen = observed_correction(spec.goodput, slo, st.observation)
            previous = corrections.get(spec.id, 1.0)
            corrections[spec.id] = update_correction(previous, seen, config.correction_alpha)
        goodput[i] = goodput_tokens_per_s(
            spec.goodput, slo, corrections.get(spec.id, 1.0), embedding=model.kind == "embedding"
        )
    price = np.asarray([prices.get(s.id, math.nan) for s in specs], dtype=np.float64)
    priced = np.isfinite(price) & (price > 0)
    cost = np.where(priced, price, 0.0) * np.asarray([s.gpus_per_replica for s in specs])
    usable = np.asarray([st.usable for st in status], dtype=np.bool_)

    def ints(values: list[int]) -> IntArray:
        return np.asarray(values, dtype=np.intp)

    return Fleet(
        specs=specs,
        status=status,
        cost=cost,
        priced=priced,
        goodput=goodput,
        capacity=np.where(usable, goodput, 0.0),
        adjustable=usable & priced & np.asarray([st.managed for st in status], dtype=np.bool_),
        blocked=np.asarray([state.blocked(s.id, now_s) for s in specs], dtype=np.bool_),
        spot=np.asarray([s.price.purchase == "spot" for s in specs], dtype=np.bool_),
        current=ints([st.target for st in status]),
        ready=ints([st.ready for st in status]),
        low=ints([s.replicas.min for s in specs]),
        high=ints([s.replicas.max for s in specs]),
        corrections=corrections,
    )
