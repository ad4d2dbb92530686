"""Ranking a request of a model under a rollout (``gateway.rollout_routing``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace

from gateway.finish import RequestContext
from gateway.metrics import GatewayMetrics
from gateway.rollout_routing import ActiveRollout
from gateway.routing_state import RoutingState
from router.scoring import Ranking, RouteRequest, TriedPool


def rank_for_rollout(
    state: RoutingState,
    metrics: GatewayMetrics,
    route: RouteRequest,
    active: ActiveRollout,
    ctx: RequestContext,
    now: float,
) -> tuple[Ranking, Iterator[TriedPool]]:
    """The ranking of the version the rollout gives the request, and the pools to fail
    over to after it (lazily, as ``Ranking.tried``): the stable version's, after the
    canary's, so a canary failure never drops a request. A request the canary version
    cannot serve (no pool allowed for it, or none feasible where a stable one is) goes
    to stable: a canary share is a share of the traffic that version could serve."""
    version = active.version_for(ctx.session_id, ctx.tenant, random.random())
    stable_route = replace(route, version=active.stable)
    if version == active.stable:
        metrics.rollout_requests.labels(model=route.model, version=version).inc()
        return state.rank(stable_route, now), iter(())
    canary = state.rank(replace(route, version=version), now)
    stable = state.rank(stable_route, now)
    if not canary.n_tried or (canary.n_feasible == 0 and stable.n_feasible > 0):
        metrics.rollout_requests.labels(model=route.model, version=active.stable).inc()
        return stable, iter(())
    metrics.rollout_requests.labels(model=route.model, version=version).inc()
    return canary, stable.tried()
