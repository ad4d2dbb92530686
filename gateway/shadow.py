"""Shadow traffic: copies of live requests sent to a rollout's new version, off to the side.

During a rollout's shadow stage a share of the model's requests is copied, in the
background, to the best pool of the new version. The client never sees the copy: its
own request is routed, answered and billed exactly as without a rollout; the copy writes
no usage record, charges no limit, and only feeds the stage's counts (as the new
version) for the judgement. A streamed request is copied as a non-streaming one (one
answer to check). At most ``max_in_flight`` copies run at once per gateway: beyond that
a copy is dropped (and counted), so a slow new version cannot pile up work here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

import orjson

from adapters.upstream import UpstreamClient, UpstreamTimeouts
from base.errors import UpstreamError
from gateway.deadlines import first_byte_deadline_s
from gateway.metrics import GatewayMetrics
from gateway.openai_request import ParsedRequest
from gateway.replica_attempts import RequestReplicas
from gateway.rollout_routing import ActiveRollout
from gateway.routing_state import RoutingState
from gateway.upstream_answers import checked_usage
from router.scoring import RouteRequest

logger = logging.getLogger(__name__)

_HEADERS = {"content-type": "application/json"}


class ShadowMirror:
    """Sends shadow copies for one gateway replica. ``tasks`` are the copies in flight."""

    def __init__(
        self,
        state: RoutingState,
        upstream: UpstreamClient,
        metrics: GatewayMetrics,
        *,
        max_in_flight: int = 32,
    ) -> None:
        self.state = state
        self.upstream = upstream
        self.metrics = metrics
        self.max_in_flight = max_in_flight
        self.tasks: set[asyncio.Task[None]] = set()

    def mirror(
        self,
        parsed: ParsedRequest,
        route: RouteRequest,
        active: ActiveRollout,
        path: str,
        stable_answer: asyncio.Future[bytes | None] | None = None,
    ) -> None:
        """Start a copy of the request (sent to ``path`` on an engine) to
        ``active.canary``; with ``stable_answer`` (the client's answer body, once known)
        the two answers are compared. Never raises, never waits."""
        if len(self.tasks) >= self.max_in_flight:
            self.metrics.shadow_requests.labels(model=route.model, outcome="dropped").inc()
            return
        task = asyncio.create_task(self._send(parsed, route, active, path, stable_answer))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(
        self,
        parsed: ParsedRequest,
        route: RouteRequest,
        active: ActiveRollout,
        path: str,
        stable_answer: asyncio.Future[bytes | None] | None,
    ) -> None:
        outcome = "failed"
        try:
            outcome = await self._exchange(parsed, route, active, path, stable_answer)
        except asyncio.CancelledError:
            raise
        except Exception:  # a copy must never hurt anything; say why it went wrong
            logger.exception("shadow copy of a %s request failed", route.model)
        self.metrics.shadow_requests.labels(model=route.model, outcome=outcome).inc()

    async def _exchange(
        self,
        parsed: ParsedRequest,
        route: RouteRequest,
        active: ActiveRollout,
        path: str,
        stable_answer: asyncio.Future[bytes | None] | None,
    ) -> str:
        state = self.state
        ranking = state.rank(replace(route, version=active.canary), time.time())
        first = next(ranking.tried(), None)
        if first is None:
            return "unroutable"
        pool = state.policy.policy.pools[first[0]]
        pick = RequestReplicas(state.replicas, parsed, None, prefix_affinity=False).pick(pool.id)
        if pick is None:
            return "unroutable"
        routing = state.policy.policy.routing
        payload = {**parsed.payload, "model": pool.upstream_model, "stream": False}
        payload.pop("stream_options", None)
        first_byte_s = first_byte_deadline_s(
            routing, stream=False, slo_ttft_ms=ranking.slo_ttft_ms,
            slo_tpot_ms=ranking.slo_tpot_ms,
            predicted_ttft_ms=first[1],
            output_tokens=ranking.est_tokens - route.prompt_tokens,
        )  # fmt: skip
        timeouts = UpstreamTimeouts(
            routing.connect_timeout_ms / 1000, first_byte_s, routing.idle_timeout_ms / 1000
        )
        state.acquire(pool.id, pick)
        started = time.perf_counter()
        try:
            resp = await self.upstream.post(
                pick.address + path, orjson.dumps(payload), _HEADERS, timeouts
            )
            async with resp:
                body = await resp.read()
            status = resp.status
        except UpstreamError:
            state.rollouts.attempt(pool, ok=False)
            return "failed"
        finally:
            state.release(pool.id, pick)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if status >= 500 or status == 429:
            state.rollouts.attempt(pool, ok=False)
            return "failed"
        if status != 200:
            return "client_error"  # the stable version got the same request: not judged
        try:
            _, completion, _ = checked_usage(body, parsed.operation, pool.id)
        except UpstreamError:
            state.rollouts.attempt(pool, ok=False)
            return "failed"
        tpot = None
        if completion and completion >= 8:
            prefill_ms = route.prompt_tokens / pool.goodput.prefill_tokens_per_s * 1000
            tpot = max(elapsed_ms - prefill_ms, 0.0) / completion
        miss = tpot is not None and tpot > ranking.slo_tpot_ms
        mismatch = None
        if stable_answer is not None and active.similarity is not None:
            try:
                # As long as the copy's own deadline: the two were sent together.
                stable = await asyncio.wait_for(asyncio.shield(stable_answer), first_byte_s)
            except TimeoutError:
                stable = None
            if stable is not None:
                mismatch = similarity(answer_text(stable), answer_text(body)) < active.similarity
        state.rollouts.attempt(pool, ok=True, slo_miss=miss, tpot_ms=tpot,
                               output_tokens=completion or 0, mismatch=mismatch)  # fmt: skip
        return "sent"


def answer_text(body: bytes) -> str:
    """The text of an OpenAI answer's first choice ('' if there is none)."""
    try:
        choice = orjson.loads(body)["choices"][0]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return ""
    if not isinstance(choice, dict):
        return ""
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return text if isinstance(text, str) else ""


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' sets of lower-cased words (1 for two empty
    texts): cheap, order-blind, and enough to tell a rewrite from a different answer."""
    words_a, words_b = set(a.lower().split()), set(b.lower().split())
    if not words_a and not words_b:
        return 1.0
    return len(words_a & words_b) / len(words_a | words_b)
