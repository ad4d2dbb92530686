"""A point-in-time copy of the live tables, as arrays aligned with a compiled policy.

The gateway routes from a Snapshot and never waits on Redis to choose a pool. A
Snapshot is immutable; the refresher replaces it whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from base.types import BoolArray, FloatArray, IntArray
from router.compiled import CompiledPolicy, usd_per_token
from router.health import HealthRecord, PoolState
from router.view_tables import RegionLists, Stacked, ViewLists, price_order_exact

# Smoothing of the measured latency EWMAs: written by live.tables, replayed by the simulator.
EWMA_ALPHA = 0.2

__all__ = [
    "ModelView",
    "PoolRow",
    "PoolState",
    "RegionLists",
    "RegionView",
    "Snapshot",
    "Stacked",
    "ViewLists",
    "price_order_exact",
]


@dataclass(frozen=True)
class PoolRow:
    """One pool's live values as read from Redis. NaN or None means 'not known yet'."""

    ttft_ewma_ms: float = float("nan")
    tpot_ewma_ms: float = float("nan")
    # When each estimate was last fed by real traffic (unix s; 0 = unknown).
    ttft_at_s: float = 0.0
    tpot_at_s: float = 0.0
    ttft_p50_ms: float = float("nan")
    ttft_p99_ms: float = float("nan")
    tpot_p50_ms: float = float("nan")
    tpot_p99_ms: float = float("nan")
    samples: int = 0
    # Gateway-to-pool round trip measured by the health probe, ms (EWMA).
    rtt_ms: float = float("nan")
    errors: int = 0
    inflight: float = 0.0
    ready_replicas: float = float("nan")
    target_replicas: float = float("nan")
    # Base URLs of the pool's running replicas as its node group reports them (the
    # autoscaler publishes them); empty when nothing was published, and the policy's
    # static ``endpoints`` apply.
    endpoints: tuple[str, ...] = ()
    # Replicas an operator drained (``skyroute replica drain``): no new requests.
    drained: frozenset[str] = frozenset()
    # Replicas a gateway ejected for failed requests, shared with all gateways:
    # base URL -> (until unix s, reason) (``live.replica_health``).
    ejected: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    health: HealthRecord = field(default_factory=HealthRecord)

    @property
    def state(self) -> PoolState:
        """The pool's shared health state."""
        return self.health.state

    usd_per_gpu_hour: float = float("nan")
    price_source: str = ""
    price_fetched_at_s: float = 0.0
    # The feed's price is older than the policy's bound; still routed on, but shown.
    price_stale: bool = False


@dataclass(frozen=True, eq=False)
class RegionView:
    """One model's pools as clients of one region see them: what ``rank`` would otherwise
    work out per request from the policy's per-region arrays and the snapshot. Arrays
    follow the ModelView's ``members``.

    ``rtt_ms`` is the round trip to each pool (+inf where the region may not use it) and
    ``region_ok`` whether it is finite. ``ready_ok`` is ``region_ok & ready``: the
    eligible pools when no pool ramps and nothing is blocked; ``ready_priced`` is that
    and priced, the base of feasibility then. ``load_cap`` is the policy's
    ``model_load_cap`` for this region (None: no pool keeps a near-client reserve), and
    ``slot_limit`` the most requests (in flight + this one) a pool may hold for this
    region's clients: its batch slots less the reserve, whole slots (None with no cap).
    ``rtt_base`` stacks ``rtt_ms`` over the ModelView's ``tpot_base_ms`` (see Stacked);
    ``limits`` is the vectorised scoring's memo of its (TTFT, TPOT) limit rows, keyed by
    the limits (one entry per SLO class in use).
    """

    rtt_ms: FloatArray
    region_ok: BoolArray
    ready_ok: BoolArray
    ready_priced: BoolArray
    load_cap: FloatArray | None
    slot_limit: FloatArray | None
    rtt_base: FloatArray
    limits: dict[tuple[float, float], FloatArray] = field(default_factory=dict)

    @cached_property
    def lists(self) -> RegionLists:
        """The arrays as lists, built on first use (see ModelView.lists)."""
        limit = self.slot_limit
        return RegionLists(
            self.rtt_ms.tolist(),
            self.region_ok.tolist(),
            self.ready_ok.tolist(),
            None if limit is None else limit.tolist(),
        )


