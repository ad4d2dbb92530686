"""The OpenAI POST routes, dispatched ahead of FastAPI's middleware stack.

Every request through ``FastAPI.__call__`` crosses six ASGI layers (server errors,
FastAPI's own telemetry and body limit, exception handlers, the exit stack, the router's
regex scan) before it reaches a handler. On the completions path that was about a tenth of
the gateway's CPU per request. These routes need none of it: they read and bound their own
body, take no dependencies, and map their errors through ``http_errors.to_response``, the
same single mapping every other route uses. Anything else (other methods on these paths,
every other path) goes through FastAPI unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from fastapi import FastAPI
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from base.errors import SkyrouteError
from gateway import http_errors
from gateway.event_stream import WATCH_AFTER_S

logger = logging.getLogger(__name__)


Handler = Callable[[Request], Awaitable[Response]]

# The scope key under which the server may offer a WriteCoalescer for the request's
# connection (``skyroute.front_door`` does).
COALESCE_KEY = "skyroute.coalesce"


class WriteCoalescer(Protocol):
    """Joins the writes of one response into one ``transport.write``.

    uvicorn writes a response's head and its body separately: two system calls and two
    TCP segments where one does, and on loopback each write also runs the receiver's
    side of the stack (about a tenth of the gateway's CPU per request went to them).
    """

    def hold(self) -> None:
        """Keep the connection's writes from now on until ``flush``."""

    def flush(self) -> None:
        """Write what was held, as one write, and stop holding. Idempotent."""


def endpoint(handler: Handler) -> ASGIApp:
    """An ASGI app for ``handler`` that answers every error in OpenAI's shape.

    A SkyrouteError raised before the response starts becomes its mapped response; any
    other exception is logged and becomes a 500. An error after the response has started
    (a broken stream) propagates to the server, which closes the connection: there is no
    way left to send a status.
    """

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body_read = asyncio.Event()
        gone = asyncio.Event()

        async def tracked_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body", False):
                body_read.set()
            return message

        request = Request(scope, tracked_receive, send)
        current = asyncio.current_task()
        loop = asyncio.get_running_loop()
        watcher: list[asyncio.Task[None]] = []

        def watch() -> None:
            watcher.append(loop.create_task(_watch_disconnect(receive, body_read, gone, current)))

        # Most answers are done before a watcher could matter; a timer is nearly free
        # where a task per request is not, so the watch starts only on slower ones.
        timer = loop.call_later(WATCH_AFTER_S, watch)
        try:
            response = await handler(request)
        except asyncio.CancelledError:
            if not gone.is_set():
                raise  # a shutdown, not the client
            _log_gone(request)
            return
        except ClientDisconnect:
            _log_gone(request)
            return
        except SkyrouteError as exc:
            response = http_errors.to_response(exc)
        except Exception:
            logger.exception("unhandled error")
            response = http_errors.error_response(500, "internal error", error_type="server_error")
        finally:
            timer.cancel()
            for task in watcher:
                task.cancel()
        coalesce: WriteCoalescer | None = scope.get(COALESCE_KEY)
        if coalesce is not None:
            # A whole answer is written in one stretch of this task (the server's send
            # awaits only when the socket's buffer is full, and held bytes never fill
            # it). A relayed stream starts with its first event already at hand: its
            # head waits for it up to the loop's next turn, later events go as they come.
            coalesce.hold()
            if isinstance(response, StreamingResponse):
                loop.call_soon(coalesce.flush)
        try:
            await response(scope, receive, send)
        finally:
            if coalesce is not None:
                coalesce.flush()

    return app


async def _watch_disconnect(
    receive: Receive, body_read: asyncio.Event, gone: asyncio.Event, task: asyncio.Task[Any] | None
) -> None:
    """Once the body is read, wait for the client to go away and cancel the request's
    task: its upstream attempt is closed (the engine stops generating) and it is never
    failed over. A streamed answer's relay watches for this itself once it starts."""
    await body_read.wait()
    message = await receive()
    if message["type"] == "http.disconnect" and task is not None:
        gone.set()
        task.cancel()


def _log_gone(request: Request) -> None:
    logger.info("client disconnected before the answer: %s %s", request.method, request.url.path)


class GatewayApp(FastAPI):
    """FastAPI with a table of exact ``(method, path)`` routes served before its stack.

    Register with ``add_fast_routes``; the routes should also be in ``app.routes`` so that
    a wrong method gets FastAPI's 405 and the OpenAPI document lists them.
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._fast: dict[tuple[str, str], ASGIApp] = {}

    def add_fast_routes(self, routes: Iterable[Route]) -> None:
        """Serve each route's methods on its exact path (no path parameters) fast."""
        for route in routes:
            for method in route.methods or ():
                if method != "HEAD":
                    self._fast[(method, route.path)] = endpoint(route.endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            app = self._fast.get((scope["method"], scope["path"]))
            if app is not None:
                scope["app"] = self
                await app(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
