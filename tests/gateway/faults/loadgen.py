"""A bounded load generator for fault tests: workers in a background thread send
requests to the gateway until stopped, a deadline or a request cap, and record each
outcome. 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.gateway.harness import API_KEY


@dataclass(frozen=True)
class Outcome:
    started: float
    ended: float
    status: int
    pool: str
    error: str


@dataclass
class LoadResult:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return len(self.outcomes)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != 200]

    def pools_between(self, start: float, end: float) -> Counter[str]:
        return Counter(o.pool for o in self.outcomes if start <= o.ended < end and o.status == 200)


class Load:
    """``workers`` concurrent clients posting ``body`` to ``url`` in a loop."""

    def __init__(
        self,
        url: str,
        body: dict[str, Any],
        *,
        workers: int = 8,
        max_s: float = 30.0,
        max_requests: int = 20_000,
        stream: bool = False,
    ) -> None:
        self.url = url
        self.body = {**body, "stream": stream}
        self.workers = workers
        self.max_s = max_s
        self.max_requests = max_requests
        self.result = LoadResult()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> LoadResult:
        self._stop.set()
        self._thread.join(timeout=self.max_s + 30)
        return self.result

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        deadline = time.monotonic() + self.max_s
        headers = {"Authorization": f"Bearer {API_KEY}"}
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
            await asyncio.gather(*(self._worker(session, deadline) for _ in range(self.workers)))

    async def _worker(self, session: aiohttp.ClientSession, deadline: float) -> None:
        while (
            not self._stop.is_set()
            and time.monotonic() < deadline
            and self.result.sent < self.max_requests
        ):
            started = time.monotonic()
            try:
                async with session.post(self.url, json=self.body) as resp:
                    body = await resp.read()
                    status, pool = resp.status, resp.headers.get("x-skyroute-pool", "")
                    error = "" if status == 200 else body[:200].decode(errors="replace")
                    if self.body["stream"] and status == 200 and b"data: [DONE]" not in body:
                        status, error = 599, "stream ended without [DONE]"
                    if status == 200 and b'"error"' in body and self.body["stream"]:
                        status, error = 598, "error event in stream"
            except (aiohttp.ClientError, TimeoutError) as exc:
                status, pool, error = 0, "", repr(exc)
            self.result.outcomes.append(Outcome(started, time.monotonic(), status, pool, error))
