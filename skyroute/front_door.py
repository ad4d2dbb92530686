"""The front door: what a slow or idle client may hold of one gateway process.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but has no
header or body read timeout and no cap on open connections: 20,000 connections that
send half a request line each (a slowloris) held every file descriptor of the process,
and normal requests were reset. ``guarded_protocol`` returns uvicorn's httptools
protocol with three guards added:

- **header timeout**: a request's headers must be complete ``header_timeout_s`` after
  its first byte (or after the connection opened, for one that sends nothing);
- **body timeout**: its body must be complete ``body_timeout_s`` after the headers. A
  total, not an idle timer: one byte every few seconds must not keep a slot forever.
  A client that misses either gets ``408`` (if no answer has started) and is closed;
- **connection cap**: at most ``max_connections`` open at once. A new connection over
  the cap closes the connection that has been *waiting* longest (open, with no request
  in progress: idle keep-alive or headers not yet complete); if none is waiting, every
  slot is doing work and the new connection is closed at once. So a flood of idle or
  half-open connections can never lock out a client that sends a whole request.

All three act in the event loop's callbacks: nothing is added to a request that
arrives whole, in time.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.fast_paths import COALESCE_KEY
from skyroute.write_coalescing import CoalescingTransport

logger = logging.getLogger(__name__)

# An OpenAI-shaped 408: clients that parse every error body get one they understand.
_TIMEOUT_BODY = (
    b'{"error":{"message":"the request was not received in time","type":"invalid_request_error",'
    b'"param":null,"code":"request_timeout"}}'
)
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n"
    + _TIMEOUT_BODY
)  # fmt: skip
# File descriptors kept back from the connection cap: upstream and Redis connections,
# the policy file, logs.
FD_RESERVE = 256


@dataclass(frozen=True, slots=True)
class FrontDoorLimits:
    """Limits per gateway process. Times are seconds; ``max_connections`` counts client
    connections (not upstream ones)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 4096


@dataclass(slots=True)
class FrontDoorStats:
    """What the guards did since the process started (monotonic counts)."""

    header_timeouts: int = 0
    body_timeouts: int = 0
    evicted_waiting: int = 0
    refused_full: int = 0
    # Connections with no request in progress, oldest first (insertion order).
    waiting: OrderedDict[HttpToolsProtocol, None] = field(default_factory=OrderedDict)


def connection_cap(requested: int, reserve: int = FD_RESERVE) -> int:
    """``requested``, lowered to fit the process's open-file limit.

    Raises the soft ``RLIMIT_NOFILE`` to the hard limit first (the usual soft limit of
    1024 is far below what a gateway needs), so the cap is the smaller of what was asked
    and what the kernel will allow, less ``reserve`` for the gateway's own sockets.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(16, min(requested, soft - reserve))


class _Clock(Protocol):
    """What ``DeadlineTimer`` needs of the event loop (tests pass a manual clock)."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], object]) -> asyncio.TimerHandle: ...


