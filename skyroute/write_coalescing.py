"""A transport that can hold a response's writes and send them as one.

uvicorn writes a response's status line and headers with one ``transport.write`` and
its body with another. Each write is a system call, and on a loopback or same-host
connection it also runs the receiving side of the TCP stack; at a few thousand requests
per second the second write of every answer cost about a tenth of the gateway's CPU.
``CoalescingTransport`` sits between uvicorn's protocol and the real transport: while
held (``hold``), writes are buffered, and ``flush`` sends them in one write. The gateway
holds around a whole answer it sends in one stretch of its task, and from a stream's
head to the loop's next turn, by when the stream's first event (already at hand) has
joined it (``gateway.fast_paths``): nothing waits in the buffer for an event to come.

Everything else passes through to the real transport. Closing or aborting flushes or
drops what is held first, so a ``connection: close`` answer is never cut off.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescingTransport:
    """Wraps ``transport``; implements what uvicorn's HTTP protocol and
    ``gateway.fast_paths.WriteCoalescer`` use (other attributes are the wrapped
    transport's)."""

    __slots__ = ("_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        # None: writes go straight through; a list: they are held, in order.
        self._held: list[bytes] | None = None

    # -- WriteCoalescer -----------------------------------------------------------

    def hold(self) -> None:
        """Hold writes until ``flush``. Holding twice holds once."""
        if self._held is None:
            self._held = []

    def flush(self) -> None:
        """Write what is held as one write and stop holding. Idempotent; a no-op once
        the connection is closing (the bytes could not be sent)."""
        held, self._held = self._held, None
        if not held or self._transport.is_closing():
            return
        self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    # -- the transport methods uvicorn calls --------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data``, or hold it while held."""
        if self._held is None:
            self._transport.write(data)
        else:
            # A copy of a mutable buffer: the caller may reuse it before the flush (the
            # real transport copies what it cannot send at once, too).
            self._held.append(data if isinstance(data, bytes) else bytes(data))

    def writelines(self, chunks: Any) -> None:
        """Write each of ``chunks`` (held while held)."""
        for chunk in chunks:
            self.write(chunk)

    def close(self) -> None:
        """Send what is held, then close (the real transport sends its buffer first)."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Drop what is held and close at once."""
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