@dataclass(frozen=True, eq=False)
class ModelView:
    """What routing needs about one model's pools, precomputed once per snapshot so the
    request path does as few vector operations as possible. Arrays follow ``members``.

    A pool's TPOT is predicted from its profile at the occupancy the request would see:
    ``tpot_base_ms`` at an empty batch, growing by ``tpot_span_ms`` to a full one.
    ``tpot_measured_ms`` (0 where unmeasured) is a floor under that prediction: a measured
    TPOT can show a pool slower than its profile, but a measurement taken at an older,
    lighter load cannot hide the load the fresh in-flight count shows (and a measurement
    taken at a heavier one cannot push every request away until the next snapshot).
    ``tpot_queue_ms`` is the TPOT at which queued work drains: a full batch's (a queue
    only forms behind a full batch, whatever load the last measurement saw), or the
    measured one if that is slower; ``queue_output_ms`` is the model's expected output
    tokens times that, what one request ahead holds a slot for beyond its prefill.
    ``inv_slots`` is 1 / batch slots (0 where a pool has no ready replica: such a pool is
    not eligible anyway); ``one_minus_slots`` is 1 - slots. ``usd_per_token`` is +inf
    where no price is known, and then ``priced`` is False. ``ready`` is ``available &
    has_capacity``, and ``full_weight`` says no pool is ramping (every weight is 1), so
    the request path can skip the ramp draw. ``regions`` holds the view from each client
    region of the policy (RegionView).

    ``by_price`` lists the pools by USD per token, stable (equal prices in policy order,
    unpriced ones last), and ``sorted_price`` their prices in that order: as a request's
    cost is its tokens times the price, its cost order is this one filtered.
    ``price_order_exact`` says that holds to the last bit: any two distinct prices lie
    far enough apart that no token count rounds their costs equal (see
    ``price_order_exact``). ``stacked`` holds the constants the vectorised scoring reads
    two rows at a time. ``members_py`` and ``price_py`` are ``members`` and
    ``usd_per_token`` as lists, and ``members_obj`` and ``price_obj`` the same as arrays
    of those Python numbers, whose gathers read out without converting each element
    (``VectorScored.attempts``); built with the view, so that the first request after a
    snapshot does not convert a long model's arrays.
    """

    members: IntArray
    inflight: FloatArray
    tpot_base_ms: FloatArray
    tpot_span_ms: FloatArray
    tpot_measured_ms: FloatArray
    tpot_queue_ms: FloatArray
    queue_output_ms: FloatArray
    prefill_ms_per_token: FloatArray
    inv_slots: FloatArray
    one_minus_slots: FloatArray
    usd_per_token: FloatArray
    priced: BoolArray
    available: BoolArray
    weight: FloatArray
    has_capacity: BoolArray
    states: tuple[str, ...]
    ready: BoolArray
    full_weight: bool
    regions: Mapping[str, RegionView]
    by_price: IntArray
    sorted_price: FloatArray
    price_order_exact: bool
    stacked: Stacked
    members_py: list[int]
    price_py: list[float]
    members_obj: npt.NDArray[np.object_]
    price_obj: npt.NDArray[np.object_]

    @cached_property
    def lists(self) -> ViewLists:
        """The arrays as lists, built on first use and kept with the (immutable) view: a
        NumPy-to-list conversion per array per request would cost as much as the scoring."""
        return ViewLists(*(getattr(self, name).tolist() for name in ViewLists._fields))

    @cached_property
    def rows(self) -> list[tuple[float, float, float, float, float, float, float, float]]:
        """Per pool, what the scalar scoring's loop reads, as one tuple: prefill ms per
        token, queue_output_ms, tpot_queue_ms, inv_slots, one_minus_slots, tpot_base_ms,
        tpot_span_ms, tpot_measured_ms (unpacking a tuple is cheaper than eight list
        reads)."""
        v = self.lists
        return list(
            zip(
                v.prefill_ms_per_token, v.queue_output_ms, v.tpot_queue_ms, v.inv_slots,
                v.one_minus_slots, v.tpot_base_ms, v.tpot_span_ms, v.tpot_measured_ms,
                strict=True,
            )
        )  # fmt: skip


