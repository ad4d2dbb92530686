"""A pool of HTTP/1.1 keep-alive connections to OpenAI-compatible engines (vLLM, SGLang,
TGI, …).

Not httpx or aiohttp on this path: a FastAPI proxy on ``httpx.AsyncClient`` spent ~1.8 ms
of CPU per request on these machines, one on ``aiohttp.ClientSession`` ~0.23 ms
(DESIGN.md); replacing aiohttp with this pool of ``adapters.upstream.connection``
protocols took the gateway from 0.41 to 0.35 ms of CPU per proxied request. httpx is
used off the hot path (cloud and pricing APIs, tests).

Foreign exceptions become skyroute's ``Upstream*`` errors here, once.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit

from adapters.upstream.connection import Connection
from base.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout


@dataclass(frozen=True)
class UpstreamTimeouts:
    """Timeouts in seconds: TCP connect, first byte (response headers), idle between reads."""

    connect_s: float
    first_byte_s: float
    idle_s: float


@dataclass(frozen=True)
class _Target:
    """Where a URL's request goes, parsed once per URL."""

    key: tuple[str, str, int]  # scheme, host, port: one pool each
    path: bytes
    host_header: bytes


class UpstreamResponse:
    """An upstream response whose headers have arrived. Close it (or use ``async with``).

    ``read()`` returns the whole body; ``iter_chunks()`` yields bytes as they arrive,
    unbuffered. Errors after the headers raise UpstreamStreamError (or UpstreamTimeout
    when the idle timeout passes between two reads).
    """

    __slots__ = ("_conn", "_idle_s", "_pool", "status")

    def __init__(self, conn: Connection, pool: _HostPool, idle_s: float) -> None:
        self._conn = conn
        self._pool = pool
        self._idle_s = idle_s
        self.status = conn.status

    async def read(self) -> bytes:
        """The whole body. Raises UpstreamTimeout or UpstreamStreamError."""
        parts = []
        while chunk := await self._conn.next_chunk(self._idle_s):
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def first_chunk(self, timeout_s: float) -> bytes:
        """The body's first piece, waited for up to ``timeout_s`` (not the idle timeout:
        an engine may take longer to start than to go on), or ``b""`` if the body is
        empty. Raises UpstreamTimeout or UpstreamStreamError. ``iter_chunks`` goes on
        from the next piece."""
        return await self._conn.next_chunk(timeout_s, f"no first chunk within {timeout_s:.1f}s")

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Bytes as they arrive. Raises UpstreamTimeout or UpstreamStreamError mid-way."""
        while chunk := await self._conn.next_chunk(self._idle_s):
            yield chunk

    def close(self) -> None:
        """Release the connection: back to the pool if the body was read to the end,
        dropped otherwise. Idempotent."""
        self._pool.release(self._conn)

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _HostPool:
    """Keep-alive connections to one (scheme, host, port), at most ``limit`` open."""

    def __init__(self, key: tuple[str, str, int], limit: int, tls: ssl.SSLContext | None) -> None:
        self.key = key
        self.limit = limit
        self.tls = tls
        self.idle: deque[Connection] = deque()
        self.open = 0
        self.busy: set[Connection] = set()
        self.waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self, connect_s: float) -> Connection:
        """An idle live connection, else a new one. Waits while ``limit`` are busy.
        Raises UpstreamConnectError or UpstreamTimeout (connect)."""
        while True:
            while self.idle:
                conn = self.idle.pop()  # the most recent: the least likely to be stale
                if not conn.closed:
                    self.busy.add(conn)
                    return conn
                self.open -= 1
            if self.open < self.limit:
                break
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self.waiters:
                    self.waiters.remove(waiter)
        self.open += 1
        try:
            conn = await self._connect(connect_s)
        except BaseException:
            self.open -= 1
            self._wake_one()
            raise
        self.busy.add(conn)
        return conn

    async def _connect(self, connect_s: float) -> Connection:
        scheme, host, port = self.key
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_s):
                _, conn = await loop.create_connection(
                    Connection,
                    host,
                    port,
                    ssl=self.tls,
                    server_hostname=host if self.tls else None,
                )
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"no connection to {scheme}://{host}:{port} within {connect_s:.1f}s"
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamConnectError(f"cannot reach {scheme}://{host}:{port}: {exc}") from exc
        return conn

    def release(self, conn: Connection) -> None:
        """Give ``conn`` back: kept if reusable, aborted otherwise. Idempotent."""
        if conn not in self.busy:
            return
        self.busy.discard(conn)
        if conn.reusable:
            self.idle.append(conn)
        else:
            conn.abort()
            self.open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for conn in (*self.idle, *self.busy):
            conn.abort()
        self.idle.clear()
        self.busy.clear()
        self.open = 0


class UpstreamClient:
    """Pooled keep-alive connections shared by every request of a gateway process.

    Create it inside the running event loop and ``await close()`` at shutdown.
    ``max_per_host`` bounds the connections to one engine address; requests beyond it
    wait for a free one (within their connect timeout budget).
    """

    def __init__(self, *, max_per_host: int = 256, tls: ssl.SSLContext | None = None) -> None:
        self._max_per_host = max_per_host
        self._tls = tls
        self._pools: dict[tuple[str, str, int], _HostPool] = {}
        self._targets: dict[str, _Target] = {}

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise UpstreamConnectError(f"not an http(s) URL: {url!r}")
            default = 443 if parts.scheme == "https" else 80
            port = parts.port or default
            host = parts.hostname
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            netloc = host if port == default else f"{host}:{port}"
            if ":" in host:  # IPv6 literal
                netloc = f"[{host}]" if port == default else f"[{host}]:{port}"
            target = _Target((parts.scheme, host, port), path.encode(), netloc.encode())
            if len(self._targets) < 4096:  # pool URLs are few; never grow without bound
                self._targets[url] = target
        return target

    def _pool(self, target: _Target) -> _HostPool:
        pool = self._pools.get(target.key)
        if pool is None:
            tls = None
            if target.key[0] == "https":
                self._tls = tls = self._tls or ssl.create_default_context()
            pool = self._pools[target.key] = _HostPool(target.key, self._max_per_host, tls)
        return pool

    async def _exchange(
        self,
        method: bytes,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeouts: UpstreamTimeouts,
    ) -> UpstreamResponse:
        target = self._target(url)
        pool = self._pool(target)
        head = _head(method, target, headers, len(body))
        for attempt in range(2):
            conn = await pool.acquire(timeouts.connect_s)
            try:
                conn.send(head, body)
                await conn.headers(timeouts.first_byte_s)
            except UpstreamError as exc:
                pool.release(conn)
                stale = conn.used > 1 and not conn.received
                if attempt == 0 and stale and isinstance(exc, UpstreamConnectError):
                    # The engine closed an idle keep-alive connection as we reused it;
                    # it never read this request, so sending it again is safe.
                    continue
                if isinstance(exc, UpstreamTimeout):
                    raise UpstreamTimeout(f"{url}: {exc}") from exc
                raise UpstreamConnectError(f"cannot reach {url}: {exc}") from exc
            except BaseException:
                pool.release(conn)  # cancelled mid-exchange: the connection is dropped
                raise
            return UpstreamResponse(conn, pool, timeouts.idle_s)
        raise AssertionError("unreachable")  # pragma: no cover

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeouts: UpstreamTimeouts,
    ) -> UpstreamResponse:
        """POST ``body`` to ``url`` and wait for the response headers.

        Raises UpstreamConnectError (no connection, or it closed before the headers),
        UpstreamTimeout (no connection within ``connect_s`` or no headers within
        ``first_byte_s``). The caller owns the returned response and must close it.
        """
        return await self._exchange(b"POST", url, body, headers, timeouts)

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        """GET ``url`` and read the body (probes, model lists), all within ``timeout_s``.
        Raises UpstreamConnectError or UpstreamTimeout."""
        timeouts = UpstreamTimeouts(timeout_s, timeout_s, timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                async with await self._exchange(b"GET", url, b"", {}, timeouts) as resp:
                    return resp.status, await resp.read()
        except TimeoutError as exc:
            raise UpstreamTimeout(f"no response from {url} within {timeout_s:.1f}s") from exc

    def _silent(self, url: str) -> list[Connection]:
        pool = self._pools.get(self._target(url).key)
        return [] if pool is None else [conn for conn in pool.busy if conn.silent]

    def count_silent(self, url: str) -> int:
        """How many exchanges with the engine at ``url``'s origin have had no byte of
        their answer's body yet (what ``abandon_silent`` would fail)."""
        return len(self._silent(url))

    def abandon_silent(self, url: str, reason: str) -> int:
        """Fail at once every exchange with the engine at ``url``'s origin (scheme, host,
        port) that has had no byte of its answer's body yet: each raises UpstreamTimeout
        (``reason``) to its caller, as its own deadline (for the headers or the first
        chunk) would have, and its connection is dropped. Exchanges whose body has begun
        are left alone (a stream may already be reaching its client). Returns how many were
        failed. For an engine just found hung: what waits on it would otherwise each sit
        out a whole deadline before failing over."""
        silent = self._silent(url)
        for conn in silent:
            conn.give_up(reason)
        return len(silent)

    async def close(self) -> None:
        """Close every pooled connection. Idempotent."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def _head(method: bytes, target: _Target, headers: Mapping[str, str], length: int) -> bytes:
    lines = [
        method + b" " + target.path + b" HTTP/1.1",
        b"host: " + target.host_header,
        b"content-length: " + str(length).encode(),
    ]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            # The server side's parser never lets these through; a header built here
            # with them would split the request.
            raise UpstreamConnectError(f"refusing a header with a line break: {name!r}")
        lines.append(f"{name}: {value}".encode("latin-1"))
    lines.append(b"\r\n")
    return b"\r\n".join(lines)
