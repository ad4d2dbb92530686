"""``n > 1`` for models served by engines that answer one choice per request.

vLLM and SGLang take ``n`` and share the prompt's prefill across the choices, so the
gateway passes ``n`` through to them. Engines that do not (TGI, the simulated engine;
``supports_n: false`` on the pool) get ``n`` requests of one choice each, routed
independently and merged into one OpenAI answer: choices indexed ``0..n-1``, usage
summed (the prompt counted once, as OpenAI counts it). All or nothing: if any of the
``n`` fails before its first byte, the others are cancelled and the request fails as
one request would.

Each of the ``n`` requests is routed, failed over and recorded (usage, metrics) like
any request, under the request id ``<id>.<i>``; the client's trace span covers them
all, without a span per attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse

from base.errors import UpstreamInvalidAnswer
from gateway.finish import RequestContext
from gateway.openai_request import ParsedRequest
from gateway.proxy import Forwarder
from gateway.relay import close_unread
from gateway.streaming import error_event
from gateway.tracing import NOOP
from router.scoring import RouteRequest

_DONE = b"data: [DONE]"


async def fan_out(
    forwarder: Forwarder,
    parsed: ParsedRequest,
    route: RouteRequest,
    path: str,
    headers: dict[str, str],
    ctx: RequestContext,
) -> Response:
    """Serve ``parsed.n`` choices as ``n`` one-choice requests, merged.

    Raises what ``Forwarder.forward`` raises, for the first of the ``n`` that fails.
    """
    n = parsed.n
    single = replace(parsed, n=1, payload={k: v for k, v in parsed.payload.items() if k != "n"})
    share = max(1, ctx.est_tokens // n)
    subs = [
        replace(ctx, request_id=f"{ctx.request_id}.{i}", est_tokens=share, trace=NOOP)
        for i in range(n)
    ]
    tasks = [
        asyncio.ensure_future(forwarder.forward(single, route, path, dict(headers), sub))
        for sub in subs
    ]
    try:
        answers = await asyncio.gather(*tasks)
    except BaseException as exc:
        for task in tasks:
            task.cancel()
        # Those that answered anyway hold an engine connection and an in-flight count
        # until their stream is closed.
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, Response):
                await close_unread(result)
        ctx.trace.end(exc if isinstance(exc, Exception) else None)
        raise
    first = answers[0]
    out_headers = {k: v for k, v in first.headers.items() if k.startswith("x-skyroute-")}
    if parsed.stream:
        streams = [a for a in answers if isinstance(a, StreamingResponse)]
        if len(streams) != n:
            # A non-200 answer (a client error the engine found) is the answer.
            for a in streams:
                await close_unread(a)
            ctx.trace.end()
            return next(a for a in answers if not isinstance(a, StreamingResponse))
        return StreamingResponse(
            _merge_streams(streams, parsed, ctx),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", **out_headers},
        )
    ctx.trace.end()
    if any(a.status_code != 200 for a in answers):
        return next(a for a in answers if a.status_code != 200)
    body = merge_answers([bytes(a.body) for a in answers])
    return Response(body, media_type="application/json", headers=out_headers)


def merge_answers(bodies: list[bytes]) -> bytes:
    """One OpenAI answer from ``n`` one-choice answers (chat or text completions).

    Raises UpstreamInvalidAnswer if a body is not a completion object with choices
    (the forwarder checked each already; this guards the merge itself).
    """
    merged: dict[str, Any] | None = None
    choices: list[Any] = []
    prompt = completion = 0
    for body in bodies:
        answer = orjson.loads(body)
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
            raise UpstreamInvalidAnswer("an answer to merge has no choices")
        if merged is None:
            merged = answer
        for choice in answer["choices"]:
            choices.append({**choice, "index": len(choices)})
        usage = answer.get("usage") or {}
        prompt = max(prompt, int(usage.get("prompt_tokens") or 0))
        completion += int(usage.get("completion_tokens") or 0)
    assert merged is not None
    merged["choices"] = choices
    merged["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return orjson.dumps(merged)


async def _merge_streams(
    streams: list[StreamingResponse], parsed: ParsedRequest, ctx: RequestContext
) -> AsyncIterator[bytes]:
    """Interleave ``n`` SSE streams event by event as they arrive, each choice
    re-indexed to its stream's number. Per-stream ``[DONE]`` and usage events are
    held back: one merged usage event (if the client asked for usage) and one
    ``[DONE]`` end the merged stream. An error event from any stream ends it."""
    queue: asyncio.Queue[tuple[int, bytes | None]] = asyncio.Queue()

    async def pump(i: int, stream: StreamingResponse) -> None:
        try:
            async for chunk in stream.body_iterator:
                queue.put_nowait((i, chunk.encode() if isinstance(chunk, str) else bytes(chunk)))
        finally:
            queue.put_nowait((i, None))

    pumps = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    partial = [b""] * len(streams)
    open_streams = len(streams)
    prompt = completion = 0
    saw_usage = False
    try:
        while open_streams:
            i, chunk = await queue.get()
            if chunk is None:
                open_streams -= 1
                continue
            lines = (partial[i] + chunk).split(b"\n")
            partial[i] = lines.pop()
            out: list[bytes] = []
            for line in lines:
                if not line.startswith(b"data:") or line.startswith(_DONE):
                    continue
                event = orjson.loads(line[5:])
                if isinstance(event, dict) and "error" in event:
                    yield line + b"\n\n"
                    return
                usage = event.get("usage") if isinstance(event, dict) else None
                if isinstance(usage, dict):
                    saw_usage = True
                    prompt = max(prompt, int(usage.get("prompt_tokens") or 0))
                    completion += int(usage.get("completion_tokens") or 0)
                    if not event.get("choices"):
                        continue
                    event["usage"] = None
                for choice in event.get("choices") or []:
                    choice["index"] = i
                out.append(b"data: " + orjson.dumps(event) + b"\n\n")
            if out:
                yield b"".join(out)
        if saw_usage:
            usage_event: dict[str, object] = {
                "id": f"chatcmpl-{ctx.request_id}",
                "object": "chat.completion.chunk"
                if parsed.operation.value == "chat"
                else "text_completion",
                "model": parsed.model,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
            yield b"data: " + orjson.dumps(usage_event) + b"\n\n"
        yield _DONE + b"\n\n"
    except orjson.JSONDecodeError:
        yield error_event("an engine sent an event that is not JSON")
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for stream in streams:
            await close_unread(stream)
        ctx.trace.end()
