"""Request handlers of the simulated engine's OpenAI-compatible routes."""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
from aiohttp import web

from simengine.faults import FaultConfig
from simengine.metrics import render_metrics
from simengine.parsing import (
    InvalidRequest,
    parse_body,
    parse_embedding_inputs,
    parse_generation,
    tokens_for_chars,
)
from simengine.payloads import (
    DONE_FRAME,
    StreamFrames,
    completion_body,
    embeddings_body,
    error_body,
    error_frame,
    models_body,
    usage_obj,
)
from simengine.state import SimEngine

logger = logging.getLogger(__name__)

_JSON = "application/json"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# Token gaps shorter than this are coalesced into one write: event-loop timers are too
# coarse for sub-millisecond sleeps, and pacing by deadline keeps the average rate right.
_MIN_SLEEP_S = 0.001


def _error(exc: InvalidRequest) -> web.Response:
    return web.Response(status=exc.status, body=error_body(exc), content_type=_JSON)


class Handlers:
    """aiohttp handlers bound to one :class:`SimEngine`."""

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        eng = self.engine
        eng.counters.received += 1
        try:
            req = parse_generation(parse_body(await request.read(), eng.served_model), chat=chat)
            output_tokens, finish = eng.plan_output(req)
            await eng.inject_faults()
        except InvalidRequest as exc:
            return _error(exc)
        rid = eng.next_id("chatcmpl" if chat else "cmpl")
        start = eng.tape_start(req.seed)
        created = int(time.time())
        # Hashed before queueing, so the batch slot is not held while hashing.
        hashes = eng.prefix_cache.hashes(req.prompt_text)
        resp: web.StreamResponse
        await eng.slots.acquire()
        prefill_ms = eng.admit_prefill(req, hashes, output_tokens)
        try:
            if req.stream:
                frames = StreamFrames(chat=chat, rid=rid, created=created, model=eng.served_model)
                chunks = [frames.role()] if chat else []
                first_token = len(chunks)
                chunks += frames.tokens(eng.tape.word_ids(start, output_tokens))
                chunks.append(frames.final(finish))
                if req.include_usage:
                    chunks.append(frames.usage(req.prompt_tokens, output_tokens))
                resp = await self._stream(
                    request, chunks, prefill_ms, first_token, first_token + output_tokens - 1
                )
            else:
                if eng.time_scale > 0:
                    await asyncio.sleep(eng.seconds(prefill_ms))
                    await asyncio.sleep(eng.seconds(eng.tpot_ms() * (output_tokens - 1)))
                body = completion_body(
                    chat=chat,
                    rid=rid,
                    created=created,
                    model=eng.served_model,
                    text=eng.tape.text(start, output_tokens),
                    finish=finish,
                    usage=usage_obj(req.prompt_tokens, output_tokens),
                )
                resp = web.Response(body=body, content_type=_JSON)
        finally:
            eng.release_kv(req, output_tokens)
            eng.slots.release()
        eng.counters.record_success(finish, req.prompt_tokens, output_tokens)
        return resp

    async def _stream(
        self,
        request: web.Request,
        chunks: list[bytes],
        prefill_ms: float,
        first_token: int,
        last_token: int,
    ) -> web.StreamResponse:
        """Send ``chunks`` as SSE: up to index ``first_token`` at TTFT, then each token frame
        up to ``last_token`` one TPOT after the previous; trailing frames follow at once."""
        eng = self.engine
        after = eng.faults.stream_error_after
        failing = after is not None and after < len(chunks)
        if failing:
            fault = InvalidRequest(
                500, "simulated mid-stream failure", code="sim_fault", type_="server_error"
            )
            chunks = [*chunks[:after], error_frame(fault)]
        else:
            chunks.append(DONE_FRAME)
        if eng.time_scale == 0:
            whole = web.Response(body=b"".join(chunks), headers=_SSE_HEADERS)
            if failing:
                whole.force_close()
            return whole
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        if failing:
            resp.force_close()
        await resp.prepare(request)
        await asyncio.sleep(eng.seconds(prefill_ms))
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        pending: list[bytes] = []
        for index, chunk in enumerate(chunks):
            if first_token < index <= last_token:
                deadline += eng.seconds(eng.tpot_ms())
                delay = deadline - loop.time()
                if delay > _MIN_SLEEP_S:
                    await resp.write(b"".join(pending))
                    pending.clear()
                    await asyncio.sleep(delay)
            pending.append(chunk)
        await resp.write(b"".join(pending))
        await resp.write_eof()
        return resp

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        eng = self.engine
        eng.counters.received += 1
        try:
            payload = parse_body(await request.read(), eng.served_model)
            inputs = parse_embedding_inputs(payload)
            tokens = [tokens_for_chars(len(text)) for text in inputs]
            if max(tokens) > eng.profile.max_context:
                raise InvalidRequest(
                    400,
                    f"input exceeds the maximum context length of {eng.profile.max_context} tokens",
                    param="input",
                    code="context_length_exceeded",
                )
            await eng.inject_faults()
        except InvalidRequest as exc:
            return _error(exc)
        prompt_tokens = sum(tokens)
        await eng.slots.acquire()
        try:
            if eng.time_scale > 0:
                await asyncio.sleep(eng.seconds(eng.profile.embed_ms(prompt_tokens)))
        finally:
            eng.slots.release()
        body = embeddings_body(
            inputs,
            seed=eng.seed,
            model=eng.served_model,
            prompt_tokens=prompt_tokens,
            as_base64=payload.get("encoding_format") == "base64",
        )
        eng.counters.record_success("embed", prompt_tokens, 0)
        return web.Response(body=body, content_type=_JSON)

    async def models(self, request: web.Request) -> web.StreamResponse:
        eng = self.engine
        body = models_body(eng.served_model, eng.created, eng.profile.max_context)
        return web.Response(body=body, content_type=_JSON)

    async def health(self, request: web.Request) -> web.StreamResponse:
        return web.Response()

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        eng = self.engine
        text = render_metrics(
            eng.counters,
            model_name=eng.served_model,
            running=eng.running,
            waiting=eng.waiting,
            kv_cache_usage=eng.kv_cache_usage,
            prefix_queries_tokens=eng.prefix_cache.queries_tokens,
            prefix_hits_tokens=eng.prefix_cache.hits_tokens,
        )
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def get_faults(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=orjson.dumps(self.engine.faults.to_json()), content_type=_JSON)

    async def post_faults(self, request: web.Request) -> web.StreamResponse:
        """Replace the fault config; absent fields reset to their defaults."""
        try:
            faults = FaultConfig.from_json(orjson.loads(await request.read()))
        except (orjson.JSONDecodeError, ValueError) as exc:
            return _error(InvalidRequest(400, str(exc)))
        self.engine.set_faults(faults)
        logger.info("engine faults set to %s", faults)
        return await self.get_faults(request)
