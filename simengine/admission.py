"""FIFO admission to a replica's batch slots."""

from __future__ import annotations

import asyncio
from collections import deque


class BatchSlots:
    """A counting semaphore that admits waiters strictly in arrival order.

    ``asyncio.Semaphore`` lets a newcomer overtake queued waiters in some Python versions;
    a continuous-batching engine admits in FIFO order, so this one hands a released slot
    straight to the oldest waiter. Cancelling a waiter (client went away) never leaks a slot.
    """

    __slots__ = ("_free", "_size", "_waiters")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self._size = size
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def running(self) -> int:
        """Slots currently held."""
        return self._size - self._free

    @property
    def waiting(self) -> int:
        """Callers queued for a slot."""
        return len(self._waiters)

    async def acquire(self) -> None:
        """Wait for a slot, FIFO. The caller must :meth:`release` it exactly once."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.cancelled():
                # release() may already have dropped it while skipping done futures.
                if fut in self._waiters:
                    self._waiters.remove(fut)
            else:
                # The slot was handed over just before the cancellation landed: pass it on.
                self.release()
            raise

    def release(self) -> None:
        """Return a slot, handing it to the oldest waiter if there is one."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1
