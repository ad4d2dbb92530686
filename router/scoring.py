"""Rank every pool that serves a request's model: the pure core of skyroute.

``rank(request, policy, snapshot, local_inflight)`` has no I/O, reads no clock and
touches no globals, so the gateway, the simulator and ``skyroute explain`` all get the
same answer from the same inputs. It is vectorised over the model's pools:

1. eligible  = serves the model, region allowed for the client, available, has replicas
2. TTFT      = RTT + queueing wait + prefill; TPOT = the profile at the fresh batch
               occupancy, never below the measured value
3. feasible  = eligible, both predictions under the SLO class less its headroom, a price
               known, and (far clients) the pool's batch not into the near clients' reserve
4. cost      = (prompt + expected output tokens) × USD/token of the pool
5. order     = near-tie group of cheapest feasible (lightest load first), other feasible
               by cost, then — only if the policy's fallback is ``fastest`` — the
               infeasible-but-eligible pools by predicted TTFT.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import ParamSpec, TypeVar

import numpy as np

from base.errors import ModelNotFound
from base.types import BoolArray, FloatArray, IntArray
from router.compiled import CompiledPolicy, route_key
from router.ranking_explain import RankedPool, explain, why_ineligible
from router.score_core import MAX_SCALAR_POOLS, ScalarScored, TrafficMix, TriedPool, score_scalar
from router.score_numpy import VectorScored, score_vector
from router.snapshot import ModelView, RegionView, Snapshot

__all__ = ["RankedPool", "Ranking", "RouteRequest", "TriedPool", "rank"]

# What a scoring path answers (router.score_core, router.score_numpy).
Scored = ScalarScored | VectorScored

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What the router needs to know about one request.

    ``max_output_tokens`` is None when the client set no limit (the model's expected
    output is used to price it). ``est_tokens`` is the request's priced size, prompt plus
    expected output, as the gateway charged it at admission (0: the router works it out
    from the model); the ranking prices the request by it and carries it on.
    ``allowed_regions`` (``provider:region``), if given, further restricts where the
    request may go, failover included. ``ramp_draw`` in [0, 1) admits the request to
    pools whose ramp weight exceeds it: a readmitted pool at weight 0.3 sees about 30 %
    of its normal traffic (the gateway draws it at random).
    """

    model: str
    prompt_tokens: int
    max_output_tokens: int | None
    slo_class: str
    client_region: str
    allowed_regions: frozenset[str] | None = None
    ramp_draw: float = 0.0
    est_tokens: int = 0
    # The model's version to route to (a rollout's choice); None: its serving version.
    version: str | None = None


