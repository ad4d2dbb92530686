"""Forward one request to the ranked pools, failing over until one answers.

A connect error, a timeout, a 5xx or a 429 before any byte reached the client is retried
on the next-ranked pool, within the policy's attempt budget. Once bytes have gone to the
client the request is never retried: a stream that breaks ends with an SSE error event.
Other 4xx answers are the client's problem and pass through unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
from starlette.responses import Response, StreamingResponse

from adapters.upstream import UpstreamClient, UpstreamResponse, UpstreamTimeouts
from gateway.decisions import Decision, DecisionLog
from gateway.metrics import GatewayMetrics
from gateway.openai_request import ParsedRequest
from gateway.retry_budget import RetryBudget
from gateway.routing_state import RoutingState
from gateway.streaming import StreamWatch, error_event
from gateway.usage import UsageLog
from router.access_table import NANO, UsageRecord
from router.errors import (
    NoFeasiblePool,
    RoutingError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeout,
)
from router.policy import PoolSpec
from router.scoring import Ranking, RouteRequest

logger = logging.getLogger(__name__)
# One line per finished request (JSON fields via the entry point's formatter).
access_log = logging.getLogger("skyroute.access")

_JSON = "application/json"
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent the request and what admission charged: for usage records and overhead.

    ``received_at`` is ``time.perf_counter()`` when the gateway got the request;
    ``est_tokens`` is what the tenant's TPM bucket was charged at admission.
    """

    tenant: str
    request_id: str
    est_tokens: int
    received_at: float


@dataclass(frozen=True, slots=True)
class _Attempt:
    pool: PoolSpec
    url: str
    usd_per_token: float
    number: int
    reason: str
    candidates: int
    predicted_ttft_ms: float


def _usage(body: bytes) -> tuple[int | None, int | None]:
    try:
        data = orjson.loads(body)
        usage = data.get("usage") or {}
        return usage.get("prompt_tokens"), usage.get("completion_tokens")
    except (orjson.JSONDecodeError, AttributeError):
        return None, None


def _unavailable(ranking: Ranking, model: str) -> RoutingError:
    reasons = sorted({r.reason for r in ranking.explain()})
    detail = "; ".join(reasons) or "no pool serves it"
    if ranking.eligible.any():
        return NoFeasiblePool(f"no pool can meet the SLO for model {model!r}: {detail}")
    return RoutingError(f"no pool is available for model {model!r}: {detail}")


