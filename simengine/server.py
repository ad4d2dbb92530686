"""OpenAI-compatible HTTP server of the simulated inference engine (a stand-in for vLLM).

Timing follows :mod:`simengine.perf_model`: a request queues FIFO for a batch slot;
its first token leaves ``prefill_ms`` after admission and each further token ``tpot_ms``
(at the batch's current occupancy) after the previous one. Every sleep is multiplied by
the engine's ``time_scale``; at 0 the engine never sleeps, so benchmarks measure pure
serving overhead. Request bodies are parsed with orjson and responses pre-serialised, with
no per-request validation models, to keep the server cheap at thousands of requests/s.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from dataclasses import dataclass

from aiohttp import web

from simengine.handlers import Handlers
from simengine.perf_model import get_profile
from simengine.state import SimEngine

__all__ = ["RunningEngine", "SimEngine", "build_app", "run_engine", "serve", "start_server"]

logger = logging.getLogger(__name__)

_SHUTDOWN_GRACE_S = 5.0


def build_app(engine: SimEngine) -> web.Application:
    """The aiohttp application serving ``engine``'s OpenAI-compatible and ``/sim`` routes.

    Every response carries ``x-sim-engine: <profile name>``. Shutting the app down releases
    requests hung by fault injection so a graceful stop does not wait on them.
    """
    handlers = Handlers(engine)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handlers.chat)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/v1/embeddings", handlers.embeddings)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_get("/sim/faults", handlers.get_faults)
    app.router.add_post("/sim/faults", handlers.post_faults)
    profile_name = engine.profile.name

    async def tag(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-sim-engine"] = profile_name

    async def release_hung(app: web.Application) -> None:
        engine.release_hung()

    app.on_response_prepare.append(tag)
    app.on_shutdown.append(release_hung)
    return app


@dataclass(frozen=True)
class RunningEngine:
    """A started engine server. ``url`` is the base URL, e.g. ``http://127.0.0.1:8001``."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        """Base URL without the ``/v1`` suffix."""
        return f"http://{self.host}:{self.port}"

    async def close(self) -> None:
        """Stop listening and finish in-flight requests (a few seconds' grace at most)."""
        await self.runner.cleanup()


async def start_server(
    engine: SimEngine, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None
) -> RunningEngine:
    """Start serving ``engine`` on ``host:port`` (0 picks a free port) in the running loop,
    or on ``sock``, a bound socket (``base.ports.reserve_port``), if given.

    Client disconnects cancel their handler, freeing the batch slot as vLLM aborts a request.
    """
    runner = web.AppRunner(
        build_app(engine),
        access_log=None,
        handler_cancellation=True,
        shutdown_timeout=_SHUTDOWN_GRACE_S,
    )
    await runner.setup()
    site: web.BaseSite
    if sock is None:
        site = web.TCPSite(runner, host, port, backlog=1024)
    else:
        host = str(sock.getsockname()[0])
        site = web.SockSite(runner, sock, backlog=1024)
    await site.start()
    bound_port = int(runner.addresses[0][1])
    return RunningEngine(runner, host, bound_port)


async def serve(
    host: str,
    port: int,
    engine: SimEngine,
    stop: asyncio.Event | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve ``engine`` until ``stop`` is set (forever if None, or until cancelled), on
    ``host:port`` or on the bound socket ``sock``."""
    running = await start_server(engine, host, port, sock)
    logger.info(
        "sim engine %s serving %s on %s (time_scale=%s)",
        engine.profile.name,
        engine.served_model,
        running.url,
        engine.time_scale,
    )
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await running.close()
        logger.info("sim engine on %s stopped", running.url)


def run_engine(
    host: str,
    port: int,
    profile: str,
    served_model: str,
    seed: int,
    time_scale: float,
    fd: int | None = None,
) -> None:
    """Blocking entry point: serve a simulated engine until SIGTERM or SIGINT, on
    ``host:port`` or, if ``fd`` is given, on that inherited bound socket.

    Uses uvloop when installed. Raises ``KeyError`` for an unknown ``profile`` and OSError
    if ``fd`` is not a socket.
    """
    engine_profile = get_profile(profile)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        engine = SimEngine(engine_profile, served_model, seed=seed, time_scale=time_scale)
        sock = None if fd is None else socket.socket(fileno=fd)
        await serve(host, port, engine, stop, sock)

    try:
        import uvloop  # noqa: PLC0415 - optional dependency
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
