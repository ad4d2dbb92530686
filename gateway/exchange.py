"""One attempt on one pool: the exchange with its engine, and what it leaves behind.

``Forwarder`` (``gateway.proxy``) decides which pools to try, in which order, and when to
hedge or fail over. ``Exchange`` runs one of those attempts: it opens the upstream
request, reads or relays the answer, checks it, and accounts for it (pool health, outlier
detection, the rollout's counts, the request's one usage record). Every failure it raises
has been accounted already, so the caller only decides whether to try again.
"""

from __future__ import annotations

import time

from starlette.responses import Response

from adapters.upstream import UpstreamClient, UpstreamResponse
from base.errors import (
    UpstreamError,
    UpstreamInvalidAnswer,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeout,
)
from gateway.event_stream import EventStreamResponse
from gateway.finish import Attempt, RequestContext, RequestFinisher
from gateway.health import abandon_silent
from gateway.metrics import GatewayMetrics
from gateway.openai_request import ParsedRequest
from gateway.relay import StreamRelays
from gateway.routing_state import RoutingState
from gateway.streaming import StreamWatch
from gateway.upstream_answers import JsonAnswer, ModelRenamer, checked_usage
from router.scoring import RouteRequest

__all__ = ["Exchange"]

_SSE_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
# What the first line of a server-sent-event stream may start with.
_SSE_FIELDS = (b"data:", b":", b"event:", b"id:", b"retry:")


