"""Where every request ends, whatever happened to it: one usage record, one demand
record for the autoscaler, one decision in the dashboard's log, one access-log line, the
request metrics and SLO attainment, and the end of its trace. Keeping it in one place is
what makes the usage records reconcile with the metrics and the logs."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import ParamSpec

from adapters.upstream import UpstreamTimeouts
from base.errors import UpstreamError
from base.log_fields import log_fields
from gateway.decisions import Decision, DecisionLog
from gateway.metrics import GatewayMetrics
from gateway.replicas import ReplicaPick
from gateway.rollout_routing import RolloutCounts
from gateway.tracing import NOOP, ChildSpan, RequestTrace
from gateway.usage import UsageLog
from live.access_table import NANO, UsageRecord
from live.demand_table import DemandRecord
from router.policy import PoolSpec, RoutingSettings
from router.scoring import RouteRequest

# One line per finished request (JSON fields via the entry point's formatter).
access_log = logging.getLogger("skyroute.access")

# Ends of a request that are the engine's fault once bytes had reached the client (a
# client leaving or the gateway shutting down is not; a client error is the client's).
_ENGINE_FAILURES = frozenset({"stream_error", "stream_incomplete"})


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent the request and what admission charged: for usage records and overhead.

    ``received_at`` is ``time.perf_counter()`` when the gateway got the request;
    ``est_tokens`` is what the tenant's TPM bucket was charged at admission;
    ``session_id`` is the client's ``x-session-id`` (replica affinity), if any.
    """

    tenant: str
    request_id: str
    est_tokens: int
    received_at: float
    trace: RequestTrace = field(default=NOOP)
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of a request on one pool (and ``replica`` of it), with the routing
    decision that chose it."""

    pool: PoolSpec
    url: str
    usd_per_token: float
    number: int
    reason: str
    candidates: int
    predicted_ttft_ms: float
    slo_ttft_ms: float
    slo_tpot_ms: float
    span: ChildSpan = NOOP
    # How long this attempt may wait for its first byte (gateway.deadlines), seconds.
    first_byte_s: float = 60.0
    replica: ReplicaPick | None = None

    def timeouts(self, routing: RoutingSettings) -> UpstreamTimeouts:
        """Connect, first-byte and idle timeouts of this attempt (seconds)."""
        return UpstreamTimeouts(
            routing.connect_timeout_ms / 1000, self.first_byte_s, routing.idle_timeout_ms / 1000
        )

    def response_headers(self, cost: float, request_id: str) -> list[tuple[bytes, bytes]]:
        """The ``x-request-id`` and ``x-skyroute-*`` headers of the client's response
        (``cost`` in USD), as ASGI raw headers: lowercase names, Latin-1 values."""
        pool = self.pool
        return [
            (b"x-request-id", request_id.encode("latin-1")),
            (b"x-skyroute-pool", pool.id.encode("latin-1")),
            (b"x-skyroute-provider", pool.provider.encode("latin-1")),
            (b"x-skyroute-region", pool.region.encode("latin-1")),
            (b"x-skyroute-attempts", b"%d" % self.number),
            (b"x-skyroute-cost-usd", b"%.8f" % cost),
        ]


P = ParamSpec("P")


def on_next_turn(fn: Callable[P, None]) -> Callable[P, None]:
    """``fn`` called on the event loop's next turn instead of now (with no running loop,
    a stream finalised at shutdown: at once). Exceptions go to the loop's handler.

    For the end of a request: called where an answer is complete and about to be
    written, the task writing it does not yield before its bytes are handed to the
    socket, so ``fn`` runs after the client has its answer, not on the way to it (at
    100 req/s the records, the metrics and the access line were 45 us of the 200 us
    the forwarder itself spent on a non-streaming answer). Any later request of this
    process is handled after it: the loop runs callbacks in the order they were
    scheduled. A latency ``fn`` measures then runs until the answer was written."""

    def soon(*args: P.args, **kwargs: P.kwargs) -> None:
        call = partial(fn, *args, **kwargs)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            call()
            return
        loop.call_soon(call)

    return soon


class RequestFinisher:
    """Records the end of each request exactly once."""

    def __init__(
        self,
        usage: UsageLog[UsageRecord],
        demand: UsageLog[DemandRecord],
        decisions: DecisionLog,
        metrics: GatewayMetrics,
        rollouts: RolloutCounts | None = None,
    ) -> None:
        self.usage = usage
        self.demand = demand
        self.decisions = decisions
        self.metrics = metrics
        self.rollouts = rollouts if rollouts is not None else RolloutCounts()
        # Usage record uids: unique across processes and restarts (a random epoch per
        # finisher, then a counter), the ledger's idempotency id (store.usage_rows).
        self._uid_epoch = secrets.token_hex(8)
        self._uids = itertools.count()
        # The accounting but the usage record, once the answer is written
        # (``on_next_turn``), so that it does not delay the answer.
        self._account_soon = on_next_turn(self._account)

    def finish(
        self,
        ctx: RequestContext,
        route: RouteRequest,
        attempt: Attempt | None,
        prompt: int,
        completion: int,
        cost_usd: float,
        status: str,
        *,
        ttft_ms: float | None = None,
        tpot_ms: float | None = None,
        response_model: str | None = None,
    ) -> None:
        """Record one finished request (``status`` is ``ok`` or an error code)."""
        now = time.time()
        self._bill(now, ctx, route, attempt, prompt, completion, cost_usd, status)
        self._account(
            now, ctx, route, attempt, prompt, completion, cost_usd, status, ttft_ms, tpot_ms,
            response_model,
        )  # fmt: skip

    def finish_soon(
        self,
        ctx: RequestContext,
        route: RouteRequest,
        attempt: Attempt | None,
        prompt: int,
        completion: int,
        cost_usd: float,
        status: str,
        *,
        ttft_ms: float | None = None,
        tpot_ms: float | None = None,
        response_model: str | None = None,
    ) -> None:
        """``finish``, for where an answer is complete and about to be written: the usage
        record is made (and journaled) now, before the client can have the answer, so a
        process killed at any point after that still bills the request; the rest (demand,
        decision, metrics, access line, trace) on the loop's next turn, off the answer's
        way (``on_next_turn``)."""
        now = time.time()
        self._bill(now, ctx, route, attempt, prompt, completion, cost_usd, status)
        self._account_soon(
            now, ctx, route, attempt, prompt, completion, cost_usd, status, ttft_ms, tpot_ms,
            response_model,
        )  # fmt: skip

    def _bill(
        self,
        now: float,
        ctx: RequestContext,
        route: RouteRequest,
        attempt: Attempt | None,
        prompt: int,
        completion: int,
        cost_usd: float,
        status: str,
    ) -> None:
        # The usage record: the journal takes it at once (``UsageLog.record``).
        pool = attempt.pool if attempt else None
        self.usage.record(
            UsageRecord(
                ts_s=now,
                request_id=ctx.request_id,
                tenant=ctx.tenant,
                model=route.model,
                pool=pool.id if pool else "",
                provider=pool.provider if pool else "",
                region=pool.location if pool else "",
                prompt_tokens=prompt,
                completion_tokens=completion,
                cost_nusd=round(cost_usd * NANO),
                status=status,
                est_tokens=ctx.est_tokens,
                uid=f"{self._uid_epoch}.{next(self._uids):x}",
            )
        )

    def _account(
        self,
        now: float,
        ctx: RequestContext,
        route: RouteRequest,
        attempt: Attempt | None,
        prompt: int,
        completion: int,
        cost_usd: float,
        status: str,
        ttft_ms: float | None,
        tpot_ms: float | None,
        response_model: str | None,
    ) -> None:
        pool = attempt.pool if attempt else None
        latency_ms = (time.perf_counter() - ctx.received_at) * 1000.0
        if attempt is not None:
            self.decisions.add(
                Decision(
                    ts_s=now,
                    model=route.model,
                    tenant=ctx.tenant,
                    pool=attempt.pool.id,
                    provider=attempt.pool.provider,
                    region=attempt.pool.location,
                    reason=attempt.reason,
                    candidates=attempt.candidates,
                    attempts=attempt.number,
                    predicted_ttft_ms=attempt.predicted_ttft_ms,
                    cost_usd=cost_usd,
                    status=status,
                )
            )
        if status == "ok" and attempt is not None and attempt.replica is not None:
            attempt.replica.observe(ttft_ms, tpot_ms)
        met = (
            status == "ok"
            and attempt is not None
            and (ttft_ms is None or ttft_ms <= attempt.slo_ttft_ms)
            and (tpot_ms is None or tpot_ms <= attempt.slo_tpot_ms)
        )
        self.metrics.observe_finish(
            route, pool.id if pool else "", status, latency_ms, ttft_ms, tpot_ms, completion, met
        )
        if pool is not None and (status == "ok" or status in _ENGINE_FAILURES):
            # A failed attempt before any byte was counted where it failed (the
            # forwarder's ``_failed``); what ends here is the attempt that answered, or
            # a stream that broke after its first byte.
            self.rollouts.attempt(
                pool, ok=status == "ok", slo_miss=not met, ttft_ms=ttft_ms, tpot_ms=tpot_ms,
                output_tokens=completion,
            )  # fmt: skip
        if access_log.isEnabledFor(logging.INFO):
            log_fields(
                access_log,
                logging.INFO,
                "request",
                {
                    "request_id": ctx.request_id,
                    "tenant": ctx.tenant,
                    "model": route.model,
                    "slo_class": route.slo_class,
                    "pool": pool.id if pool else None,
                    "provider": pool.provider if pool else None,
                    "region": pool.location if pool else None,
                    "status": status,
                    "attempts": attempt.number if attempt else 0,
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "cost_usd": round(cost_usd, 9),
                    "latency_ms": round(latency_ms, 3),
                    "ttft_ms": round(ttft_ms, 3) if ttft_ms is not None else None,
                },
            )
        if ctx.trace is not NOOP:
            ctx.trace.set(
                {
                    "gen_ai.usage.input_tokens": prompt,
                    "gen_ai.usage.output_tokens": completion,
                    "skyroute.status": status,
                    "skyroute.cost_usd": cost_usd,
                    **({"gen_ai.response.model": response_model} if response_model else {}),
                    **({"skyroute.ttft.measured_ms": ttft_ms} if ttft_ms is not None else {}),
                    **(
                        {
                            "skyroute.pool": pool.id,
                            "skyroute.provider": pool.provider,
                            "skyroute.region": pool.location,
                            "skyroute.attempts": attempt.number,
                        }
                        if pool and attempt
                        else {}
                    ),
                }
            )
        ctx.trace.end(None if status == "ok" else UpstreamError(status))
        # Demand for the autoscaler: a failed request still counts, with the output it
        # asked for, so a capacity shortfall does not hide the demand behind it.
        output = completion if status == "ok" else max(ctx.est_tokens - route.prompt_tokens, 0)
        self.demand.record(DemandRecord(now, route.model, route.client_region, prompt, output, met))
