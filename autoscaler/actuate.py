"""Applies a plan through the node groups of ``adapters.cloud``; only the leader calls it.

Order: replacements, then scale-ups (fast API calls), then scale-downs in parallel
(each drains its pool first, so they may wait). Cloud errors are classified:

- ``OutOfCapacity`` (stockout): the pool is blocked from growing for a while and the
  capacity is asked from the plan's next cheapest pool serving the same regions;
- ``QuotaExceeded``: the same, with a longer block;
- ``Throttled``: the provider is left alone for a growing backoff, and retried later;
- any other ``AdapterError``: logged, retried next cycle.

Nothing passes a pool's max size or the budget, whatever the cloud would allow.
Applying the same plan twice is harmless: every step re-reads the group first.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping

from adapters.cloud import Node, NodeGroup, NodeStatus
from autoscaler.drain import Drainer
from autoscaler.plan import Plan, PoolChange
from autoscaler.report import ActuationReport, ActuatorLimits, Outcome
from autoscaler.state import ScalerState
from base.errors import (
    AdapterError,
    NotImplementedByProvider,
    OutOfCapacity,
    QuotaExceeded,
    Throttled,
)

__all__ = ["DEFAULT_LIMITS", "ActuationReport", "Actuator", "ActuatorLimits", "Outcome"]

DEFAULT_LIMITS = ActuatorLimits()

logger = logging.getLogger(__name__)


def _price(change: PoolChange) -> float:
    """USD/hour of one replica, 0 if unknown."""
    price = change.usd_per_replica_hour
    return price if math.isfinite(price) and price > 0 else 0.0


_VICTIM_ORDER = {NodeStatus.FAILED: 0, NodeStatus.CREATING: 1, NodeStatus.RUNNING: 2}


class Actuator:
    """Applies plans to ``groups`` (pool id -> node group). ``still_leader`` is asked
    before every cloud write; once it says no, nothing more is done."""

    def __init__(
        self,
        groups: Mapping[str, NodeGroup],
        drainer: Drainer,
        still_leader: Callable[[], bool],
        limits: ActuatorLimits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.groups = groups
        self.drainer = drainer
        self.still_leader = still_leader
        self.limits = limits
        self.clock = clock
        self._throttle_s: dict[str, float] = {}
        self._spend = 0.0  # USD/hour of the fleet as this apply() left it so far

    async def apply(self, plan: Plan) -> ActuationReport:
        """Apply ``plan``; returns the outcomes and the updated state. Raises TableError
        only if Redis fails while a pool is being drained."""
        report = ActuationReport(plan.state)
        # The plan's own targets fit the budget; what a fallback adds must fit what is left.
        self._spend = plan.usd_per_hour_after
        for change in plan.actionable:
            if change.replace:
                await self._replace(change, report)
        tried: set[str] = set()
        for change in plan.actionable:
            if change.delta > 0:
                await self._grow(plan, change, change.delta, "up", report, tried)
        shrinking = [c for c in plan.actionable if c.delta < 0]
        await asyncio.gather(*(self._shrink(c, -c.delta, report) for c in shrinking))
        return report

    # -- growing ------------------------------------------------------------------------
    def _afford(self, change: PoolChange, n: int, planned: bool) -> int:
        """How many of ``n`` new replicas the budget allows (planned ones are counted
        in the plan's spend already)."""
        budget = self.limits.budget_usd_per_hour
        price = _price(change)
        if budget is None or price <= 0:
            return n
        if planned:
            return n if self._spend <= budget + 1e-9 else 0
        return max(min(n, math.floor((budget - self._spend) / price + 1e-9)), 0)

    def _throttled(self, provider: str, report: ActuationReport) -> bool:
        return report.state.throttled_until_s.get(provider, 0.0) > self.clock()

    async def _grow(
        self,
        plan: Plan,
        change: PoolChange,
        n: int,
        action: str,
        report: ActuationReport,
        tried: set[str],
    ) -> int:
        """Add up to ``n`` replicas to ``change``'s pool, falling back on a stockout or
        quota; returns how many were added there and at fallbacks."""
        tried.add(change.pool_id)
        group = self.groups.get(change.pool_id)
        if group is None:
            return 0
        provider = group.provider
        if self._throttled(provider, report):
            report.outcomes.append(Outcome(change.pool_id, action, n, 0, "throttled"))
            return 0
        if not self.still_leader():
            report.outcomes.append(Outcome(change.pool_id, action, n, 0, "not-leader"))
            return 0
        planned, k = action == "up", 0
        try:
            room = group.max_size - await asyncio.to_thread(group.target_size)
            k = min(n, room, self._afford(change, n, planned))
            if planned:
                self._spend -= (n - k) * _price(change)  # what will not be bought
            if k <= 0:
                report.outcomes.append(Outcome(change.pool_id, action, n, 0, "budget"))
                return 0
            await asyncio.to_thread(group.increase_size, k)
        except (OutOfCapacity, QuotaExceeded) as exc:
            kind = "stockout" if isinstance(exc, OutOfCapacity) else "quota"
            self._block(report, change.pool_id, kind)
            if planned:
                self._spend -= k * _price(change)
            logger.warning("pool %s: %s (%s); trying the plan's next cheapest pool",
                           change.pool_id, kind, exc)  # fmt: skip
            report.outcomes.append(Outcome(change.pool_id, action, n, 0, kind))
            return await self._fallback(plan, change, n, report, tried)
        except Throttled as exc:
            self._backoff(report, provider)
            logger.warning("provider %s throttled us: %s", provider, exc)
            report.outcomes.append(Outcome(change.pool_id, action, n, 0, "throttled"))
            return 0
        except AdapterError as exc:
            logger.error("pool %s: scale-up failed: %s", change.pool_id, exc)
            report.outcomes.append(Outcome(change.pool_id, action, n, 0, "error"))
            return 0
        if not planned:
            self._spend += k * _price(change)
        self._throttle_s.pop(provider, None)
        logger.info("pool %s: +%d replicas (%s)", change.pool_id, k, change.reason)
        report.outcomes.append(Outcome(change.pool_id, action, n, k))
        return k

    async def _fallback(
        self, plan: Plan, change: PoolChange, n: int, report: ActuationReport, tried: set[str]
    ) -> int:
        missing = n * change.goodput_tokens_per_s
        added = 0
        for pool_id in change.fallbacks:
            if missing <= 0 or pool_id in tried:
                continue
            alt = plan.change(pool_id)
            if alt.goodput_tokens_per_s <= 0 or not alt.managed:
                continue
            want = math.ceil(missing / alt.goodput_tokens_per_s - 1e-9)
            got = await self._grow(plan, alt, want, "fallback", report, tried)
            missing -= got * alt.goodput_tokens_per_s
            added += got
        return added

    def _block(self, report: ActuationReport, pool_id: str, kind: str) -> None:
        backoff = (
            self.limits.stockout_backoff_s if kind == "stockout" else self.limits.quota_backoff_s
        )
        st = report.state
        report.state = st.model_copy(update={
            "blocked_until_s": {**st.blocked_until_s, pool_id: self.clock() + backoff},
            "blocked_reason": {**st.blocked_reason, pool_id: kind},
        })  # fmt: skip

    def _backoff(self, report: ActuationReport, provider: str) -> None:
        previous = self._throttle_s.get(provider, self.limits.throttle_backoff_s / 2)
        delay = min(previous * 2, self.limits.max_throttle_backoff_s)
        self._throttle_s[provider] = delay
        st = report.state
        until = {**st.throttled_until_s, provider: self.clock() + delay}
        report.state = st.model_copy(update={"throttled_until_s": until})

    # -- shrinking ----------------------------------------------------------------------
    async def _shrink(self, change: PoolChange, n: int, report: ActuationReport) -> int:
        """Remove ``n`` replicas: first cancel ones not created yet, then drain the pool
        and delete the chosen nodes (failed, then creating, then running)."""
        group = self.groups[change.pool_id]
        if self._throttled(group.provider, report):
            report.outcomes.append(Outcome(change.pool_id, "down", n, 0, "throttled"))
            return 0
        if not self.still_leader():
            report.outcomes.append(Outcome(change.pool_id, "down", n, 0, "not-leader"))
            return 0
        try:
            nodes = await asyncio.to_thread(group.nodes)
            live = [x for x in nodes if x.status is not NodeStatus.DELETING]
            target = await asyncio.to_thread(group.target_size)
            n = min(n, target - group.min_size)
            cancel = min(n, max(target - len(live), 0))
            if cancel > 0:
                try:
                    await asyncio.to_thread(group.decrease_target_size, cancel)
                except NotImplementedByProvider:
                    cancel = 0
            # Failed first, then not yet serving, then the newest running ones.
            newest_first = sorted(live, key=lambda x: x.id, reverse=True)
            victims = sorted(newest_first, key=lambda x: _VICTIM_ORDER.get(x.status, 3))
            removed = cancel + await self._delete(change.pool_id, group, victims[: n - cancel])
        except Throttled:
            self._backoff(report, group.provider)
            report.outcomes.append(Outcome(change.pool_id, "down", n, 0, "throttled"))
            return 0
        except AdapterError as exc:
            logger.error("pool %s: scale-down failed: %s", change.pool_id, exc)
            report.outcomes.append(Outcome(change.pool_id, "down", n, 0, "error"))
            return 0
        report.outcomes.append(Outcome(change.pool_id, "down", n, removed))
        return removed

    async def _delete(self, pool_id: str, group: NodeGroup, victims: list[Node]) -> int:
        """Drain the pool (if any victim may be serving), then delete exactly
        ``victims``; the pool's health record is put back either way."""
        if not victims:
            return 0
        drained = None
        if any(v.status is NodeStatus.RUNNING for v in victims):
            drained = await self.drainer.drain(
                pool_id, f"removing {len(victims)} replica(s)",
                self.limits.drain_deadline_s, self.still_leader,
            )  # fmt: skip
        try:
            if (drained is not None and drained.aborted) or not self.still_leader():
                return 0
            await asyncio.to_thread(group.delete_nodes, [v.id for v in victims])
            logger.info("pool %s: deleted %s", pool_id, [v.id for v in victims])
        finally:
            if drained is not None:
                await self.drainer.restore(pool_id, drained.before)
        return len(victims)

    # -- replacing ----------------------------------------------------------------------
    async def _replace(self, change: PoolChange, report: ActuationReport) -> None:
        """Delete the bad nodes and ask for as many new ones (new ones first when the
        min size would not allow the delete)."""
        group = self.groups[change.pool_id]
        try:
            nodes = {x.id: x for x in await asyncio.to_thread(group.nodes)}
            bad = [nodes[i] for i in change.replace if i in nodes]
            if not bad or not self.still_leader():
                return
            target = await asyncio.to_thread(group.target_size)
            # A pool that is out of capacity only sheds its failed nodes.
            renew = 0 if report.state.blocked(change.pool_id, self.clock()) else len(bad)
            surge = renew > 0 and target - len(bad) < group.min_size
            if surge:
                await asyncio.to_thread(group.increase_size, renew)
            deleted = await self._delete(change.pool_id, group, bad)
            if renew and not surge and deleted:
                await asyncio.to_thread(group.increase_size, renew)
        except AdapterError as exc:
            logger.error("pool %s: replacing %d node(s) failed: %s",
                         change.pool_id, len(change.replace), exc)  # fmt: skip
            report.outcomes.append(
                Outcome(change.pool_id, "replace", len(change.replace), 0, "error")
            )
            return
        st = report.state
        replacing = {**st.replacing, change.pool_id: [x.id for x in bad]}
        report.state = st.model_copy(update={"replacing": replacing})
        report.outcomes.append(Outcome(change.pool_id, "replace", len(bad), len(bad)))

    async def settle_replacements(self, state: ScalerState) -> ScalerState:
        """Close replacements whose old nodes are gone and whose new ones all run: the
        pool's needs-replacement flag is cleared (it is readmitted with a ramp)."""
        replacing = dict(state.replacing)
        for pool_id, old in state.replacing.items():
            group = self.groups.get(pool_id)
            if group is None:
                replacing.pop(pool_id)
                continue
            nodes = await asyncio.to_thread(group.nodes)
            ids = {x.id for x in nodes}
            settled = not ids & set(old) and all(x.status is NodeStatus.RUNNING for x in nodes)
            if settled and nodes and self.still_leader():
                await self.drainer.readmit(pool_id, f"{len(old)} instance(s) replaced")
                replacing.pop(pool_id)
        return state.model_copy(update={"replacing": replacing})
