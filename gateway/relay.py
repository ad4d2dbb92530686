"""Relaying a stream once its first chunk has arrived: bytes pass to the client as
they come, the stream is watched (usage, error events, ``[DONE]``), and every way it can
end (complete, broken, cut short by the client or by a shutdown) is recorded once.

Nothing here fails over: bytes have reached the client. A stream that breaks ends with
an SSE error event the ``openai`` client raises, and counts against its pool.
"""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import AsyncIterator, Callable

from starlette.responses import Response, StreamingResponse

from adapters.upstream import UpstreamResponse
from base.errors import UpstreamError, UpstreamStreamError
from gateway.finish import Attempt, RequestContext, RequestFinisher
from gateway.http_errors import client_message
from gateway.routing_state import RoutingState
from gateway.streaming import StreamWatch, error_event
from gateway.upstream_answers import ModelRenamer
from router.scoring import RouteRequest


class StreamRelays:
    """The streams being relayed by one gateway process."""

    def __init__(
        self,
        state: RoutingState,
        finisher: RequestFinisher,
        failed: Callable[[Attempt, UpstreamError], None],
    ) -> None:
        self.state = state
        self.finisher = finisher
        self._failed = failed
        # Upstream responses of the streams being relayed, so that a shutdown past its
        # grace can end each one with an error event instead of a cut connection.
        self._live: set[UpstreamResponse] = set()
        self._ending = False

    def end_all(self) -> int:
        """End every stream being relayed: each client gets an SSE error event (code
        ``gateway_shutdown``) and a clean end of its response. Not counted against any
        pool. Returns how many streams were ended. Meant for the end of a shutdown: from
        then on any stream that breaks is reported the same way. Idempotent."""
        self._ending = True
        ended = list(self._live)
        for resp in ended:
            resp.close()
        return len(ended)

    async def relay(
        self,
        first: bytes,
        chunks: AsyncIterator[bytes],
        resp: UpstreamResponse,
        watch: StreamWatch,
        attempt: Attempt,
        route: RouteRequest,
        started: float,
        ctx: RequestContext,
    ) -> AsyncIterator[bytes]:
        """Relay one stream from its first chunk on; every outcome ends in one usage
        record, the pool's in-flight count released and the connection closed."""
        pool_id = attempt.pool.id
        status = "200"
        completed = False
        rename = ModelRenamer(attempt.pool.upstream_model, route.model)
        self._live.add(resp)
        try:
            yield rename(first)
            async for chunk in chunks:
                watch.feed(chunk, time.perf_counter())
                yield rename(chunk)
            completed = True
            if watch.error is not None:
                status = "stream_error"
                self._failed(attempt, UpstreamStreamError(watch.error, pool_id=pool_id))
            elif not watch.done:
                # Bytes reached the client, so no failover: end the stream with an error
                # event the client reports, and count it against the pool.
                status = "stream_incomplete"
                self._failed(attempt, UpstreamStreamError("stream ended without [DONE]"))
                yield error_event(f"pool {pool_id}: the stream ended before it was complete")
        except UpstreamError as exc:
            if self._ending:
                status = "gateway_shutdown"
                yield error_event(
                    "the gateway is shutting down and ended this stream; retry the request",
                    code="gateway_shutdown",
                )
            else:
                status = "stream_error"
                self._failed(attempt, exc)
                exc.pool_id = exc.pool_id or pool_id
                yield error_event(client_message(exc))
        finally:
            self._live.discard(resp)
            resp.close()
            self.state.release(pool_id, attempt.replica)
            if status == "200":
                ttft_ms = (watch.first_at - started) * 1000.0
                self.state.observe(pool_id, ok=True, ttft_ms=ttft_ms, tpot_ms=watch.tpot_ms())
                self.state.outlier.on_success(pool_id, time.time())
            if status == "200" and not completed and not watch.done:
                status = "client_disconnected"
            attempt.span.end(
                None
                if status in ("200", "client_disconnected", "gateway_shutdown")
                else UpstreamStreamError(status)
            )
            prompt = watch.prompt_tokens if watch.prompt_tokens is not None else route.prompt_tokens
            completion = watch.output_tokens()
            cost = (prompt + completion) * attempt.usd_per_token
            self.finisher.finish_soon(
                ctx, route, attempt, prompt, completion, cost, "ok" if status == "200" else status,
                ttft_ms=(watch.first_at - ctx.received_at) * 1000.0, tpot_ms=watch.tpot_ms(),
            )  # fmt: skip


async def close_unread(response: Response) -> None:
    """Close an answer no client will read, so that its relay records it and releases
    the engine connection and the pool's in-flight count.

    Only for relays that never started or have finished: a relay with a frame has not
    started, and is stepped once (its first chunk is already buffered), because closing
    an unstarted async generator skips its ``finally``.
    """
    if not isinstance(response, StreamingResponse):
        return
    iterator = response.body_iterator
    if not isinstance(iterator, types.AsyncGeneratorType):
        return
    if iterator.ag_frame is not None:
        with contextlib.suppress(StopAsyncIteration):
            await anext(iterator)
    await iterator.aclose()