class Exchange:
    """Runs single attempts for ``Forwarder``; holds the streams being relayed."""

    def __init__(
        self,
        state: RoutingState,
        upstream: UpstreamClient,
        metrics: GatewayMetrics,
        finisher: RequestFinisher,
    ) -> None:
        self.state = state
        self.upstream = upstream
        self.metrics = metrics
        self.finisher = finisher
        self.relays = StreamRelays(state, finisher, self.failed)

    def failed(self, attempt: Attempt, exc: UpstreamError) -> None:
        """Account for a failed attempt: pool health, the rollout's counts, the error
        metric, and the replica's or the pool's outlier detection (an ejection after a
        missed deadline fails over the requests stuck behind the same engine)."""
        pool_id = attempt.pool.id
        self.state.observe(pool_id, ok=False)
        self.state.rollouts.attempt(attempt.pool, ok=False)
        self.metrics.upstream_errors.labels(pool=pool_id, kind=type(exc).__name__).inc()
        pick = attempt.replica
        if pick is not None:
            replica = pick.pool.replicas[pick.index]
            ejections = replica.ejections
            if pick.pool.on_failure(pick.index, str(exc), time.monotonic()):
                # The replica's fault: the pool still serves from its other replicas.
                if replica.ejections > ejections:
                    self._abandon_silent(attempt, exc)
                return
        if self.state.outlier.on_failure(pool_id, time.time(), str(exc)):
            self._abandon_silent(attempt, exc)

    def _abandon_silent(self, attempt: Attempt, exc: UpstreamError) -> None:
        # A deadline that ejected its engine: the requests sent to that engine since, and
        # still without a byte of answer, are stuck behind the same hang. Each would sit
        # out its own deadline (up to 2 x its whole answer's time for a non-streaming
        # one) before failing over; they fail over now instead. An engine that answered
        # 5xx or refused the connection already failed the others at once.
        if not isinstance(exc, UpstreamTimeout):
            return
        reason = f"pool {attempt.pool.id} ejected after a missed deadline: {exc}"
        abandon_silent(self.upstream, attempt.url, reason)

    async def _open(
        self, parsed: ParsedRequest, attempt: Attempt, headers: dict[str, str]
    ) -> UpstreamResponse:
        body = parsed.upstream_body(attempt.pool.upstream_model)
        resp = await self.upstream.post(
            attempt.url, body, headers, attempt.timeouts(self.state.policy.policy.routing)
        )
        if resp.status >= 500 or resp.status == 429:
            resp.close()
            raise UpstreamStatusError(
                f"pool {attempt.pool.id} answered {resp.status}",
                pool_id=attempt.pool.id,
                status=resp.status,
            )
        return resp

    def _client_error(
        self, status: int, body: bytes, attempt: Attempt, route: RouteRequest, ctx: RequestContext
    ) -> Response:
        # A client error (bad parameters, context too long) is relayed as it came; the
        # pool that answered it is healthy.
        self.state.outlier.on_success(attempt.pool.id, time.time())
        self.finisher.finish(ctx, route, attempt, 0, 0, 0.0, f"client_error_{status}")
        return JsonAnswer(body, attempt.response_headers(0.0, ctx.request_id), status)

    async def unary(
        self,
        parsed: ParsedRequest,
        attempt: Attempt,
        headers: dict[str, str],
        route: RouteRequest,
        ctx: RequestContext,
    ) -> Response:
        """A whole answer from ``attempt``'s pool, checked and renamed, its usage recorded
        once it is written (``RequestFinisher.finish_soon``). A 4xx other than 429 is the
        client's and is relayed as it came. Raises UpstreamError (already accounted by
        ``failed``) on a connect error, a timeout, a 5xx or 429, or a 200 that is no
        answer."""
        pool_id = attempt.pool.id
        self.state.acquire(pool_id, attempt.replica)
        started = time.perf_counter()
        try:
            resp = await self._open(parsed, attempt, headers)
            async with resp:
                body = await resp.read()
        except UpstreamError as exc:
            self.failed(attempt, exc)
            raise
        finally:
            self.state.release(pool_id, attempt.replica)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if resp.status != 200:
            return self._client_error(resp.status, body, attempt, route, ctx)
        try:
            prompt, completion, model = checked_usage(body, parsed.operation, pool_id)
        except UpstreamError as exc:
            self.failed(attempt, exc)
            raise
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
        if attempt.replica is not None:
            attempt.replica.served()
        cost = tokens * attempt.usd_per_token
        self.finisher.finish_soon(
            ctx,
            route,
            attempt,
            prompt_tokens,
            completion or 0,
            cost,
            "ok",
            tpot_ms=tpot,
            response_model=model,
        )
        body = ModelRenamer(attempt.pool.upstream_model, route.model)(body)
        return JsonAnswer(body, attempt.response_headers(cost, ctx.request_id))

    async def stream(
        self,
        parsed: ParsedRequest,
        attempt: Attempt,
        headers: dict[str, str],
        route: RouteRequest,
        ctx: RequestContext,
    ) -> Response:
        """A streamed answer from ``attempt``'s pool, returned once its first event has
        arrived and looks like server-sent events, so that a failure before it can still
        fail over (raised as a retryable UpstreamError, already accounted by ``failed``).
        Afterwards the relay (``StreamRelays``) owns the stream and its bookkeeping."""
        pool_id = attempt.pool.id
        self.state.acquire(pool_id, attempt.replica)
        started = time.perf_counter()
        try:
            resp = await self._open(parsed, attempt, headers)
        except UpstreamError as exc:
            self.state.release(pool_id, attempt.replica)
            self.failed(attempt, exc)
            raise
        if resp.status != 200:
            try:
                body = await resp.read()
            finally:
                resp.close()
                self.state.release(pool_id, attempt.replica)
            return self._client_error(resp.status, body, attempt, route, ctx)
        watch = StreamWatch()
        try:
            # Wait for the first chunk before answering, so that a failure here can
            # still fail over: nothing has reached the client yet.
            first = await resp.first_chunk(attempt.first_byte_s)
            if not first:
                raise UpstreamStreamError(
                    f"pool {pool_id} ended its stream before any event", pool_id=pool_id
                )
            watch.feed(first, time.perf_counter())
            if watch.error is not None:
                raise UpstreamStreamError(
                    f"pool {pool_id} sent an error event: {watch.error}", pool_id=pool_id
                )
            if not first.lstrip().startswith(_SSE_FIELDS):
                raise UpstreamInvalidAnswer(
                    f"pool {pool_id} answered 200 with a stream that is not server-sent events",
                    pool_id=pool_id,
                )
        except UpstreamError as exc:
            resp.close()
            self.state.release(pool_id, attempt.replica)
            err = (
                UpstreamTimeout(f"pool {pool_id}: {exc}", pool_id=pool_id)
                if isinstance(exc, UpstreamTimeout)
                else exc
            )
            err.retryable = True
            self.failed(attempt, err)
            if err is exc:
                raise
            raise err from exc
        if attempt.replica is not None:
            attempt.replica.served()
        est_cost = route.est_tokens * attempt.usd_per_token if route.est_tokens else 0.0
        chunks = resp.iter_chunks()
        body_iter = self.relays.relay(first, chunks, resp, watch, attempt, route, started, ctx)
        response = EventStreamResponse(body_iter, media_type="text/event-stream")
        response.raw_headers += _SSE_HEADERS
        response.raw_headers += attempt.response_headers(est_cost, ctx.request_id)
        return response
