"""The gateway ASGI application: wiring of state, background loops and routes.

``create_app(settings)`` builds everything from one settings object; nothing is global.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from prometheus_client import CONTENT_TYPE_LATEST

from adapters.upstream import UpstreamClient
from base.errors import TableError
from gateway import http_errors, openapi_schemas
from gateway.context import build_gateway
from gateway.dashboard import dashboard_router
from gateway.fast_paths import GatewayApp
from gateway.fleet_history import FleetHistory
from gateway.proxy import Forwarder
from gateway.replica_discovery import DnsDiscoveryLoop
from gateway.replica_scraper import ReplicaScraper
from gateway.routes_admin import admin_router
from gateway.routes_openai import openai_routes
from gateway.routes_ops import ops_router
from gateway.routes_replicas import replicas_router
from gateway.routes_rollouts import rollouts_router
from gateway.routes_tenants import tenants_router
from gateway.settings import GatewaySettings
from gateway.tracing import Tracing
from gateway.usage_journal import journal_dir, open_journal

logger = logging.getLogger(__name__)


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    # Cancel, and cancel again: on Python 3.11 asyncio.wait_for (inside redis-py) can
    # swallow a cancellation that lands as its inner call completes.
    pending = set(tasks)
    for _ in range(10):
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
        if not pending:
            return
    logger.error("background tasks did not stop: %s", [t.get_name() for t in pending])


def create_app(settings: GatewaySettings, tracing: Tracing | None = None) -> FastAPI:
    """The ASGI app for ``settings``. Background loops run for the app's lifespan.
    ``tracing`` overrides the ``OTEL_*`` environment (tests pass an in-memory one)."""
    gw = build_gateway(settings, tracing)
    history = FleetHistory()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            # Before serving: what a killed process of this replica (or of another
            # that shared the directory) served and did not flush goes out first.
            directory = journal_dir(settings.usage_journal_dir, settings.redis_prefix)
            gw.journal, replayed = open_journal(directory, settings.replica_id)
        except OSError as exc:
            logger.error("usage journal unavailable (%s); usage records kept in memory only",
                         exc)  # fmt: skip
        else:
            gw.usage.give_back(replayed)
            gw.usage.journal = gw.journal
        upstream = UpstreamClient()
        gw.forwarder = Forwarder(gw.state, upstream, gw.metrics, gw.usage, gw.demand)
        await gw.sync.first_refresh()
        with contextlib.suppress(TableError):
            await gw.access.publish()
        # The store opens in the background, once this replica serves (gateway.store_sync).
        tasks = [
            asyncio.create_task(gw.sync.refresh(), name="snapshot-refresh"),
            asyncio.create_task(gw.sync.flush(), name="table-flush"),
            asyncio.create_task(gw.sync.listen(gw.tables.redis), name="table-events"),
            asyncio.create_task(gw.policies.watch(settings.policy_poll_s), name="policy-watch"),
            asyncio.create_task(gw.health.events(), name="health-events"),
            asyncio.create_task(gw.access.refresh_loop(), name="tenant-refresh"),
            asyncio.create_task(gw.health.probes(upstream), name="health-probes"),
            asyncio.create_task(gw.health.confirm_ejections(upstream), name="health-confirm"),
            asyncio.create_task(ReplicaScraper(gw.state, upstream).run(), name="replica-scrape"),
            asyncio.create_task(DnsDiscoveryLoop(gw.state).run(), name="replica-dns"),
            asyncio.create_task(gw.store_sync.run(), name="store-sync"),
            asyncio.create_task(history.run(gw.state), name="fleet-history"),
        ]
        logger.info(
            "gateway replica %s up: %d pools, policy %s",
            settings.replica_id,
            gw.state.policy.size,
            settings.policy,
        )
        try:
            yield
        finally:
            gw.draining = True
            await gw.store_sync.stop()  # between steps: no store call is cut in half
            await _stop(tasks)
            # The last usage records and counters go out before the process does.
            with contextlib.suppress(TableError):
                await gw.sync.flush_once(final=True)
            if gw.journal is not None:
                gw.journal.close()  # deleted if empty, else replayed at the next start
            await gw.sync.release()
            await gw.store_sync.close()
            gw.tracing.shutdown()
            await upstream.close()
            await gw.tables.redis.aclose()

    app = GatewayApp(
        title="skyroute",
        version="0.1.0",
        summary="OpenAI-compatible gateway: the cheapest pool that meets the SLO.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.gateway = gw
    http_errors.install(app)
    routes = openai_routes(gw)
    app.router.routes.extend(routes)
    app.add_fast_routes(routes)
    app.include_router(admin_router(gw))
    app.include_router(replicas_router(gw))
    app.include_router(tenants_router(gw))
    app.include_router(rollouts_router(gw))
    app.include_router(ops_router(gw))
    app.include_router(dashboard_router(gw, history))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            openapi_schemas.document_errors(schema, prometheus_type=CONTENT_TYPE_LATEST)
            schema["paths"] = {**openapi_schemas.paths(), **schema.get("paths", {})}
            schema.setdefault("components", {})["securitySchemes"] = (
                openapi_schemas.security_schemes()
            )
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
