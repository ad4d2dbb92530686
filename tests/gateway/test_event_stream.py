"""``EventStreamResponse``: a client gone while the engine is quiet ends the relay (its
``finally`` runs), a shutdown's cancellation propagates, and a stream that ends at once
never starts the disconnect watch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.event_stream import EventStreamResponse
from tests.aio import run_async

SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}
BOUND_S = 30.0  # only a broken response gets anywhere near it


class Client:
    """The server's side of one exchange: what was sent, and a client that has gone
    (``receive`` answers ``http.disconnect``) once ``leave`` is set."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.receives = 0
        self.leave = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        self.receives += 1
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


def _quiet_stream(closed: asyncio.Event, first_sent: asyncio.Event) -> AsyncIterator[bytes]:
    async def events() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\n\n"
            first_sent.set()
            await asyncio.Event().wait()  # an engine that has gone quiet
            yield b"data: [DONE]\n\n"
        finally:
            closed.set()

    return events()


async def _relaying() -> tuple[Client, asyncio.Event, asyncio.Future[None]]:
    """A response relaying a quiet stream, its first event sent: the client, the
    stream's ``closed`` event and the response's call."""
    client, closed, first = Client(), asyncio.Event(), asyncio.Event()
    response = EventStreamResponse(_quiet_stream(closed, first), media_type="text/event-stream")
    call = asyncio.ensure_future(response(SCOPE, client.receive, client.send))
    await first.wait()
    return client, closed, call


@run_async
async def test_a_client_gone_while_the_engine_is_quiet_ends_the_relay() -> None:
    client, closed, call = await _relaying()
    client.leave.set()
    await asyncio.wait_for(call, BOUND_S)  # returns normally: the client left
    assert closed.is_set()
    assert client.sent[1]["body"] == b"data: 1\n\n"


@run_async
async def test_a_shutdown_cancels_through_it() -> None:
    _, _, call = await _relaying()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


@run_async
async def test_a_stream_that_ends_at_once_never_starts_the_watch() -> None:
    async def events() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: [DONE]\n\n"

    client = Client()
    # Nothing here awaits anything that suspends, so the watch's timer cannot come due.
    await EventStreamResponse(events(), media_type="text/event-stream")(
        SCOPE, client.receive, client.send
    )
    assert client.receives == 0
    assert [m.get("body") for m in client.sent[1:]] == [b"data: 1\n\n", b"data: [DONE]\n\n", b""]