class DeadlineTimer:
    """A deadline that moves on every request, kept with ONE loop timer, never one per
    request: ``arm`` and ``disarm`` only move the deadline (an attribute), and the timer,
    when it fires before the deadline, re-arms itself for it. A new timer is made only
    when the deadline moves earlier than the pending one. (Two timers made and three
    cancelled per request were ~1.5 % of the gateway's CPU.)

    ``fire(tag)`` runs once when the loop's clock passes an armed deadline, with the
    ``tag`` given to the ``arm`` that set it. Times are the loop's clock, in seconds."""

    __slots__ = ("_deadline", "_fire", "_handle", "_handle_at", "_loop", "_tag")

    def __init__(self, loop: _Clock, fire: Callable[[bool], None]) -> None:
        self._loop = loop
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self._handle_at = 0.0
        self._deadline: float | None = None
        self._tag = False

    def arm(self, delay_s: float, tag: bool) -> None:
        """Fire ``delay_s`` from now (replacing any armed deadline)."""
        deadline = self._loop.time() + delay_s
        self._deadline, self._tag = deadline, tag
        if self._handle is None or deadline < self._handle_at:
            self._schedule(deadline)

    def disarm(self) -> None:
        """Fire nothing until armed again (the pending timer, if any, finds no deadline)."""
        self._deadline = None

    def close(self) -> None:
        """Disarm and drop the loop timer. Idempotent."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, at: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(at, self._check)
        self._handle_at = at

    def _check(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:
            return
        if self._loop.time() < deadline:
            self._schedule(deadline)
            return
        self._deadline = None
        self._fire(self._tag)


def guarded_protocol(
    limits: FrontDoorLimits, stats: FrontDoorStats | None = None
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class with the front-door guards, to pass as
    ``uvicorn.Config(http=...)``. All connections of the class share ``stats``."""
    shared = stats if stats is not None else FrontDoorStats()

    class GuardedProtocol(HttpToolsProtocol):
        _door: DeadlineTimer | None = None
        # A request has begun and its headers are not complete yet.
        _in_headers: bool = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= limits.max_connections and not _evict_oldest_waiting():
                shared.refused_full += 1
                transport.abort()
                return
            super().connection_made(transport)
            # uvicorn's flow control keeps the real transport (it paused it above);
            # responses write through the wrapper, which a fast route may hold.
            self.transport = CoalescingTransport(transport)  # type: ignore[assignment]
            self._door = DeadlineTimer(self.loop, self._timed_out)
            self._waiting(True)
            self._arm(limits.header_timeout_s, header=True)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._door is not None:
                self._door.close()
            shared.waiting.pop(self, None)
            if self.transport is not None:  # None when refused in connection_made
                super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_headers = True
            self._arm(limits.header_timeout_s, header=True)

        def on_headers_complete(self) -> None:
            self._in_headers = False
            super().on_headers_complete()
            # The request's scope (the same dict its cycle and app get; the app's task
            # has not run yet).
            self.scope[COALESCE_KEY] = self.transport  # type: ignore[literal-required]
            self._waiting(False)
            self._arm(limits.body_timeout_s, header=False)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing() or self.pipeline:
                return
            self._waiting(True)
            if not self._in_headers:
                # The next request's header clock starts at its first byte; until
                # then uvicorn's keep-alive timeout bounds the idle connection.
                self._disarm()

        # -- guards ------------------------------------------------------------------

        def _waiting(self, waiting: bool) -> None:
            if waiting:
                shared.waiting[self] = None
                shared.waiting.move_to_end(self)
            else:
                shared.waiting.pop(self, None)

        def _arm(self, delay_s: float, *, header: bool) -> None:
            if self._door is not None:
                self._door.arm(delay_s, header)

        def _disarm(self) -> None:
            if self._door is not None:
                self._door.disarm()

        def _timed_out(self, header: bool) -> None:
            if self.transport.is_closing():
                return
            if header:
                shared.header_timeouts += 1
            else:
                shared.body_timeouts += 1
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(_TIMEOUT_RESPONSE)
            # The app, if it runs, sees the disconnect (``http.disconnect``) and stops.
            self.transport.close()

    def _evict_oldest_waiting() -> bool:
        while shared.waiting:
            conn, _ = shared.waiting.popitem(last=False)
            if not conn.transport.is_closing():
                shared.evicted_waiting += 1
                conn.transport.abort()
                return True
        return False

    return GuardedProtocol


def log_stats(stats: FrontDoorStats) -> None:
    """One INFO line with the guards' counts, if any guard acted (at shutdown)."""
    counts = {
        "header_timeouts": stats.header_timeouts,
        "body_timeouts": stats.body_timeouts,
        "evicted_waiting": stats.evicted_waiting,
        "refused_full": stats.refused_full,
    }
    if any(counts.values()):
        logger.info("front door", extra={"fields": counts})
