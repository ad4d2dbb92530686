"""The ASGI floor peer: the bare proxy behind uvicorn relays what the engine answers and
turns an unreachable engine into a 502, like ``peer_bare.py``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
from aiohttp import web

from loadtests.peer_bare_asgi import BareAsgiProxy
from tests.aio import run_async


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def _engine() -> AsyncIterator[str]:
    """An engine on a free port: JSON for a unary request, three SSE events and
    ``[DONE]`` for a streamed one."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"model": body["model"], "ok": True})
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            await resp.write(f"data: {i}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def _client(upstream: str) -> AsyncIterator[httpx.AsyncClient]:
    """The proxy through its own lifespan (startup, then shutdown), called in-process."""
    proxy = BareAsgiProxy(upstream)
    inbox: list[dict[str, Any]] = [{"type": "lifespan.shutdown"}, {"type": "lifespan.startup"}]
    started, stop = asyncio.Event(), asyncio.Event()

    async def receive() -> dict[str, Any]:
        if len(inbox) == 1:
            await stop.wait()
        return inbox.pop()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()

    lifespan = asyncio.ensure_future(proxy({"type": "lifespan"}, receive, send))  # type: ignore[arg-type]
    await started.wait()
    try:
        transport = httpx.ASGITransport(app=proxy)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield client
    finally:
        stop.set()
        await lifespan
    assert proxy.session is not None and proxy.session.closed


@run_async
async def test_relays_unary_and_streamed_answers() -> None:
    async with _engine() as engine, _client(engine) as client:
        unary = await client.post("/v1/chat/completions", json={"model": "m"})
        assert unary.status_code == 200 and unary.json() == {"model": "m", "ok": True}
        streamed = await client.post("/v1/chat/completions", json={"model": "m", "stream": True})
        assert streamed.headers["content-type"].startswith("text/event-stream")
        assert streamed.text == "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
        assert (await client.get("/health")).text == "ok"


@run_async
async def test_an_unreachable_engine_is_a_502() -> None:
    async with _client(f"http://127.0.0.1:{_closed_port()}") as client:
        resp = await client.post("/v1/chat/completions", json={"model": "m"})
    assert resp.status_code == 502
    assert json.loads(resp.content)["error"]["type"] == "bad_gateway"