class Forwarder:
    """Sends requests upstream through ``UpstreamClient`` with failover."""

    def __init__(
        self,
        state: RoutingState,
        upstream: UpstreamClient,
        metrics: GatewayMetrics,
        usage: UsageLog,
    ) -> None:
        self.state = state
        self.upstream = upstream
        self.metrics = metrics
        self.usage = usage
        self.decisions = DecisionLog()
        self._rr: dict[str, int] = {}
        routing = state.policy.policy.routing
        self.retry_budget = RetryBudget(
            routing.retry_budget_ratio, routing.retry_budget_min, routing.retry_budget_window_s
        )

    def _timeouts(self) -> UpstreamTimeouts:
        r = self.state.policy.policy.routing
        return UpstreamTimeouts(
            r.connect_timeout_ms / 1000, r.first_byte_timeout_ms / 1000, r.idle_timeout_ms / 1000
        )

    def _url(self, pool: PoolSpec, path: str) -> str:
        n = self._rr.get(pool.id, 0)
        self._rr[pool.id] = n + 1
        return str(pool.endpoints[n % len(pool.endpoints)]).rstrip("/") + path

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
            self._record(ctx, route, None, 0, 0, 0.0, status)
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
        self.retry_budget.on_request(now)
        ranking = self.state.rank(route, now)
        if len(ranking.order) == 0:
            raise _unavailable(ranking, route.model)
        policy = self.state.policy
        budget = policy.policy.routing.max_attempts
        est_tokens = route.prompt_tokens + (
            route.max_output_tokens or policy.policy.models[route.model].expected_output_tokens
        )
        last: UpstreamError | None = None
        number = 0
        for i in ranking.order:
            if number >= budget:
                break
            pool = policy.policy.pools[i]
            if not self.state.outlier.allows(pool.id, now):
                continue
            if number >= 1 and not self.retry_budget.try_retry(now):
                self.metrics.retries_denied.labels(model=route.model).inc()
                self.state.outlier.release_trial(pool.id)
                break
            number += 1
            per_token = float(ranking.cost_usd[i]) / max(est_tokens, 1)
            attempt = _Attempt(
                pool,
                self._url(pool, path),
                per_token,
                number,
                ranking.reason,
                len(ranking.candidates),
                float(ranking.ttft_ms[i]),
            )
            if number > 1:
                self.metrics.failovers.labels(model=route.model).inc()
            else:
                self.metrics.overhead_seconds.observe(time.perf_counter() - ctx.received_at)
            try:
                if parsed.stream:
                    return await self._stream(parsed, attempt, headers, route, ctx)
                return await self._unary(parsed, attempt, headers, route, ctx)
            except UpstreamError as exc:
                last = exc
                self.state.outlier.release_trial(pool.id)
                logger.warning("attempt %d on pool %s failed: %s", number, pool.id, exc)
        if last is None:
            raise _unavailable(ranking, route.model)
        raise last

    def _record(
        self,
        ctx: RequestContext,
        route: RouteRequest,
        attempt: _Attempt | None,
        prompt: int,
        completion: int,
        cost_usd: float,
        status: str,
    ) -> None:
        """The one place a request ends: usage record, decision log, access log line."""
        now = time.time()
        pool = attempt.pool if attempt else None
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
        if access_log.isEnabledFor(logging.INFO):
            access_log.info(
                "request",
                extra={
                    "fields": {
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
                        "latency_ms": round((time.perf_counter() - ctx.received_at) * 1000.0, 3),
                    }
                },
            )
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
            )
        )

    def _failed(self, pool_id: str, exc: UpstreamError) -> None:
        self.state.observe(pool_id, ok=False)
        self.metrics.upstream_errors.labels(pool=pool_id, kind=type(exc).__name__).inc()
        self.state.outlier.on_failure(pool_id, time.time(), str(exc))

    def _headers(self, attempt: _Attempt, cost: float) -> dict[str, str]:
        pool = attempt.pool
        return {
            "x-skyroute-pool": pool.id,
            "x-skyroute-provider": pool.provider,
            "x-skyroute-region": pool.region,
            "x-skyroute-attempts": str(attempt.number),
            "x-skyroute-cost-usd": f"{cost:.8f}",
        }

    async def _open(
        self, parsed: ParsedRequest, attempt: _Attempt, headers: dict[str, str]
    ) -> UpstreamResponse:
        body = parsed.upstream_body(attempt.pool.upstream_model)
        resp = await self.upstream.post(attempt.url, body, headers, self._timeouts())
        if resp.status >= 500 or resp.status == 429:
            resp.close()
            raise UpstreamStatusError(
                f"pool {attempt.pool.id} answered {resp.status}",
                pool_id=attempt.pool.id,
                status=resp.status,
            )
        return resp

    async def _unary(
        self,
        parsed: ParsedRequest,
        attempt: _Attempt,
        headers: dict[str, str],
        route: RouteRequest,
        ctx: RequestContext,
    ) -> Response:
        pool_id = attempt.pool.id
        self.state.acquire(pool_id)
        started = time.perf_counter()
        try:
            resp = await self._open(parsed, attempt, headers)
            async with resp:
                body = await resp.read()
        except UpstreamError as exc:
            self._failed(pool_id, exc)
            raise
        finally:
            self.state.release(pool_id)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if resp.status != 200:
            # A client error (bad parameters, context too long): the pool is healthy.
            self.state.outlier.on_success(pool_id, time.time())
            self._record(ctx, route, attempt, 0, 0, 0.0, f"client_error_{resp.status}")
            return Response(
                body, status_code=resp.status, media_type=_JSON, headers=self._headers(attempt, 0.0)
            )
        prompt, completion = _usage(body)
        prompt_tokens = prompt if prompt is not None else route.prompt_tokens
        tokens = prompt_tokens + (completion or 0)
        tpot = None
        if completion and completion >= 8:
            # No first-token time is visible without streaming; the prefill share is
            # taken off using the pool's profile so TPOT is not overstated.
            prefill_ms = route.prompt_tokens / attempt.pool.goodput.prefill_tokens_per_s * 1000
            tpot = max(elapsed_ms - prefill_ms, 0.0) / completion
        self.state.observe(pool_id, ok=True, tpot_ms=tpot)
        self.state.outlier.on_success(pool_id, time.time())
        self.metrics.observe_request(route, pool_id, "200", elapsed_ms / 1000.0)
        cost = tokens * attempt.usd_per_token
        self._record(ctx, route, attempt, prompt_tokens, completion or 0, cost, "ok")
        return Response(body, media_type=_JSON, headers=self._headers(attempt, cost))

    async def _stream(
        self,
        parsed: ParsedRequest,
        attempt: _Attempt,
        headers: dict[str, str],
        route: RouteRequest,
        ctx: RequestContext,
    ) -> Response:
        pool_id = attempt.pool.id
        self.state.acquire(pool_id)
        started = time.perf_counter()
        try:
            resp = await self._open(parsed, attempt, headers)
        except UpstreamError as exc:
            self.state.release(pool_id)
            self._failed(pool_id, exc)
            raise
        if resp.status != 200:
            try:
                body = await resp.read()
            finally:
                resp.close()
                self.state.release(pool_id)
            self.state.outlier.on_success(pool_id, time.time())
            self._record(ctx, route, attempt, 0, 0, 0.0, f"client_error_{resp.status}")
            return Response(
                body, status_code=resp.status, media_type=_JSON, headers=self._headers(attempt, 0.0)
            )
        chunks = resp.iter_chunks()
        watch = StreamWatch()
        try:
            # Wait for the first chunk before answering, so that a failure here can
            # still fail over: nothing has reached the client yet.
            first_byte_s = self.state.policy.policy.routing.first_byte_timeout_ms / 1000
            async with asyncio.timeout(first_byte_s):
                first = await anext(chunks)
            watch.feed(first, time.perf_counter())
            if watch.error is not None:
                raise UpstreamStreamError(
                    f"pool {pool_id} sent an error event: {watch.error}", pool_id=pool_id
                )
        except (UpstreamError, StopAsyncIteration, TimeoutError) as exc:
            resp.close()
            self.state.release(pool_id)
            err = (
                exc
                if isinstance(exc, UpstreamError)
                else UpstreamTimeout(f"pool {pool_id}: no first chunk")
            )
            err.retryable = True
            self._failed(pool_id, err)
            raise err from exc
        est_cost = (route.prompt_tokens + (route.max_output_tokens or 0)) * attempt.usd_per_token
        body_iter = self._relay(first, chunks, resp, watch, attempt, route, started, ctx)
        return StreamingResponse(
            body_iter,
            media_type="text/event-stream",
            headers={**_SSE_HEADERS, **self._headers(attempt, est_cost)},
        )

    async def _relay(
        self,
        first: bytes,
        chunks: AsyncIterator[bytes],
        resp: UpstreamResponse,
        watch: StreamWatch,
        attempt: _Attempt,
        route: RouteRequest,
        started: float,
        ctx: RequestContext,
    ) -> AsyncIterator[bytes]:
        pool_id = attempt.pool.id
        status = "200"
        try:
            yield first
            async for chunk in chunks:
                watch.feed(chunk, time.perf_counter())
                yield chunk
            if watch.error is not None:
                status = "stream_error"
                self._failed(pool_id, UpstreamStreamError(watch.error, pool_id=pool_id))
        except UpstreamError as exc:
            status = "stream_error"
            self._failed(pool_id, exc)
            yield error_event(f"upstream pool failed mid-stream: {exc}")
        finally:
            resp.close()
            self.state.release(pool_id)
            if status == "200":
                ttft_ms = (watch.first_at - started) * 1000.0
                self.state.observe(pool_id, ok=True, ttft_ms=ttft_ms, tpot_ms=watch.tpot_ms())
                self.state.outlier.on_success(pool_id, time.time())
            self.metrics.observe_request(route, pool_id, status, time.perf_counter() - started)
            prompt = watch.prompt_tokens if watch.prompt_tokens is not None else route.prompt_tokens
            completion = watch.output_tokens()
            cost = (prompt + completion) * attempt.usd_per_token
            self._record(
                ctx,
                route,
                attempt,
                prompt,
                completion,
                cost,
                "ok" if status == "200" else status,
            )
