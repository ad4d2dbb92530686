"""A small OpenAI-shaped upstream that misbehaves on purpose, for the malformed-answer
fault tests: it runs an aiohttp server in a thread on a free 127.0.0.1 port and answers
``POST /v1/chat/completions`` as ``mode`` says. Health checks always pass (a load
balancer in front of a broken engine looks healthy)."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

from aiohttp import web

from skyroute.embedded_redis import free_port

Mode = Literal["html", "array", "truncated_stream", "html_stream", "empty_stream", "n_choices"]
_CHUNK = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


class ScriptedUpstream:
    """``with ScriptedUpstream("html") as up: up.url`` — answers by ``mode``; ``calls``
    counts the completions asked of it."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.port = free_port()
        self.calls = 0
        self.asked_n: list[int] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedUpstream:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("scripted upstream did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    async def _health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        body = await request.json()
        if self.mode == "n_choices":  # a correct engine that serves n itself (as vLLM)
            n = int(body.get("n") or 1)
            self.asked_n.append(n)
            choices = [
                {"index": i, "message": {"role": "assistant", "content": f"choice {i}"},
                 "finish_reason": "stop", "logprobs": None}
                for i in range(n)
            ]  # fmt: skip
            return web.json_response({
                "id": "cmpl-n", "object": "chat.completion", "created": 0,
                "model": body.get("model"), "choices": choices,
                "usage": {"prompt_tokens": 5, "completion_tokens": 2 * n, "total_tokens": 5 + 2 * n},
            })  # fmt: skip
        if self.mode == "html":
            return web.Response(text="<html><body>502 Bad Gateway</body></html>",
                                content_type="text/html")  # fmt: skip
        if self.mode == "array":
            return web.json_response([])
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if self.mode == "html_stream":
            await response.write(b"<html><body>maintenance</body></html>")
        elif self.mode == "empty_stream":
            pass  # headers, then the end of the body: not one event
        else:  # truncated_stream: one event, then the connection ends without [DONE]
            await response.write(_CHUNK)
        await response.write_eof()
        return response
