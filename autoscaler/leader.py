"""Leader election among the sidecars: one Redis lease with a fencing token.

Every sidecar runs :meth:`Leadership.run`: the holder renews the lease every third of
its TTL, the others try to take it as often. A holder counts itself leader only while
its last successful renewal is younger than ``trust`` × TTL (two thirds by default), so
it stops acting before the lease can expire and pass to another sidecar, even if its
clock runs slow or Redis becomes unreachable. When a leader dies its lease expires
after at most one TTL and a standby takes it within a third of a TTL more: a new leader
within 4/3 × TTL. Writes that must not come from a deposed leader (the autoscaler's
state) carry the lease's fence, which Redis checks atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from base.errors import TableError
from live.lease import Fence

__all__ = ["Leadership", "LeaseLike"]

logger = logging.getLogger(__name__)


class LeaseLike(Protocol):
    """The lease operations leadership needs (``live.lease.Lease`` fits)."""

    holder: str
    ttl_ms: int

    @property
    def fence(self) -> Fence | None: ...

    async def acquire(self) -> int | None: ...

    async def renew(self) -> bool: ...

    async def release(self) -> bool: ...


class Leadership:
    """Whether this sidecar leads, kept current by :meth:`run` (or :meth:`tick`)."""

    def __init__(
        self,
        lease: LeaseLike,
        *,
        trust: float = 2.0 / 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < trust < 1:
            raise ValueError("trust must be in (0, 1)")
        self.lease = lease
        self.trust = trust
        self.clock = clock
        self._confirmed_at: float | None = None

    @property
    def holder(self) -> str:
        """This sidecar's holder id."""
        return self.lease.holder

    @property
    def fence(self) -> Fence | None:
        """The lease's fence while leading, else None."""
        return self.lease.fence if self.is_leader() else None

    def is_leader(self) -> bool:
        """True while the lease is ours and was confirmed recently enough to act on."""
        at = self._confirmed_at
        if at is None or self.lease.fence is None:
            return False
        return self.clock() - at < self.trust * self.lease.ttl_ms / 1000.0

    async def tick(self) -> bool:
        """Renew the lease if we hold it, else try to take it; returns ``is_leader()``.
        A Redis failure counts as not confirming (leadership then lapses on its own)."""
        was = self.is_leader()
        started = self.clock()
        try:
            ok = (
                await self.lease.renew()
                if self.lease.fence is not None
                else await self.lease.acquire() is not None
            )
        except TableError as exc:
            logger.warning("lease: %s", exc)
            ok = False
        if ok:
            # Count from before the call: the lease was extended at some point within it.
            self._confirmed_at = started
        elif self.lease.fence is None:
            self._confirmed_at = None
        now = self.is_leader()
        if now != was:
            fence = self.lease.fence
            token = fence.token if fence else None
            logger.info("%s: %s (token %s)", self.holder, "leader" if now else "standby", token)
        return now

    async def run(self, stop: asyncio.Event) -> None:
        """Loop ``tick`` every third of the TTL until ``stop`` is set, then release the
        lease so a standby need not wait for it to expire."""
        period = self.lease.ttl_ms / 3000.0
        while not stop.is_set():
            await self.tick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=period)
        await self.resign()

    async def resign(self) -> None:
        """Give the lease up now (shutdown). Never raises."""
        self._confirmed_at = None
        try:
            await self.lease.release()
        except TableError as exc:
            logger.warning("lease release failed: %s", exc)