def _views(policy: CompiledPolicy, snap: Snapshot) -> dict[str, ModelView]:
    measured_ms = np.where(np.isnan(snap.tpot_ms), 0.0, snap.tpot_ms)
    slots = snap.ready * policy.concurrency
    has_capacity = snap.ready > 0
    inv_slots = np.divide(1.0, slots, out=np.zeros_like(slots), where=slots > 0)
    per_token = usd_per_token(snap.usd_per_gpu_hour, policy.gpus, policy.goodput_tps)
    priced = np.isfinite(per_token) & (per_token > 0)
    per_token = np.where(priced, per_token, np.inf)
    states = [_state(snap, pid).value for pid in policy.pool_ids]
    out: dict[str, ModelView] = {}
    for model, m in policy.by_model.items():
        spec = policy.policy.models[policy.route_model.get(model, model)]
        # The goodput profile says a full batch (max_concurrency sequences) emits
        # tokens_per_s, so each of them gets a token every concurrency / tokens_per_s:
        # that is where the predicted TPOT grows to. (Taking the SLO's TPOT for it put a
        # full batch past the TPOT headroom by construction: a pool of a few slots
        # looked infeasible whenever one of them was busy.) Queued work is still priced
        # at the SLO's TPOT at least: a replica may admit sequences up to it.
        full = np.maximum(policy.tpot_ms[m], policy.concurrency[m] * 1000.0 / policy.goodput_tps[m])
        drain = np.maximum(full, policy.slo[spec.default_slo].tpot_ms)
        tpot_queue_ms = np.maximum(drain, measured_ms[m])
        one_minus_slots = 1.0 - slots[m]
        ready = snap.available[m] & has_capacity[m]
        price = per_token[m]
        by_price = np.argsort(price, kind="stable")
        n = len(m)
        span = full - policy.tpot_ms[m]
        members_py, price_py = m.tolist(), price.tolist()
        out[model] = ModelView(
            members=m,
            inflight=snap.inflight[m],
            tpot_base_ms=policy.tpot_ms[m],
            tpot_span_ms=span,
            tpot_measured_ms=measured_ms[m],
            tpot_queue_ms=tpot_queue_ms,
            queue_output_ms=spec.expected_output_tokens * tpot_queue_ms,
            prefill_ms_per_token=1000.0 / policy.prefill_tps[m],
            inv_slots=inv_slots[m],
            one_minus_slots=one_minus_slots,
            usd_per_token=price,
            priced=priced[m],
            available=snap.available[m],
            weight=snap.weight[m],
            has_capacity=has_capacity[m],
            states=tuple(states[i] for i in m),
            ready=ready,
            full_weight=bool(np.all(snap.weight[m] >= 1.0)),
            regions={
                region: _region_view(
                    policy, (region, model), one_minus_slots, ready, priced[m], policy.tpot_ms[m]
                )
                for region in policy.rtt_ms
            },
            by_price=by_price,
            sorted_price=price[by_price],
            price_order_exact=price_order_exact(price[by_price]),
            stacked=Stacked(
                members=np.stack((m, m)),
                inflight=np.stack((snap.inflight[m], snap.inflight[m])),
                offset=np.stack((one_minus_slots, np.ones(n))),
                inv_slots=np.stack((inv_slots[m], inv_slots[m])),
                upper=np.stack((np.full(n, np.inf), np.ones(n))),
                lower=np.stack((np.zeros(n), np.full(n, -np.inf))),
                scale=np.stack((np.ones(n), span)),
            ),
            members_py=members_py,
            price_py=price_py,
            members_obj=np.array(members_py, dtype=object),
            price_obj=np.array(price_py, dtype=object),
        )
    return out


def _same_inputs(a: Snapshot, b: Snapshot) -> bool:
    """Whether ``_views`` would compute the same views for ``b`` as for ``a`` (built for
    the same policy): the columns it reads and each pool's state are equal (NaN equal
    to NaN: an unmeasured TPOT stays unmeasured)."""
    if a.pool_ids != b.pool_ids or not a.views:
        return False
    for x, y in (
        (a.inflight, b.inflight),
        (a.ready, b.ready),
        (a.weight, b.weight),
        (a.available, b.available),
        (a.tpot_ms, b.tpot_ms),
        (a.usd_per_gpu_hour, b.usd_per_gpu_hour),
    ):
        if not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            return False
    return all(_state(a, pid) is _state(b, pid) for pid in a.pool_ids)


def _state(snap: Snapshot, pid: str) -> PoolState:
    """A pool's state in ``snap``; healthy where it has no row."""
    row = snap.rows.get(pid)
    return row.state if row is not None else PoolState.HEALTHY


