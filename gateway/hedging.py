"""Attempts in sequence, with an optional hedge: the next attempt starts early when the
first has been silent for longer than it should have been, and the first to answer wins.

Without a hedge this is plain failover: one attempt at a time, the next one starting
when the previous fails. With ``hedge_after_s``, a second attempt starts once the first
has run that long with no outcome; from then on two run at a time (a failed one is
replaced by the next), the first success wins and the others are cancelled (their engine
connections closed, so the engines stop the work). Failures never end the race while
another attempt is still running.

Pure control flow over awaitables: what an attempt is, and what closing a loser's
answer means, are the caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from base.errors import UpstreamError

T = TypeVar("T")


@dataclass(slots=True)
class Outcome(Generic[T]):
    """The winning answer, which attempt gave it (0-based, in start order), and whether
    the first attempt was still silent when a hedge started (``hedged_first_ms``: how
    long it had been running then; None without a hedge)."""

    value: T
    winner: int
    hedged_first_ms: float | None = None


async def race(
    start_next: Callable[[], Coroutine[Any, Any, T] | None],
    hedge_after_s: float | None,
    discard: Callable[[T], Awaitable[None]],
) -> Outcome[T]:
    """Run attempts from ``start_next`` (None when there are no more) until one succeeds.

    Raises the last UpstreamError when every attempt failed, or what an attempt raised
    if it is not an UpstreamError (the others are cancelled first). Answers that
    succeed after the winner are given to ``discard``. Cancelling the caller cancels
    every attempt still running.
    """
    if hedge_after_s is None:
        return await _in_turn(start_next)
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[T]] = []
    pending: set[asyncio.Task[T]] = set()
    last: UpstreamError | None = None
    hedged_first_ms: float | None = None
    started_at = loop.time()

    def launch() -> bool:
        coro = start_next()
        if coro is None:
            return False
        task = loop.create_task(coro)
        tasks.append(task)
        pending.add(task)
        return True

    try:
        if not launch():
            raise LookupError("no attempt to start")
        while pending:
            hedge = hedged_first_ms is None and len(tasks) == 1
            timeout = max(hedge_after_s - (loop.time() - started_at), 0.0) if hedge else None
            done, _ = await asyncio.wait(
                pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                hedged_first_ms = (loop.time() - started_at) * 1000.0
                launch()
                continue
            for task in done:
                pending.discard(task)
                exc = task.exception()
                if exc is None:
                    return Outcome(task.result(), tasks.index(task), hedged_first_ms)
                if not isinstance(exc, UpstreamError):
                    raise exc
                last = exc
            # A failure is replaced at once: by the next attempt when nothing else runs
            # (failover), and by a new hedge when the first is still silent.
            hedging = hedged_first_ms is not None and len(pending) < 2
            if (not pending or hedging) and not launch() and not pending:
                break
        assert last is not None
        raise last
    finally:
        for task in pending:
            task.cancel()
        for result in await asyncio.gather(*pending, return_exceptions=True):
            if not isinstance(result, BaseException):
                await discard(result)


async def _in_turn(start_next: Callable[[], Coroutine[Any, Any, T] | None]) -> Outcome[T]:
    """Plain failover, awaited inline: no task per attempt on the path most requests
    take (a task and a wait cost about as much as the routing decision)."""
    last: UpstreamError | None = None
    number = 0
    while (coro := start_next()) is not None:
        try:
            return Outcome(await coro, number)
        except UpstreamError as exc:
            last = exc
            number += 1
    if last is None:
        raise LookupError("no attempt to start")
    raise last
