"""One HTTP/1.1 keep-alive connection to an engine, as an asyncio protocol.

The gateway's upstream calls are all alike: a small POST (or a probe's GET) to an
OpenAI-compatible engine, then a JSON body or an SSE stream back. A general client pays
for what this path never uses (cookies, redirects, proxies, tracing hooks, per-request
timeout objects): with aiohttp it was about a fifth of the gateway's CPU per request. Here
a request is one ``transport.write``; the response is parsed by ``httptools`` (llhttp, the
parser uvicorn uses) straight from ``data_received``, and timeouts are plain loop timers.

One exchange at a time per connection; ``adapters.upstream.client`` pools them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import cast

import httptools

from base.errors import UpstreamConnectError, UpstreamStreamError, UpstreamTimeout

# Stop reading from the socket while this much body is waiting for the consumer, so that
# a slow client of a fast engine holds back the engine instead of the gateway's memory.
HIGH_WATER_BYTES = 256 * 1024
LOW_WATER_BYTES = 64 * 1024


def _expire(waiter: asyncio.Future[None], message: str) -> None:
    if not waiter.done():
        waiter.set_exception(UpstreamTimeout(message))


class Connection(asyncio.Protocol):
    """An HTTP/1.1 client connection. Not safe for two exchanges at once.

    Life cycle: ``send()`` a request, ``await headers(timeout)``, then ``await
    next_chunk(timeout)`` until it returns ``b""`` (body complete). ``reusable`` says
    whether the connection may carry another exchange afterwards; otherwise ``abort()``.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = 0  # exchanges started on this connection
        self._loop = asyncio.get_running_loop()
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.received = False  # any byte of this exchange's response
        self._body_seen = False  # any byte of its body
        self._headers_done = False
        self._complete = False
        self._keep_alive = False
        self._until_close = True  # no Content-Length and not chunked: body ends at EOF
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._complete:  # bytes nobody asked for: the stream is out of step
            self.abort()
            return
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamStreamError(f"malformed response from the engine: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._headers_done and self._until_close and not self._complete:
            self._complete = True  # a body delimited by the end of the connection
            self._wake()
        elif not self._complete:
            reason = f": {exc}" if exc else ""
            if self._headers_done:
                self._fail(UpstreamStreamError(f"engine closed the connection mid-body{reason}"))
            else:
                self._fail(UpstreamConnectError(f"engine closed the connection{reason}"))

    def pause_writing(self) -> None:  # requests are small; nothing to hold back
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks ----------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-length" or (
            lowered == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self._until_close = False

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()
        self._headers_done = True
        if self.status in (204, 304) or 100 <= self.status < 200:
            self._until_close = False
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._body_seen = True
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER_BYTES and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._complete = True
        self._wake()

    # -- the exchange -----------------------------------------------------------------

    def send(self, head: bytes, body: bytes) -> None:
        """Start an exchange: write the request head and body. Raises UpstreamConnectError
        when the connection is already gone."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise UpstreamConnectError("connection to the engine is closed")
        if self.used:
            self._reset()
        self.used += 1
        self.transport.write(head + body)

    async def headers(self, timeout_s: float) -> int:
        """Wait for the response status line and headers; return the status. Raises
        UpstreamTimeout, or UpstreamConnectError if the connection closes first."""
        while not self._headers_done:
            await self._wait(timeout_s, f"no response headers within {timeout_s:.1f}s")
        return self.status

    async def next_chunk(self, idle_s: float, silence: str = "") -> bytes:
        """The next piece of body, or ``b""`` once it is complete. Raises UpstreamTimeout
        (message ``silence``, or one about an idle engine) when nothing arrives for
        ``idle_s``, or UpstreamStreamError if the connection breaks mid-body."""
        while not self._chunks:
            if self._complete:
                return b""
            await self._wait(idle_s, silence or f"engine went idle for {idle_s:.1f}s mid-body")
        # Everything that has arrived, as one piece: an engine's events often come
        # several to a read (httptools gives each HTTP chunk apart), and each piece
        # costs the relay a pass and the client a write; merging delays none of them.
        chunk = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < LOW_WATER_BYTES and self.transport:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    @property
    def reusable(self) -> bool:
        """The exchange finished cleanly and the engine keeps the connection alive."""
        return self._complete and self._keep_alive and not self._chunks and not self.closed

    @property
    def silent(self) -> bool:
        """An exchange is under way and no byte of its answer has come yet: no headers,
        or (a stream's engine sends them before its first token) headers and no body."""
        return self.used > 0 and not self._body_seen and not self._complete and not self.closed

    def give_up(self, reason: str) -> None:
        """Stop waiting for a silent engine: the waiter gets UpstreamTimeout(``reason``)
        at once, as if its deadline had passed, and the connection is dropped."""
        self._fail(UpstreamTimeout(reason))
        self.abort()

    def abort(self) -> None:
        """Drop the connection at once (idempotent); any waiter gets an error."""
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True
        if not self._complete:
            self._fail(UpstreamStreamError("connection to the engine was aborted"))

    # -- internals --------------------------------------------------------------------

    def _fail(self, exc: Exception) -> None:
        if self._error is None:
            self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, timeout_s: float, message: str) -> None:
        if self._error is not None:
            raise self._error
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiter = waiter
        timer = self._loop.call_later(timeout_s, _expire, waiter, message)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        if self._error is not None:
            raise self._error