def _region_view(
    policy: CompiledPolicy,
    key: tuple[str, str],
    one_minus_slots: FloatArray,
    ready: BoolArray,
    priced: BoolArray,
    tpot_base_ms: FloatArray,
) -> RegionView:
    rtt, cap = policy.model_rtt_ms[key], policy.model_load_cap[key]
    region_ok = np.isfinite(rtt)
    limit = None
    if cap is not None:
        # The reserve is whole slots, the share kept for near clients rounded down: a
        # pool of a few slots (long prompts make slots dear) is not kept from far
        # clients for a fraction of a slot that nobody can use.
        # (At least 1e-9 slots: a pool with none is not eligible, and -inf x 0 is NaN.)
        slots = np.maximum(1.0 - one_minus_slots, 1e-9)
        limit = slots - np.floor((1.0 - cap) * slots + 1e-9)
    ready_ok = region_ok & ready
    return RegionView(
        rtt, region_ok, ready_ok, ready_ok & priced, cap, limit, np.stack((rtt, tpot_base_ms))
    )


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Live arrays aligned with ``pool_ids`` of the policy they were built for.

    ``inflight`` is the sum over every live gateway replica's share (requests).
    ``ready`` is ready replicas (the policy's initial count where unknown).
    ``available`` is True only for HEALTHY pools; ``weight`` is the share of normal
    traffic each may take (below 1 while a readmitted pool ramps up).
    ``usd_per_gpu_hour`` is the effective price: policy override, else live table, else NaN.
    """

    pool_ids: tuple[str, ...]
    ttft_ms: FloatArray
    tpot_ms: FloatArray
    inflight: FloatArray
    ready: FloatArray
    available: BoolArray
    weight: FloatArray
    usd_per_gpu_hour: FloatArray
    taken_at_s: float
    rows: Mapping[str, PoolRow] = field(default_factory=dict)
    views: Mapping[str, ModelView] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        policy: CompiledPolicy,
        rows: Mapping[str, PoolRow],
        taken_at_s: float,
        previous: Snapshot | None = None,
    ) -> Snapshot:
        """Align ``rows`` (pool id -> row; missing pools get defaults) with ``policy``.

        ``previous``: the last snapshot built for the same ``policy`` (the caller
        vouches for that), whose per-model views are taken over when every column they
        are computed from is unchanged. An idle gateway rebuilds its snapshot ten times
        a second from the same values, and the views were most of that work."""
        default = PoolRow()
        ordered = [rows.get(pid, default) for pid in policy.pool_ids]

        def col(values: list[float]) -> FloatArray:
            return np.asarray(values, dtype=np.float64)

        ready = col([r.ready_replicas for r in ordered])
        ready = np.where(np.isnan(ready), policy.initial_replicas, ready)
        live_price = col([r.usd_per_gpu_hour for r in ordered])
        price = np.where(
            np.isnan(policy.override_usd_per_gpu_hour), live_price, policy.override_usd_per_gpu_hour
        )

        ramp_s = policy.policy.health.ramp_s
        ttl = policy.policy.routing.measurement_ttl_s

        def fresh(value: float, at_s: float) -> float:
            # A pool that got no traffic for a while (say, because it measured slow) is
            # judged by its profile again, so it can win traffic back and be re-measured.
            return value if at_s <= 0 or taken_at_s - at_s <= ttl else float("nan")

        snap = cls(
            pool_ids=policy.pool_ids,
            ttft_ms=col([fresh(r.ttft_ewma_ms, r.ttft_at_s) for r in ordered]),
            tpot_ms=col([fresh(r.tpot_ewma_ms, r.tpot_at_s) for r in ordered]),
            inflight=col([r.inflight for r in ordered]),
            ready=ready,
            available=np.asarray([r.state is PoolState.HEALTHY for r in ordered], dtype=np.bool_),
            weight=col([r.health.weight(taken_at_s, ramp_s) for r in ordered]),
            usd_per_gpu_hour=price,
            taken_at_s=taken_at_s,
            rows={pid: r for pid, r in zip(policy.pool_ids, ordered, strict=True)},
        )
        if previous is not None and _same_inputs(previous, snap):
            views = previous.views
        else:
            views = _views(policy, snap)
        object.__setattr__(snap, "views", views)
        return snap

    @classmethod
    def empty(cls, policy: CompiledPolicy) -> Snapshot:
        """The snapshot to route from before Redis has answered once: policy defaults."""
        return cls.build(policy, {}, taken_at_s=0.0)
