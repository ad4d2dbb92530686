"""Forward one request to the ranked pools, failing over until one answers.

A connect error, a timeout, a 5xx or a 429 before any byte reached the client is retried
on the next-ranked pool, within the policy's attempt budget. Once bytes have gone to the
client the request is never retried: a stream that breaks ends with an SSE error event.
Other 4xx answers are the client's problem and pass through unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterator
from itertools import chain
from typing import Any

from starlette.responses import Response

from adapters.upstream import UpstreamClient
from base.errors import RoutingError, UpstreamError
from gateway.deadlines import first_byte_deadline_s, hedge_after_s
from gateway.decisions import DecisionLog
from gateway.exchange import Exchange
from gateway.finish import Attempt, RequestContext, RequestFinisher
from gateway.hedging import race
from gateway.metrics import GatewayMetrics
from gateway.openai_request import Operation, ParsedRequest
from gateway.relay import close_unread
from gateway.replica_attempts import RequestReplicas
from gateway.rollout_rank import rank_for_rollout
from gateway.routing_state import RoutingState
from gateway.shadow import ShadowMirror
from gateway.tracing import NOOP, ChildSpan, attempt_span
from gateway.upstream_answers import unavailable
from gateway.usage import UsageLog
from live.access_table import UsageRecord
from live.demand_table import DemandRecord
from router.scoring import RouteRequest, TriedPool

logger = logging.getLogger(__name__)


class Forwarder:
    """Sends requests upstream through ``UpstreamClient`` with failover; each attempt
    runs in ``Exchange`` (``gateway.exchange``)."""

    def __init__(
        self,
        state: RoutingState,
        upstream: UpstreamClient,
        metrics: GatewayMetrics,
        usage: UsageLog[UsageRecord],
        demand: UsageLog[DemandRecord],
    ) -> None:
        self.state = state
        self.metrics = metrics
        self.finisher = RequestFinisher(usage, demand, DecisionLog(), metrics, state.rollouts)
        self.exchange = Exchange(state, upstream, metrics, self.finisher)
        self.shadow = ShadowMirror(state, upstream, metrics)

    def end_streams(self) -> int:
        """End every stream being relayed (``StreamRelays.end_all``)."""
        return self.exchange.relays.end_all()

    async def forward(
        self,
        parsed: ParsedRequest,
        route: RouteRequest,
        path: str,
        headers: dict[str, str],
        ctx: RequestContext,
    ) -> Response:
        """Route and forward one request; return the client's response. Every outcome,
        failures included, becomes one usage record.

        Raises RoutingError/NoFeasiblePool when no pool may take it, or the last
        UpstreamError when every attempt failed. The time from ``ctx.received_at`` to
        the first attempt is the gateway's own overhead.
        """
        try:
            return await self._forward(parsed, route, path, headers, ctx)
        except (RoutingError, UpstreamError) as exc:
            status = "no_pool" if isinstance(exc, RoutingError) else "upstream_error"
            self.finisher.finish(ctx, route, None, 0, 0, 0.0, status)
            raise
        except asyncio.CancelledError:
            # The client went away (gateway.fast_paths): the attempt was closed, nothing
            # is failed over, and the request still gets its one record.
            self.finisher.finish(ctx, route, None, 0, 0, 0.0, "client_disconnected")
            raise

    async def _forward(
        self,
        parsed: ParsedRequest,
        route: RouteRequest,
        path: str,
        headers: dict[str, str],
        ctx: RequestContext,
    ) -> Response:
        now = time.time()
        self.state.retry_budget.on_request(now)
        traced = ctx.trace is not NOOP
        route_span = ctx.trace.child("route") if traced else NOOP
        active = self.state.rollouts.active.get(route.model) if self.state.rollouts.active else None
        fallback: Iterator[TriedPool] = iter(())
        stable_answer: asyncio.Future[bytes | None] | None = None
        if active is None:
            ranking = self.state.rank(route, now)
        else:
            ranking, fallback = rank_for_rollout(self.state, self.metrics, route, active, ctx, now)
            if (
                active.shadow_share
                and parsed.operation is not Operation.EMBEDDING
                and random.random() < active.shadow_share
            ):
                if active.similarity is not None and not parsed.stream:
                    stable_answer = asyncio.get_running_loop().create_future()
                self.shadow.mirror(parsed, route, active, path, stable_answer)
        self.metrics.route_decisions.inc((route.model, ranking.reason))
        if traced:
            route_span.set(
                {
                    "skyroute.candidates": len(ranking.candidates),
                    "skyroute.feasible": ranking.n_feasible,
                    "skyroute.reason": ranking.reason,
                    **(
                        {"skyroute.pool": ranking.pool_ids[ranking.order[0]]}
                        if ranking.n_tried
                        else {}
                    ),
                }
            )
            route_span.end()
        if not ranking.n_tried:
            raise unavailable(ranking, route.model)
        policy = self.state.policy
        routing = policy.policy.routing
        budget = routing.max_attempts
        # The pools to try, pulled from the ranking only as far as the attempts get: at
        # many pools, reading the whole order as Python numbers costs more than ranking.
        ranked = chain(ranking.tried(), fallback)
        tried: list[TriedPool] = []
        replicas = RequestReplicas(
            self.state.replicas, parsed, ctx.session_id,
            prefix_affinity=policy.policy.models[route.model].prefix_affinity,
        )  # fmt: skip
        number = 0
        k = 0  # the next of ``tried`` to consider

        def start_next() -> Coroutine[Any, Any, Response] | None:
            nonlocal number, k
            while number < budget:
                if k == len(tried):
                    pulled = next(ranked, None)
                    if pulled is None:
                        break
                    tried.append(pulled)
                i, predicted_ttft_ms, est_cost, per_token = tried[k]
                pool = policy.policy.pools[i]
                pick = replicas.pick(pool.id)
                if pick is None or not self.state.outlier.allows(pool.id, now):
                    k += 1  # no usable replica left: like an ejected pool
                    continue
                if number >= 1 and not self.state.retry_budget.try_retry(now):
                    # Not consumed: a hedge refused now leaves the pool for the failover
                    # that may come later (the budget may allow it then).
                    self.metrics.retries_denied.labels(model=route.model).inc()
                    self.state.outlier.release_trial(pool.id)
                    return None
                k += 1
                number += 1
                span: ChildSpan = NOOP
                attempt_headers = headers
                if traced:
                    span, attempt_headers = attempt_span(
                        ctx.trace, pool, number, predicted_ttft_ms, est_cost, headers
                    )
                attempt = Attempt(
                    pool,
                    pick.address + path,
                    per_token,
                    number,
                    ranking.reason,
                    len(ranking.candidates),
                    predicted_ttft_ms,
                    ranking.slo_ttft_ms,
                    ranking.slo_tpot_ms,
                    span,
                    first_byte_deadline_s(
                        routing, stream=parsed.stream, slo_ttft_ms=ranking.slo_ttft_ms,
                        slo_tpot_ms=ranking.slo_tpot_ms, predicted_ttft_ms=predicted_ttft_ms,
                        output_tokens=ranking.est_tokens - route.prompt_tokens,
                    ),
                    pick,
                )  # fmt: skip
                if number > 1:
                    self.metrics.failovers.labels(model=route.model).inc()
                else:
                    self.metrics.overhead_seconds.observe((), time.perf_counter() - ctx.received_at)
                return self._attempt(parsed, attempt, attempt_headers, route, ctx, retry)
            return None

        def retry(attempt: Attempt) -> None:
            # A failed replica: the same pool's next replica is tried before the next pool.
            if attempt.replica is not None and replicas.another(attempt.replica):
                i = policy.index[attempt.pool.id]
                tried.insert(k, next(t for t in tried if t[0] == i))

        hedge_s: float | None = None
        if policy.slo[route.slo_class].hedge and ranking.n_tried > 1:
            first_ttft_ms, first_tpot_ms = ranking.first_prediction()
            hedge_s = hedge_after_s(
                slo_ttft_ms=ranking.slo_ttft_ms,
                predicted_ttft_ms=first_ttft_ms,
                predicted_tpot_ms=first_tpot_ms,
                output_tokens=0 if parsed.stream else ranking.est_tokens - route.prompt_tokens,
            )
        answer: bytes | None = None
        try:
            outcome = await race(start_next, hedge_s, close_unread)
            if stable_answer is not None and outcome.value.status_code == 200:
                answer = getattr(outcome.value, "body", None)
        except LookupError:
            raise unavailable(ranking, route.model) from None
        finally:
            if stable_answer is not None and not stable_answer.done():
                # The shadow copy compares its answer with this one (None: no answer).
                stable_answer.set_result(answer)
        if outcome.hedged_first_ms is not None:
            self.metrics.hedges.labels(model=route.model).inc()
            if outcome.winner > 0:
                # The first pool stayed silent past what it should have taken while
                # another answered: a failure of that pool (so a hung one is ejected
                # rather than hedged forever), and a TTFT at least that long.
                first_id = policy.pool_ids[ranking.order[0]]
                self.state.observe(first_id, ok=False, ttft_ms=outcome.hedged_first_ms)
                self.state.outlier.on_failure(
                    first_id, time.time(), "silent past the hedge point; another pool answered"
                )
        return outcome.value

    async def _attempt(
        self,
        parsed: ParsedRequest,
        attempt: Attempt,
        headers: dict[str, str],
        route: RouteRequest,
        ctx: RequestContext,
        retry: Callable[[Attempt], None],
    ) -> Response:
        """One attempt, streaming or not. Raises UpstreamError after its bookkeeping
        (``retry`` decides whether the same pool gets another attempt)."""
        pool = attempt.pool
        try:
            if parsed.stream:
                return await self.exchange.stream(parsed, attempt, headers, route, ctx)
            response = await self.exchange.unary(parsed, attempt, headers, route, ctx)
            attempt.span.end()
            return response
        except UpstreamError as exc:
            exc.pool_id = exc.pool_id or pool.id
            attempt.span.end(exc)
            self.state.outlier.release_trial(pool.id)
            retry(attempt)
            logger.warning("attempt %d on pool %s failed: %s", attempt.number, pool.id, exc)
            raise
        except asyncio.CancelledError:
            # The client left, or a hedge won: not the pool's fault.
            attempt.span.end()
            self.state.outlier.release_trial(pool.id)
            raise
