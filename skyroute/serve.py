"""``skyroute serve``: run one gateway process with uvicorn (uvloop, httptools)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import uvicorn

from gateway.app import create_app
from gateway.settings import GatewaySettings
from skyroute.embedded_redis import EmbeddedRedis

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def redis_for(settings: GatewaySettings) -> Iterator[GatewaySettings]:
    """``settings`` with a Redis URL: the configured one, else an embedded server that
    lives as long as the context."""
    if settings.redis_url is not None:
        yield settings
        return
    with EmbeddedRedis() as embedded:
        logger.info("SKYROUTE_REDIS_URL unset: started embedded redis at %s", embedded.url)
        yield settings.model_copy(update={"redis_url": embedded.url})


def run_gateway(settings: GatewaySettings) -> None:
    """Serve the gateway until SIGINT/SIGTERM. Needs ``settings.redis_url``."""
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=30,
    )
    uvicorn.Server(config).run()
