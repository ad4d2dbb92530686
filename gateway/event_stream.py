"""The streaming answer of the relay: Starlette's ``StreamingResponse`` without its anyio
task group.

Under an ASGI server of spec version < 2.4 (uvicorn says 2.3), a ``StreamingResponse``
watches for the client leaving in an anyio task group: a task, a cancel scope and its
delivery machinery per response, about a tenth of the gateway's CPU per streamed
request. ``EventStreamResponse`` keeps the behaviour with one plain asyncio task: it
waits for ``http.disconnect`` and cancels the sending task at once, so the relay's
``finally`` runs (the upstream request is closed, the engine frees its slot, the usage
record says ``client_disconnected``) even while it waits for an engine that has gone
quiet.
"""

from __future__ import annotations

import asyncio

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["EventStreamResponse"]


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
        watcher = asyncio.ensure_future(_disconnected(receive))
        streaming, left = True, False

        def on_disconnect(task: asyncio.Future[None]) -> None:
            nonlocal left
            # Done callbacks run later on the loop: by then the stream may have ended
            # (the server also reports a disconnect once the response is complete).
            if streaming and not task.cancelled() and task.exception() is None:
                left = True
                sender.cancel()

        watcher.add_done_callback(on_disconnect)
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
            watcher.cancel()
        if self.background is not None:
            await self.background()
