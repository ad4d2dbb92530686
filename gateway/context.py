"""The per-process gateway context: every object a handler needs, built once.

Nothing here is global: ``build_gateway(settings)`` returns a fresh Gateway.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway.access import AccessControl
from gateway.auth import KeyRing
from gateway.health import HealthMonitor
from gateway.metrics import GatewayMetrics
from gateway.proxy import Forwarder
from gateway.routing_state import RoutingState
from gateway.settings import GatewaySettings
from gateway.store_sync import StoreSync
from gateway.sync import TableSync
from gateway.tracing import Tracing
from gateway.usage import UsageLog
from gateway.usage_journal import UsageJournal
from live.access_refill import AccessRefill
from live.access_table import AccessTables, UsageRecord
from live.demand_table import DemandRecord, DemandTables
from live.policy_file import PolicySource
from live.redis_client import connect
from live.rollout_table import RolloutTable
from live.tables import LiveTables
from router.compiled import compile_policy
from router.policy import Policy
from store.url import check_database_url, default_database_url


@dataclass
class Gateway:
    """Everything a request handler needs, built once per process."""

    settings: GatewaySettings
    state: RoutingState
    policies: PolicySource
    admin_keys: KeyRing
    metrics: GatewayMetrics
    tables: LiveTables
    sync: TableSync
    health: HealthMonitor
    access: AccessControl
    usage: UsageLog[UsageRecord]
    demand: UsageLog[DemandRecord]
    tracing: Tracing
    # The system of record, opened after the gateway is ready (``await store_sync.store()``).
    store_sync: StoreSync
    forwarder: Forwarder | None = None
    # Opened by the app's lifespan (gateway.usage_journal); None until then, or if the
    # directory cannot be used.
    journal: UsageJournal | None = None
    draining: bool = False


def build_gateway(settings: GatewaySettings, tracing: Tracing | None = None) -> Gateway:
    """Load the policy and build the in-process state. Raises PolicyError, or StoreError
    for a database URL the store does not support.

    ``tracing`` defaults to what the standard ``OTEL_*`` environment asks for (off).
    """
    policies = PolicySource(settings.policy)
    compiled = compile_policy(policies.policy)
    state = RoutingState(compiled)
    if settings.redis_url is None:
        raise ValueError(
            "SKYROUTE_REDIS_URL is required (the CLI starts an embedded Redis when unset)"
        )
    # Short socket timeouts: a dead Redis must fail a background read quickly, never
    # stall it; the request path does not wait on Redis at all.
    redis = connect(
        settings.redis_url, socket_timeout=0.5, socket_connect_timeout=0.5, health_check_interval=5
    )
    tables = LiveTables(redis, prefix=settings.redis_prefix)
    access_tables = AccessTables(redis, prefix=settings.redis_prefix)
    usage: UsageLog[UsageRecord] = UsageLog()
    demand: UsageLog[DemandRecord] = UsageLog()
    sync = TableSync(
        state,
        tables,
        access_tables,
        usage,
        DemandTables(redis, prefix=settings.redis_prefix, bucket_s=settings.demand_bucket_s),
        demand,
        settings.replica_id,
        refresh_interval_s=settings.snapshot_interval_ms / 1000,
        flush_interval_s=settings.flush_interval_ms / 1000,
        usage_interval_s=settings.usage_flush_interval_ms / 1000,
        replica_ttl_ms=settings.replica_ttl_ms,
        rollout_table=RolloutTable(redis, prefix=settings.redis_prefix),
    )
    bootstrap = settings.api_key.get_secret_value() if settings.api_key else None
    admin = [settings.admin_token.get_secret_value()] if settings.admin_token else []
    metrics = GatewayMetrics()
    access = AccessControl(access_tables, compiled.policy, bootstrap)
    background: set[asyncio.Task[None]] = set()

    def on_swap(policy: Policy) -> None:
        state.swap_policy(compile_policy(policy))
        # Reloads run inside the event loop (file watcher, admin API).
        task = asyncio.get_running_loop().create_task(access.on_policy(policy))
        background.add(task)
        task.add_done_callback(background.discard)

    policies.subscribe(on_swap)

    async def on_restored() -> None:
        # The refill wrote the admin-API tenants; the policy's limits and the bootstrap
        # key are this replica's to publish.
        await access.refresh()
        await access.publish()

    store_url = check_database_url(settings.database_url or default_database_url())
    store_sync = StoreSync(
        store_url,
        access_tables,
        settings.replica_id,
        on_restored,
        external=settings.store_worker == "external",
    )
    sync.on_recovery = store_sync.poke
    access.on_data_loss = store_sync.poke
    access.filled = AccessRefill(access_tables).filled
    access.lookup_key = store_sync.lookup_key
    return Gateway(
        settings=settings,
        state=state,
        policies=policies,
        admin_keys=KeyRing(admin),
        metrics=metrics,
        tables=tables,
        sync=sync,
        health=HealthMonitor(state, tables, metrics),
        access=access,
        usage=usage,
        demand=demand,
        tracing=tracing if tracing is not None else Tracing.from_env(),
        store_sync=store_sync,
    )
