"""The upstream connection pool against scripted HTTP/1.1 servers on 127.0.0.1.

Each server reads one request at a time and answers with the bytes the test gives it, so
the framing cases (Content-Length, chunked, close-delimited), keep-alive reuse, stale
connections, timeouts and TLS are each exercised on a real socket.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from adapters.upstream import UpstreamClient, UpstreamTimeouts
from base.errors import UpstreamConnectError, UpstreamStreamError, UpstreamTimeout
from tests.adapters.cloud.tls import make_local_ca
from tests.aio import run_async

TIMEOUTS = UpstreamTimeouts(connect_s=2.0, first_byte_s=2.0, idle_s=2.0)
OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


class Server:
    """Counts connections and the requests (head + body) it read."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[bytes] = []
        self.url = ""

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length) if length else b""
        self.requests.append(head + body)
        return head + body


@asynccontextmanager
async def serve(
    script: Callable[[Server, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    tls: ssl.SSLContext | None = None,
) -> AsyncIterator[Server]:
    server = Server()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            await script(server, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = srv.sockets[0].getsockname()[1]
    server.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/v1/chat/completions"
    async with srv:
        yield server


async def keep_alive_ok(
    server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter
) -> None:
    while await server.read_request(reader) is not None:
        w.write(OK)
        await w.drain()


@run_async
async def test_post_reads_a_content_length_body_and_reuses_the_connection() -> None:
    async with serve(keep_alive_ok) as server:
        client = UpstreamClient()
        for i in range(5):
            async with await client.post(
                server.url, b'{"i": %d}' % i, {"x-request-id": f"r{i}"}, TIMEOUTS
            ) as resp:
                assert resp.status == 200
                assert await resp.read() == b'{"ok":true}'
        await client.close()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nx-request-id: r0\r\n" in first
    assert b"\r\ncontent-length: 8\r\n" in first
    assert first.endswith(b'\r\n\r\n{"i": 0}')


@run_async
async def test_chunked_stream_arrives_piece_by_piece() -> None:
    release = asyncio.Event()

    async def chunked(
        server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        w.write(b"6\r\ndata:1\r\n")
        await w.drain()
        await release.wait()  # the second piece only after the first was consumed
        w.write(b"6\r\ndata:2\r\n0\r\n\r\n")
        await w.drain()
        await server.read_request(reader)

    async with serve(chunked) as server:
        client = UpstreamClient()
        resp = await client.post(server.url, b"{}", {}, TIMEOUTS)
        chunks = resp.iter_chunks()
        assert await anext(chunks) == b"data:1"
        release.set()
        assert [c async for c in chunks] == [b"data:2"]
        resp.close()
        await client.close()


@run_async
async def test_pieces_that_arrived_together_come_out_as_one() -> None:
    # An engine's events often arrive several to a read; each piece costs the relay a
    # pass and the client a write, so what is already at hand is handed over at once.
    async def chunked(
        server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        # One write (one loopback segment): the head and three pieces arrive together.
        w.write(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            b"6\r\ndata:1\r\n6\r\ndata:2\r\n6\r\ndata:3\r\n0\r\n\r\n"
        )
        await w.drain()
        await server.read_request(reader)

    async with serve(chunked) as server:
        client = UpstreamClient()
        resp = await client.post(server.url, b"{}", {}, TIMEOUTS)
        assert [c async for c in resp.iter_chunks()] == [b"data:1data:2data:3"]
        resp.close()
        await client.close()


@run_async
async def test_body_delimited_by_close() -> None:
    async def until_close(
        server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        w.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await w.drain()

    async with serve(until_close) as server:
        client = UpstreamClient()
        async with await client.post(server.url, b"{}", {}, TIMEOUTS) as resp:
            assert await resp.read() == b"all of it"
        async with await client.post(server.url, b"{}", {}, TIMEOUTS) as resp:
            assert await resp.read() == b"all of it"
        await client.close()
    assert server.connections == 2  # "connection: close" is honoured


@run_async
async def test_a_stale_keep_alive_connection_is_retried_once_on_a_new_one() -> None:
    async def one_then_close(
        server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        w.write(OK)
        await w.drain()
        # The engine's keep-alive timer fires while the next request is already on its
        # way: it closes without reading it.
        await asyncio.sleep(0.1)

    async with serve(one_then_close) as server:
        client = UpstreamClient()
        for i in range(3):
            async with await client.post(server.url, b"%d" % i, {}, TIMEOUTS) as resp:
                assert await resp.read() == b'{"ok":true}'
        await client.close()
    # Requests 2 and 3 each went out on a connection the engine then dropped unread,
    # and were sent again on a new one: each was read exactly once.
    assert [r[-1:] for r in server.requests] == [b"0", b"1", b"2"]
    assert server.connections == 3


@run_async
async def test_engine_closing_mid_body_is_a_stream_error() -> None:
    async def half(server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await w.drain()

    async with serve(half) as server:
        client = UpstreamClient()
        resp = await client.post(server.url, b"{}", {}, TIMEOUTS)
        with pytest.raises(UpstreamStreamError):
            await resp.read()
        resp.close()
        await client.close()


@run_async
async def test_no_headers_in_time_is_a_timeout() -> None:
    async def silent(server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        await asyncio.sleep(5)

    async with serve(silent) as server:
        client = UpstreamClient()
        with pytest.raises(UpstreamTimeout):
            await client.post(server.url, b"{}", {}, UpstreamTimeouts(1.0, 0.2, 1.0))
        await client.close()


@run_async
async def test_idle_stream_is_a_timeout() -> None:
    async def stalls(server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await w.drain()
        await asyncio.sleep(5)

    async with serve(stalls) as server:
        client = UpstreamClient()
        resp = await client.post(server.url, b"{}", {}, UpstreamTimeouts(1.0, 1.0, 0.2))
        chunks = resp.iter_chunks()
        assert await anext(chunks) == b"abc"
        with pytest.raises(UpstreamTimeout):
            await anext(chunks)
        resp.close()
        await client.close()


@run_async
async def test_first_chunk_has_its_own_timeout_then_the_stream_goes_on() -> None:
    go_on, more = asyncio.Event(), asyncio.Event()

    async def slow_start(
        server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> None:
        # One request per connection: the client drops the one whose body it gave up on.
        await server.read_request(reader)
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await w.drain()
        await go_on.wait()  # the first request's body never comes: it times out
        w.write(b"3\r\nabc\r\n")
        await w.drain()
        await more.wait()
        w.write(b"2\r\nde\r\n0\r\n\r\n")
        await w.drain()

    async with serve(slow_start) as server:
        client = UpstreamClient()
        timeouts = UpstreamTimeouts(connect_s=2.0, first_byte_s=2.0, idle_s=30.0)
        resp = await client.post(server.url, b"{}", {}, timeouts)
        with pytest.raises(UpstreamTimeout, match=r"no first chunk within 0\.1s"):
            await resp.first_chunk(0.1)  # far shorter than the idle timeout
        resp.close()
        go_on.set()
        resp = await client.post(server.url, b"{}", {}, timeouts)
        assert await resp.first_chunk(2.0) == b"abc"
        more.set()
        assert [c async for c in resp.iter_chunks()] == [b"de"]
        resp.close()
        await client.close()


@run_async
async def test_refused_connection_is_a_connect_error() -> None:
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    client = UpstreamClient()
    with pytest.raises(UpstreamConnectError):
        await client.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}, TIMEOUTS)
    with pytest.raises(UpstreamConnectError):
        await client.get(f"http://127.0.0.1:{port}/health", 1.0)
    await client.close()


@run_async
async def test_unread_body_drops_the_connection() -> None:
    async with serve(keep_alive_ok) as server:
        client = UpstreamClient()
        resp = await client.post(server.url, b"{}", {}, TIMEOUTS)
        resp.close()  # body not read: the connection is not reused
        resp.close()  # idempotent
        async with await client.post(server.url, b"{}", {}, TIMEOUTS) as resp:
            assert await resp.read() == b'{"ok":true}'
        await client.close()
    assert server.connections == 2


@run_async
async def test_per_host_limit_queues_requests() -> None:
    async with serve(keep_alive_ok) as server:
        client = UpstreamClient(max_per_host=2)

        async def one() -> bytes:
            async with await client.post(server.url, b"{}", {}, TIMEOUTS) as resp:
                return await resp.read()

        bodies = await asyncio.gather(*(one() for _ in range(20)))
        await client.close()
    assert bodies == [b'{"ok":true}'] * 20
    assert server.connections <= 2


@run_async
async def test_large_body_with_back_pressure() -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB, well over the pause threshold

    async def big(server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(payload) + payload)
        await w.drain()
        await server.read_request(reader)

    async with serve(big) as server:
        client = UpstreamClient()
        resp = await client.post(server.url, b"{}", {}, TIMEOUTS)
        got = bytearray()
        async for chunk in resp.iter_chunks():
            got += chunk
            await asyncio.sleep(0)
        resp.close()
        await client.close()
    assert bytes(got) == payload


@run_async
async def test_header_with_a_line_break_is_refused_before_sending() -> None:
    async with serve(keep_alive_ok) as server:
        client = UpstreamClient()
        with pytest.raises(UpstreamConnectError):
            await client.post(server.url, b"{}", {"x-evil": "a\r\nx-injected: 1"}, TIMEOUTS)
        await client.close()
    assert server.requests == []


@run_async
async def test_https_with_a_private_ca(tmp_path: Path) -> None:
    ca = make_local_ca(tmp_path)
    trust = ssl.create_default_context(cafile=str(ca.ca_path))
    async with serve(keep_alive_ok, tls=ca.server_context()) as server:
        client = UpstreamClient(tls=trust)
        async with await client.post(server.url, b"{}", {}, TIMEOUTS) as resp:
            assert await resp.read() == b'{"ok":true}'
        await client.close()
        untrusting = UpstreamClient()  # the system roots do not know the test CA
        with pytest.raises(UpstreamConnectError):
            await untrusting.post(server.url, b"{}", {}, TIMEOUTS)
        await untrusting.close()


@run_async
async def test_get_reads_status_and_body() -> None:
    async def health(server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        request = await server.read_request(reader)
        assert request is not None and request.startswith(b"GET /health HTTP/1.1\r\n")
        w.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy")
        await w.drain()

    async with serve(health) as server:
        client = UpstreamClient()
        status, body = await client.get(server.url.replace("/v1/chat/completions", "/health"), 1.0)
        await client.close()
    assert (status, body) == (503, b"busy")


@run_async
async def test_abandon_silent_fails_only_the_exchanges_with_no_answer_yet() -> None:
    four_read = asyncio.Event()
    go_on = asyncio.Event()
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"

    async def script(server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        request = await server.read_request(reader)
        if len(server.requests) == 4:
            four_read.set()
        if request is not None and request.endswith(b'"headers"'):
            # A stream's engine sends its headers before its first token, then hangs.
            w.write(chunked)
            await w.drain()
            await go_on.wait()
        elif request is not None and request.endswith(b'"answering"'):
            w.write(chunked + b"5\r\nfirst\r\n")
            await w.drain()
            await go_on.wait()
            w.write(b"4\r\nlast\r\n0\r\n\r\n")
            await w.drain()
        else:
            await go_on.wait()  # hung: not a byte until the test ends

    async with serve(script) as server:
        client = UpstreamClient()
        # Deadlines far beyond the test's bound: only abandon_silent can end these soon.
        slow = UpstreamTimeouts(2.0, 120.0, 120.0)
        silent = [
            asyncio.create_task(client.post(server.url, b'"hung"', {}, slow)) for _ in range(2)
        ]
        answering = await client.post(server.url, b'"answering"', {}, slow)
        headers_only = await client.post(server.url, b'"headers"', {}, slow)
        await asyncio.wait_for(four_read.wait(), 30)
        assert client.abandon_silent(server.url, "engine found hung") == 3
        for task in silent:
            with pytest.raises(UpstreamTimeout, match="engine found hung"):
                await asyncio.wait_for(task, 30)
        with pytest.raises(UpstreamTimeout, match="engine found hung"):
            await asyncio.wait_for(headers_only.first_chunk(120.0), 30)
        headers_only.close()
        # The exchange that had begun to answer goes on; another origin has nothing to fail.
        assert client.abandon_silent("http://engine.invalid/v1/chat/completions", "x") == 0
        go_on.set()
        chunks = [chunk async for chunk in answering.iter_chunks()]
        assert b"".join(chunks) == b"firstlast"
        answering.close()
        await client.close()