@dataclass(frozen=True, eq=False)
class Ranking:
    """The router's answer. ``order`` lists pool indices (into ``pool_ids``) to try,
    best first. The per-pool arrays are indexed like ``pool_ids``; pools that do not
    serve the model hold +inf / False there.

    Only the order and the request's numbers are computed on the request path, and
    kept as the scoring left them (Python lists for a model of few pools); ``tried``,
    ``n_tried`` and ``first_prediction`` read them directly. Of a model of many pools,
    the fallback pools are sorted only once ``tried`` gets past the feasible ones (or
    the order is read). Every array (``order`` included) and the reasons are built on
    first access (explain, tests).
    """

    request: RouteRequest
    pool_ids: tuple[str, ...]
    view: ModelView
    region: RegionView
    scored: Scored
    n_feasible: int
    slo_ttft_ms: float
    slo_tpot_ms: float
    # The targets less their headroom: what a pool's predictions must meet to be feasible.
    ttft_limit_ms: float
    tpot_limit_ms: float
    near_tie: float
    # The request's priced size (tokens): cost = est_tokens x the pool's USD per token.
    est_tokens: int

    @property
    def candidates(self) -> IntArray:
        """The model's pools (indices into ``pool_ids``), in policy order."""
        return self.view.members

    @property
    def n_tried(self) -> int:
        """How many pools ``order`` lists (0: nothing to try)."""
        return self.scored.n_tried

    @cached_property
    def local_order(self) -> IntArray:
        """``order`` as indices into ``candidates``."""
        return np.asarray(self.scored.local_order, dtype=np.intp)

    @cached_property
    def order(self) -> IntArray:
        """Pool indices to try, best first."""
        result: IntArray = self.view.members[self.local_order]
        return result

    # Arrays over ``candidates`` (the model's pools), in policy order.
    @cached_property
    def local_ttft_ms(self) -> FloatArray:
        """Predicted TTFT per candidate, ms."""
        return np.asarray(self.scored.ttft_ms, dtype=np.float64)

    @cached_property
    def local_tpot_ms(self) -> FloatArray:
        """Predicted TPOT per candidate, ms."""
        return np.asarray(self.scored.tpot_ms, dtype=np.float64)

    @cached_property
    def local_cost_usd(self) -> FloatArray:
        """Estimated cost of the request per candidate, USD (inf without a price)."""
        result: FloatArray = self.est_tokens * self.view.usd_per_token
        return result

    @property
    def local_usd_per_token(self) -> FloatArray:
        """USD per token per candidate (inf without a price)."""
        return self.view.usd_per_token

    @cached_property
    def local_load(self) -> FloatArray:
        """(in flight + 1) / batch slots per candidate."""
        return np.asarray(self.scored.load, dtype=np.float64)

    @property
    def local_load_cap(self) -> FloatArray | None:
        """The highest load at which each candidate takes this client region's requests
        (None: no cap); see ``CompiledPolicy.model_load_cap``."""
        return self.region.load_cap

    @cached_property
    def local_eligible(self) -> BoolArray:
        """Eligible per candidate."""
        return np.asarray(self.scored.eligible, dtype=np.bool_)

    @cached_property
    def local_feasible(self) -> BoolArray:
        """Feasible per candidate."""
        return np.asarray(self.scored.feasible, dtype=np.bool_)

    @cached_property
    def local_region_ok(self) -> BoolArray:
        """Whether the client (and the request's allowed regions) may use each candidate."""
        return np.asarray(self.scored.region_ok, dtype=np.bool_)

    @cached_property
    def local_available(self) -> BoolArray:
        """Healthy, not blocked by this replica, and admitted by the ramp draw."""
        return np.asarray(self.scored.available, dtype=np.bool_)

    def _wide(self, local: FloatArray, fill: float) -> FloatArray:
        out = np.full(len(self.pool_ids), fill)
        out[self.candidates] = local
        return out

    def _wide_bool(self, local: BoolArray) -> BoolArray:
        out = np.zeros(len(self.pool_ids), dtype=np.bool_)
        out[self.candidates] = local
        return out

    @cached_property
    def ttft_ms(self) -> FloatArray:
        """Predicted TTFT per pool, ms."""
        return self._wide(self.local_ttft_ms, np.inf)

    @cached_property
    def tpot_ms(self) -> FloatArray:
        """Predicted TPOT per pool, ms."""
        return self._wide(self.local_tpot_ms, np.inf)

    @cached_property
    def cost_usd(self) -> FloatArray:
        """Estimated cost of the request per pool, USD (inf without a price)."""
        return self._wide(self.local_cost_usd, np.inf)

    @cached_property
    def load(self) -> FloatArray:
        """(in flight + 1) / batch slots per pool."""
        return self._wide(self.local_load, np.inf)

    @cached_property
    def eligible(self) -> BoolArray:
        """Serves the model, region allowed, available and with ready replicas."""
        return self._wide_bool(self.local_eligible)

    @cached_property
    def feasible(self) -> BoolArray:
        """Eligible, priced, and predicted to meet the SLO class."""
        return self._wide_bool(self.local_feasible)

    @cached_property
    def why_ineligible(self) -> tuple[str, ...]:
        """Per pool, why it may not take the request ('' if it may)."""
        return why_ineligible(self)

    @property
    def reason(self) -> str:
        """Why the first pool in ``order`` is first (``no-eligible-pool`` if empty)."""
        if not self.n_tried:
            return "no-eligible-pool"
        return "cheapest-feasible" if self.n_feasible else "fallback-fastest"

    def attempts(self) -> Iterator[tuple[str, float, float]]:
        """(pool id, predicted TTFT ms, estimated cost USD) in the order to try them."""
        for i, ttft, cost, _ in self.tried():
            yield self.pool_ids[i], ttft, cost

    def tried(self) -> Iterator[TriedPool]:
        """(pool index, predicted TTFT ms, estimated cost USD, USD per token) in the order
        to try them; the request path's view. Lazy: a caller that stops after the first
        pools does not pay for the rest (at a thousand pools, the whole order as Python
        numbers costs more than ranking it)."""
        return self.scored.attempts(self.view, self.est_tokens)

    def first_prediction(self) -> tuple[float, float]:
        """(TTFT ms, TPOT ms) predicted for the first pool to try. Raises IndexError when
        there is none."""
        j = self.scored.local_order[0]
        return float(self.scored.ttft_ms[j]), float(self.scored.tpot_ms[j])

    def explain(self) -> list[RankedPool]:
        """Every candidate pool, tried ones first, with the reason for its place."""
        return explain(self)


