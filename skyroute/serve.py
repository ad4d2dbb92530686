"""``skyroute serve``: run one gateway process with uvicorn (uvloop, httptools)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

from gateway.app import create_app
from gateway.context import Gateway
from gateway.settings import GatewaySettings
from skyroute.embedded_redis import redis_url_or_embedded
from skyroute.front_door import (
    FrontDoorLimits,
    FrontDoorStats,
    connection_cap,
    guarded_protocol,
    log_stats,
)
from skyroute.workers import reuse_port_requested, reuse_port_socket

logger = logging.getLogger(__name__)

# Streams still open this long before the graceful timeout get their error event, so
# that it reaches the client before uvicorn cancels what is left.
STREAM_CUT_MARGIN_S = 1.0
# Young-generation size between collections. CPython's default (700 container
# allocations) collects several times per request at this service's allocation rate;
# request garbage is freed by reference counting, so a larger young generation costs a
# little memory, not correctness.
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Make the garbage collector cheap for a long-running server; call once, after the
    app is built. Everything alive now (modules, the compiled policy, the app) moves to
    the permanent generation (``gc.freeze``), which no later collection walks: the
    full collections that walked it cost 0.25 s each, and all collections together
    about a fifth of the gateway's CPU under load. The collector is on afterwards.

    ``skyroute serve`` keeps the collector off until then: collecting while the 150,000
    objects that all stay alive were made cost a tenth of its start-up, and a last
    collection here would walk them all again (5 % of the start-up) to free about a
    thousand objects, which are frozen instead. Idempotent."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
    gc.enable()


@contextlib.contextmanager
def redis_for(settings: GatewaySettings) -> Iterator[GatewaySettings]:
    """``settings`` with a Redis URL: the configured one, else an embedded server that
    lives as long as the context."""
    with redis_url_or_embedded(settings.redis_url) as url:
        yield (
            settings
            if url == settings.redis_url
            else settings.model_copy(update={"redis_url": url})
        )


class GracefulServer(uvicorn.Server):
    """uvicorn, with the shutdown a load-balanced gateway needs.

    On SIGTERM: ``/readyz`` fails at once; ``drain_delay_s`` later uvicorn stops
    accepting connections and lets in-flight requests and streams finish (up to its
    graceful timeout); streams still running ``STREAM_CUT_MARGIN_S`` before that
    timeout end with an SSE error event (``gateway_shutdown``) rather than a cut
    connection; the lifespan then releases this replica's in-flight counts.

    ``listening`` is set once the socket accepts connections (the gateway's store opens
    then: ``StoreSync.not_before``).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        gateway: Gateway,
        drain_delay_s: float,
        door: FrontDoorStats | None = None,
    ) -> None:
        super().__init__(config)
        self.gateway = gateway
        self.drain_delay_s = drain_delay_s
        self.door = door
        self.listening = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        grace = self.config.timeout_graceful_shutdown
        cut: asyncio.TimerHandle | None = None
        if grace is not None and self.gateway.forwarder is not None:
            cut = asyncio.get_running_loop().call_later(
                max(grace - STREAM_CUT_MARGIN_S, 0.0), self._end_streams
            )
        try:
            await super().shutdown(sockets)
        finally:
            if cut is not None:
                cut.cancel()
            if self.door is not None:
                log_stats(self.door)

    def _end_streams(self) -> None:
        assert self.gateway.forwarder is not None
        ended = self.gateway.forwarder.end_streams()
        if ended:
            logger.warning("shutdown grace ends: %d stream(s) ended with an error event", ended)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM or self.gateway.draining:
            super().handle_exit(sig, frame)
            return
        self.gateway.draining = True
        logger.info("SIGTERM: not ready any more; stopping in %.1fs", self.drain_delay_s)
        # A timer thread, not the event loop: this runs inside a signal handler.
        timer = threading.Timer(self.drain_delay_s, super().handle_exit, args=(sig, frame))
        timer.daemon = True
        timer.start()


def run_gateway(settings: GatewaySettings) -> None:
    """Serve the gateway until SIGINT/SIGTERM (exit 0 after a graceful SIGTERM).
    Needs ``settings.redis_url``."""
    app = create_app(settings)
    tune_gc()
    limits = FrontDoorLimits(
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        max_connections=connection_cap(settings.max_connections),
    )
    door = FrontDoorStats()
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=guarded_protocol(limits, door),
        # No route speaks WebSocket: with "auto", uvicorn would import wsproto and h11 at
        # start (22 modules, 0.9 MB) to accept upgrades nothing here can serve. An
        # ``Upgrade: websocket`` request is answered as plain HTTP instead.
        ws="none",
        timeout_keep_alive=settings.keepalive_timeout_s,
        access_log=False,
        # Nothing reads the client's address (limits, logs and traces go by API key and
        # tenant), so uvicorn's X-Forwarded-For middleware would scan every request's
        # headers for nothing (about 1 % of the gateway's CPU).
        proxy_headers=False,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=settings.shutdown_timeout_s,
    )
    # uvicorn re-raises the signal it caught once it has shut down; a SIGTERM that has
    # been handled gracefully must then end the process with status 0, not 143.
    signal.signal(signal.SIGTERM, lambda *_: None)
    gateway: Gateway = app.state.gateway
    server = GracefulServer(config, gateway, settings.drain_delay_s, door)
    # The store opens once the gateway serves (gateway.store_sync); its modules stay
    # alive as long as the process, like those frozen above.
    gateway.store_sync.not_before = server.listening
    gateway.store_sync.on_loaded = gc.freeze
    if reuse_port_requested():
        # One of several workers on this port (``--workers``): the kernel spreads
        # connections across every socket bound with SO_REUSEPORT.
        server.run(sockets=[reuse_port_socket(settings.host, settings.port)])
    else:
        server.run()
