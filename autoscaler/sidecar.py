"""The autoscaler sidecar: observe, decide and, when leading, act, once per interval.

One runs next to every gateway replica; the Redis lease makes exactly one of them the
leader. Every sidecar can compute a plan (``--dry-run`` prints it); only the leader
applies it, saves the state (fenced by its lease) and writes each managed pool's
ready/target replicas to the live tables, so the gateways route on real capacity.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from adapters.cloud import CloudConfig, NodeGroup, NodeStatus, node_group_for
from autoscaler.actuate import Actuator
from autoscaler.config import ScalerConfig
from autoscaler.decide import decide
from autoscaler.demand import DemandHistory
from autoscaler.drain import Drainer
from autoscaler.fleet import PoolStatus
from autoscaler.goodput import GoodputObservation
from autoscaler.history import HistoryReader
from autoscaler.leader import Leadership
from autoscaler.plan import Plan
from autoscaler.report import ActuationReport, ActuatorLimits
from autoscaler.rollout_controller import TICK_S, RolloutController
from autoscaler.state import ScalerState
from base.errors import AdapterError
from live.demand_table import DemandTables
from live.lease import Lease
from live.redis_client import RedisClient
from live.rollout_table import RolloutTable
from live.tables import LiveTables
from router.policy import Policy
from router.snapshot import PoolRow
from store.rollouts import RolloutStore

__all__ = ["LEASE_NAME", "CycleResult", "Sidecar", "SidecarOptions"]

logger = logging.getLogger(__name__)

# The engine port of a pool without a scaling section (vLLM's default).
DEFAULT_ENGINE_PORT = 8000

LEASE_NAME = "autoscaler"


@dataclass(frozen=True)
class SidecarOptions:
    """How one sidecar runs (see ``AutoscalerSettings`` for the environment names)."""

    holder: str
    prefix: str = "sr:v1"
    interval_s: float = 60.0
    lease_ttl_ms: int = 15_000
    replica_ttl_ms: int = 3000
    demand_bucket_s: int = 60
    drain_settle_s: float = 1.0
    dry_run: bool = False


@dataclass(frozen=True)
class CycleResult:
    """One cycle: the plan, whether this sidecar led, and what acting did (if it did)."""

    plan: Plan
    leader: bool
    report: ActuationReport | None = None


class Sidecar:
    """Observes the fleet and demand through Redis and the clouds; acts when leading.

    Node groups are built once per pool; a pool whose group cannot be built (no
    scaling section, unknown provider) is left alone and planned as unmanaged.
    """

    def __init__(
        self,
        policy: Policy,
        redis: RedisClient,
        cloud: CloudConfig,
        config: ScalerConfig,
        options: SidecarOptions,
        clock: Callable[[], float] = time.time,
        rollout_store: RolloutStore | None = None,
    ) -> None:
        self.policy = policy
        self.config = config
        self.options = options
        self.clock = clock
        self.tables = LiveTables(redis, prefix=options.prefix)
        self.demand = DemandTables(redis, options.prefix, bucket_s=options.demand_bucket_s)
        self.history = HistoryReader(self.demand, config.history_s)
        lease = Lease(redis, LEASE_NAME, options.holder, options.lease_ttl_ms, options.prefix)
        self.leadership = Leadership(lease)
        self.cloud = cloud
        self.groups: dict[str, NodeGroup] = {}
        self._build_groups()
        self._acting_token: int | None = None
        self.drainer = Drainer(
            self.tables, policy.health, policy.routing.outlier,
            replica_ttl_ms=options.replica_ttl_ms, settle_s=options.drain_settle_s,
        )  # fmt: skip
        limits = ActuatorLimits(
            budget_usd_per_hour=config.budget_usd_per_hour,
            stockout_backoff_s=config.stockout_backoff_s,
            quota_backoff_s=config.quota_backoff_s,
            drain_deadline_s=policy.health.drain_deadline_s,
        )
        self.actuator = Actuator(self.groups, self.drainer, self.leadership.is_leader, limits)
        self._pending: Policy | None = None
        # Rollouts are moved by the leader too, on their own faster tick.
        self.rollouts = RolloutController(
            RolloutTable(redis, prefix=options.prefix), rollout_store,
            lambda: self.policy, self._endpoints, clock=clock,
        )  # fmt: skip

    async def _endpoints(self, model: str) -> dict[str, str]:
        """One live engine address per pool of ``model`` (the first its node group
        reported), for the rollouts' golden requests."""
        ids = [p.id for p in self.policy.pools if p.model == model]
        rows = await self.tables.read(
            ids, int(self.clock() * 1000), self.options.replica_ttl_ms, with_samples=False
        )
        return {pid: row.endpoints[0] for pid, row in rows.items() if row.endpoints}

    async def run_rollouts(self, stop: asyncio.Event) -> None:
        """Until ``stop``: while leading, look at every rollout each ``TICK_S``."""
        while not stop.is_set():
            if self.leadership.is_leader() and not self.options.dry_run:
                try:
                    await self.rollouts.tick()
                except Exception:
                    logger.exception("rollout tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=TICK_S)

    def on_policy(self, policy: Policy) -> None:
        """Take ``policy`` from the next cycle on (a ``PolicySource`` subscriber)."""
        self._pending = policy

    def _apply_pending_policy(self) -> None:
        policy, self._pending = self._pending, None
        if policy is None:
            return
        old_groups = {p.id: (p.provider, p.region, p.scaling) for p in self.policy.pools}
        self.policy = policy
        self.drainer.health, self.drainer.outlier = policy.health, policy.routing.outlier
        self.actuator.limits = replace(
            self.actuator.limits, drain_deadline_s=policy.health.drain_deadline_s
        )
        if {p.id: (p.provider, p.region, p.scaling) for p in policy.pools} != old_groups:
            self._build_groups()
        logger.info("autoscaler: policy reloaded (%d pools)", len(policy.pools))

    def _build_groups(self) -> None:
        """(Re)build every pool's node group, in place, with empty caches."""
        self.close()
        self.groups.clear()
        for pool in self.policy.pools:
            try:
                self.groups[pool.id] = node_group_for(pool, self.cloud)
            except AdapterError as exc:
                logger.info("pool %s is not managed: %s", pool.id, exc)

    def close(self) -> None:
        """Release every node group's clients. Idempotent."""
        for group in self.groups.values():
            group.close()

    # -- observing ----------------------------------------------------------------------
    async def _status(self, pool_id: str, row: PoolRow, initial: int) -> PoolStatus:
        fresh_s = self.policy.routing.measurement_ttl_s
        now = self.clock()

        def fresh(value: float, at_s: float) -> float:
            return value if at_s > 0 and now - at_s <= fresh_s else math.nan

        health = row.health
        group = self.groups.get(pool_id)
        nodes = None
        if group is not None:
            try:
                nodes = await asyncio.to_thread(group.nodes)
                target = await asyncio.to_thread(group.target_size)
            except AdapterError as exc:
                logger.warning("pool %s: cannot read its group, holding it: %s", pool_id, exc)
                nodes = None
        if nodes is None:
            target = int(row.target_replicas) if math.isfinite(row.target_replicas) else initial
            ready = int(row.ready_replicas) if math.isfinite(row.ready_replicas) else initial
            live: list[str] = []
            failed: list[str] = []
        else:
            ready = sum(1 for n in nodes if n.status is NodeStatus.RUNNING)
            live = [n.id for n in nodes if n.status is not NodeStatus.DELETING]
            failed = [n.id for n in nodes if n.status is NodeStatus.FAILED]
        observation = GoodputObservation(
            fresh(row.tpot_ewma_ms, row.tpot_at_s), fresh(row.ttft_ewma_ms, row.ttft_at_s),
            row.inflight, ready,
        )  # fmt: skip
        return PoolStatus(
            pool_id, target, ready, managed=nodes is not None, health=health.state,
            health_reason=health.reason, needs_replacement=health.needs_replacement,
            nodes=tuple(live), failed=tuple(failed), observation=observation,
        )  # fmt: skip

    async def observe(self) -> tuple[DemandHistory, list[PoolStatus], dict[str, float]]:
        """Demand history, every pool's status and price (USD/GPU-hour) now.
        Raises TableError when Redis fails."""
        now = self.clock()
        ids = [p.id for p in self.policy.pools]
        rows = await self.tables.read(
            ids, int(now * 1000), self.options.replica_ttl_ms, with_samples=False
        )
        statuses = [
            await self._status(p.id, rows[p.id], p.replicas.initial) for p in self.policy.pools
        ]
        prices = {
            p.id: p.price.usd_per_gpu_hour
            if p.price.usd_per_gpu_hour is not None
            else rows[p.id].usd_per_gpu_hour
            for p in self.policy.pools
        }
        return await self.history.read(now), statuses, prices

    # -- one cycle ----------------------------------------------------------------------
    async def cycle(self, act: bool) -> CycleResult:
        """Plan once; with ``act`` and while leading, apply the plan, save the state and
        publish replica counts. Raises TableError when Redis fails."""
        self._apply_pending_policy()
        acting = act and not self.options.dry_run and self.leadership.is_leader()
        fence = self.leadership.fence
        if acting and fence is not None and fence.token != self._acting_token:
            # Newly leading: what this sidecar cached as a standby may predate the last
            # leader's changes, and node-group writes are deltas. Start from fresh reads.
            self._build_groups()
            self._acting_token = fence.token
        state = ScalerState.from_json(await self.demand.load_state())
        if acting:
            state = await self.actuator.settle_replacements(state)
            for pool_id in self.groups:
                await self.drainer.recover(pool_id)
        history, statuses, prices = await self.observe()
        plan = decide(history, statuses, prices, self.policy, state, self.config)
        if not acting:
            return CycleResult(plan, self.leadership.is_leader())
        report = await self.actuator.apply(plan)
        fence = self.leadership.fence
        saved = report.state.model_copy(
            update={"holder": self.leadership.holder, "token": fence.token if fence else 0}
        )
        if fence is None or not await self.demand.save_state(saved.to_json(), fence):
            logger.warning("lost the lead during the cycle; state not saved")
            return CycleResult(plan, False, report)
        await self.publish_replicas()
        return CycleResult(plan, True, report)

    async def publish_replicas(self) -> None:
        """Write each managed pool's ready (running) and target replicas to the live
        tables, with the base URLs of the running ones (replica discovery: gateways send
        the pool's requests there). A group that cannot be read is skipped. Raises
        TableError."""
        ports = {p.id: p.scaling.engine_port for p in self.policy.pools if p.scaling}
        for pool_id, group in self.groups.items():
            try:
                nodes = await asyncio.to_thread(group.nodes)
                target = await asyncio.to_thread(group.target_size)
            except AdapterError as exc:
                logger.warning("pool %s: replicas not published: %s", pool_id, exc)
                continue
            running = [n for n in nodes if n.status is NodeStatus.RUNNING]
            port = ports.get(pool_id, DEFAULT_ENGINE_PORT)
            # Always written, so a replica that is gone leaves the list at once; an
            # empty list (no running replica, or a provider that reports no addresses)
            # leaves the policy's endpoints in force.
            urls = [url for n in running if (url := n.url(port)) is not None]
            await self.tables.set_replicas(pool_id, len(running), target, urls)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set: leadership in the background, a cycle every
        interval (acting only while leading), the lease released at the end."""
        leading = asyncio.create_task(self.leadership.run(stop))
        rollouts = asyncio.create_task(self.run_rollouts(stop))
        try:
            while not stop.is_set():
                # A standby leaves the clouds and Redis alone until it leads.
                if self.leadership.is_leader() or self.options.dry_run:
                    try:
                        result = await self.cycle(act=True)
                        if self.options.dry_run:
                            logger.info("plan (dry run):\n%s", result.plan.table())
                    except Exception:
                        logger.exception("autoscaler cycle failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.options.interval_s)
        finally:
            stop.set()
            await leading
            await rollouts
            await self.rollouts.close()