def _fast_new(cls: Callable[P, T]) -> Callable[P, T]:
    """A constructor of the frozen dataclass ``cls`` with its ``__init__``'s signature (so
    mypy checks every call) that fills the instance's ``__dict__`` at once. The generated
    ``__init__`` sets each field through ``object.__setattr__``, about as dear per field
    as a line of the scalar scoring. Keyword arguments only."""

    def make(*args: P.args, **kwargs: P.kwargs) -> T:
        if args:
            raise TypeError("fields by name only")
        obj: T = object.__new__(cls)  # type: ignore[arg-type]  # cls is a class
        obj.__dict__.update(kwargs)
        return obj

    return make


_new_ranking = _fast_new(Ranking)


def rank(
    request: RouteRequest,
    policy: CompiledPolicy,
    snapshot: Snapshot,
    local_inflight: FloatArray | None = None,
    local_blocked: BoolArray | None = None,
    mix: TrafficMix | None = None,
) -> Ranking:
    """Rank the pools serving ``request.model``. Pure; raises ModelNotFound only.

    ``local_inflight`` (requests, aligned with the policy) is this gateway replica's own
    in-flight count, fresher than the snapshot's sum over the other replicas.
    ``local_blocked`` marks pools this replica has ejected but the snapshot does not
    show yet. ``mix`` is the model's recent traffic, which prices the queue ahead (None:
    this request's prompt and the policy's expected output). An unknown client region
    or SLO class falls back to the policy defaults. Models with at most
    ``MAX_SCALAR_POOLS`` pools are scored with Python floats (``router.score_core``),
    others with NumPy; both give the same answer. ``request.version`` picks one of the
    model's declared versions (ModelNotFound names ``model@version`` if it has none).
    """
    routed = route_key(request.model, request.version)
    view = snapshot.views.get(routed)
    if view is None:
        raise ModelNotFound(routed)
    pol = policy.policy
    spec = pol.models[request.model]
    slo = policy.slo.get(request.slo_class) or policy.slo[spec.default_slo]
    regions = view.regions
    region = regions.get(request.client_region) or regions[pol.routing.default_client_region]
    est_tokens = request.est_tokens or request.prompt_tokens + (
        spec.expected_output_tokens
        if request.max_output_tokens is None
        else request.max_output_tokens
    )
    m = view.members
    region_allowed = None
    if request.allowed_regions is not None:
        locs, allowed = policy.regions, request.allowed_regions
        region_allowed = [locs[i] in allowed for i in m.tolist()]
    ttft_limit, tpot_limit = slo.ttft_ms * policy.keep_ttft, slo.tpot_ms * policy.keep_tpot
    routing = pol.routing
    score = score_scalar if len(m) <= MAX_SCALAR_POOLS else score_vector
    s = score(
        view, region, region_allowed, local_inflight, local_blocked, request.prompt_tokens,
        est_tokens, ttft_limit, tpot_limit, request.ramp_draw, routing.near_tie,
        routing.fallback == "fastest", mix,
    )  # fmt: skip
    return _new_ranking(
        request=request,
        pool_ids=policy.pool_ids,
        view=view,
        region=region,
        scored=s,
        n_feasible=s.n_feasible,
        slo_ttft_ms=slo.ttft_ms,
        slo_tpot_ms=slo.tpot_ms,
        ttft_limit_ms=ttft_limit,
        tpot_limit_ms=tpot_limit,
        near_tie=routing.near_tie,
        est_tokens=est_tokens,
    )
