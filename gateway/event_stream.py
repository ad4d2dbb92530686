"""The streaming answer of the relay: Starlette's ``StreamingResponse`` without its anyio
task group.

Under an ASGI server of spec version < 2.4 (uvicorn says 2.3), a ``StreamingResponse``
watches for the client leaving in an anyio task group: a task, a cancel scope and its
delivery machinery per response, about a tenth of the gateway's CPU per streamed
request. ``EventStreamResponse`` keeps the behaviour with one plain asyncio task: it
waits for ``http.disconnect`` and cancels the sending task at once, so the relay's
``finally`` runs (the upstream request is closed, the engine frees its slot, the usage
record says ``client_disconnected``) even while it waits for an engine that has gone
quiet. Like the unary path's watch (``gateway.fast_paths``), that task starts only once a
stream has run ``WATCH_AFTER_S``: most streams of a fast engine end before then, and a
timer is nearly free where a task, its cancellation and its callback are not. A client
gone earlier is seen when the watch starts.
"""

from __future__ import annotations

import asyncio

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["WATCH_AFTER_S", "EventStreamResponse"]

# A request still running after this long starts watching for its client's disconnect.
WATCH_AFTER_S = 0.05


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStreamResponse(StreamingResponse):
    """A ``StreamingResponse`` (same headers, bytes and ``body_iterator``) whose sender is
    cancelled when the client disconnects. Returns normally in that case, as Starlette's
    does; a cancellation from anywhere else (a shutdown) propagates."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sender = asyncio.current_task()
        if scope["type"] != "http" or sender is None:
            await super().__call__(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        streaming, left = True, False
        watchers: list[asyncio.Task[None]] = []

        def on_disconnect(task: asyncio.Future[None]) -> None:
            nonlocal left
            # Done callbacks run later on the loop: by then the stream may have ended
            # (the server also reports a disconnect once the response is complete).
            if streaming and not task.cancelled() and task.exception() is None:
                left = True
                sender.cancel()

        def watch() -> None:
            watcher = loop.create_task(_disconnected(receive))
            watcher.add_done_callback(on_disconnect)
            watchers.append(watcher)

        timer = loop.call_later(WATCH_AFTER_S, watch)
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not left or sender.uncancel() > 0:
                raise  # not (only) ours: a shutdown
            # The client left. Close the body now (the relay's ``finally``), not
            # whenever the garbage collector finalises the generator.
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            streaming = False
            timer.cancel()
            for watcher in watchers:
                watcher.cancel()
        if self.background is not None:
            await self.background()
