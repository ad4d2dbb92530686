"""One write per whole answer: ``CoalescingTransport`` on its own, and uvicorn's real
HTTP protocol (with the front-door guards) serving a fast route over a transport that
records every write it is given."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.config import Config
from uvicorn.server import ServerState

from gateway.event_stream import EventStreamResponse
from gateway.fast_paths import GatewayApp
from skyroute.front_door import FrontDoorLimits, guarded_protocol
from skyroute.write_coalescing import CoalescingTransport


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what is written, one entry per ``write`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.wrote = asyncio.Event()

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))
        self.wrote.set()

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )


def test_writes_pass_through_until_held() -> None:
    real = RecordingTransport()
    t = CoalescingTransport(real)
    t.write(b"a")
    t.write(b"b")
    assert real.writes == [b"a", b"b"]


def test_held_writes_go_out_as_one_in_order() -> None:
    real = RecordingTransport()
    t = CoalescingTransport(real)
    t.hold()
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.writelines([b"{", memoryview(b'"x": 1}')])
    assert real.writes == []
    t.flush()
    assert real.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"x": 1}']
    t.flush()  # idempotent, and writes pass through again
    t.write(b"next")
    assert real.writes[-1] == b"next" and len(real.writes) == 2


def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    real = RecordingTransport()
    t = CoalescingTransport(real)
    t.hold()
    t.write(b"answer")
    t.close()
    assert real.writes == [b"answer"] and real.closed

    other = RecordingTransport()
    t = CoalescingTransport(other)
    t.hold()
    t.write(b"answer")
    t.abort()
    t.flush()
    assert other.writes == [] and other.aborted


def test_nothing_is_written_to_a_closing_connection() -> None:
    real = RecordingTransport()
    t = CoalescingTransport(real)
    t.hold()
    t.write(b"late")
    real.closed = True
    t.flush()
    assert real.writes == []


async def _unary(request: Request) -> Response:
    body = await request.body()
    return JSONResponse({"echo": body.decode()})


# Set by the test once it has seen the stream's first write: the next event is sent
# only then, so it cannot have been held with the first.
NEXT_EVENT: list[asyncio.Event] = []


async def _stream(request: Request) -> Response:
    async def events() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        await NEXT_EVENT[0].wait()
        yield b"data: [DONE]\n\n"

    return EventStreamResponse(events(), media_type="text/event-stream")


def _app() -> GatewayApp:
    app = GatewayApp()
    routes = [
        Route("/v1/unary", _unary, methods=["POST"]),
        Route("/v1/stream", _stream, methods=["POST"]),
    ]
    app.router.routes.extend(routes)
    app.add_fast_routes(routes)

    @app.get("/plain")
    async def plain() -> dict[str, str]:
        return {"plain": "yes"}

    return app


async def _exchange(request: bytes, complete: bytes) -> list[bytes]:
    """Serve ``request`` with the guarded protocol; the writes made until ``complete``
    has been written (a bound on the wait, never a sleep). A stream's second event is
    released once the first write has been made."""
    NEXT_EVENT[:] = [asyncio.Event()]
    config = Config(_app(), http="httptools", log_level="warning", access_log=False)
    config.load()
    protocol_class = guarded_protocol(FrontDoorLimits())
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    real = RecordingTransport()
    protocol.connection_made(real)
    protocol.data_received(request)

    async def until_complete() -> None:
        while complete not in b"".join(real.writes):
            if real.writes:
                NEXT_EVENT[0].set()
            real.wrote.clear()
            await real.wrote.wait()

    try:
        await asyncio.wait_for(until_complete(), timeout=10.0)
    finally:
        protocol.connection_lost(None)
    return real.writes


def _post(path: str, body: bytes, close: bool = False) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
    head += f"content-length: {len(body)}\r\n" + ("connection: close\r\n" if close else "")
    return head.encode() + b"\r\n" + body


@pytest.mark.parametrize("close", [False, True])
def test_a_whole_answer_is_one_write(close: bool) -> None:
    writes = asyncio.run(_exchange(_post("/v1/unary", b"hi", close), b'{"echo":"hi"}'))
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert writes[0].endswith(b'\r\n\r\n{"echo":"hi"}')


def test_a_stream_head_goes_with_its_first_event_and_later_events_as_they_come() -> None:
    writes = asyncio.run(_exchange(_post("/v1/stream", b"{}"), b"0\r\n\r\n"))
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert writes[0].endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\n")
    assert b"data: [DONE]" not in writes[0] and b"data: [DONE]" in b"".join(writes[1:])


def test_other_routes_answer_through_the_wrapper() -> None:
    request = b"GET /plain HTTP/1.1\r\nhost: t\r\n\r\n"
    writes = asyncio.run(_exchange(request, b'{"plain":"yes"}'))
    assert b"".join(writes).startswith(b"HTTP/1.1 200 OK\r\n")


def test_a_held_buffer_is_copied_so_its_reuse_changes_nothing() -> None:
    real = RecordingTransport()
    t = CoalescingTransport(real)
    t.hold()
    buf = bytearray(b"first")
    t.write(buf)
    buf[:] = b"SECOND"
    t.flush()
    assert real.writes == [b"first"]
