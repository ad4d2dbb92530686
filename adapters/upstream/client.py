"""An aiohttp connection pool to OpenAI-compatible engines (vLLM, SGLang, TGI, …).

aiohttp rather than httpx on this path: a FastAPI proxy on ``httpx.AsyncClient`` spent
~1.8 ms of CPU per request on these machines, one on an ``aiohttp.ClientSession`` ~0.23
ms (DESIGN.md). httpx is used off the hot path (cloud and pricing APIs, tests).

Foreign exceptions become skyroute's ``Upstream*`` errors here, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType

import aiohttp

from router.errors import (
    UpstreamConnectError,
    UpstreamStreamError,
    UpstreamTimeout,
)


@dataclass(frozen=True)
class UpstreamTimeouts:
    """Timeouts in seconds: TCP connect, first byte (response headers), idle between reads."""

    connect_s: float
    first_byte_s: float
    idle_s: float


class UpstreamResponse:
    """An upstream response whose headers have arrived. Close it (or use ``async with``).

    ``read()`` returns the whole body; ``iter_chunks()`` yields bytes as they arrive,
    unbuffered. Errors after the headers raise UpstreamStreamError (or UpstreamTimeout
    when the idle timeout passes between two reads).
    """

    __slots__ = ("_resp", "status")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status

    async def read(self) -> bytes:
        """The whole body. Raises UpstreamTimeout or UpstreamStreamError."""
        try:
            return await self._resp.read()
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout("upstream body timed out") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamStreamError(f"upstream body failed: {exc}") from exc

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Bytes as they arrive. Raises UpstreamTimeout or UpstreamStreamError mid-way."""
        try:
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout("upstream stream went idle") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamStreamError(f"upstream stream failed: {exc}") from exc

    def close(self) -> None:
        """Release the connection (aborts it if the body was not read). Idempotent."""
        self._resp.release()

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class UpstreamClient:
    """One pooled aiohttp session shared by every request of a gateway process.

    Create it inside the running event loop and ``await close()`` at shutdown.
    """

    def __init__(self, *, max_connections: int = 1024, max_per_host: int = 256) -> None:
        connector = aiohttp.TCPConnector(
            limit=max_connections,
            limit_per_host=max_per_host,
            ttl_dns_cache=300,
            enable_cleanup_closed=False,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            # The gateway sets its own timeouts per call; never a silent default.
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeouts: UpstreamTimeouts,
    ) -> UpstreamResponse:
        """POST ``body`` to ``url`` and wait for the response headers.

        Raises UpstreamConnectError (no connection), UpstreamTimeout (no headers within
        ``first_byte_s``). The caller owns the returned response and must close it.
        """
        timeout = aiohttp.ClientTimeout(
            total=None, connect=timeouts.connect_s, sock_read=timeouts.idle_s
        )
        try:
            async with asyncio.timeout(timeouts.first_byte_s):
                resp = await self._session.post(url, data=body, headers=headers, timeout=timeout)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"no response from {url} within {timeouts.first_byte_s:.1f}s"
            ) from exc
        except aiohttp.ServerTimeoutError as exc:
            raise UpstreamTimeout(f"timed out talking to {url}: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamConnectError(f"cannot reach {url}: {exc}") from exc
        return UpstreamResponse(resp)

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        """GET ``url`` and read the body (probes, model lists). Raises UpstreamConnectError
        or UpstreamTimeout."""
        try:
            async with asyncio.timeout(timeout_s):
                async with self._session.get(url) as resp:
                    return resp.status, await resp.read()
        except TimeoutError as exc:
            raise UpstreamTimeout(f"no response from {url} within {timeout_s:.1f}s") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamConnectError(f"cannot reach {url}: {exc}") from exc

    async def close(self) -> None:
        """Close every pooled connection. Idempotent."""
        await self._session.close()
