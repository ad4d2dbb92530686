"""The price-feed loop of a sidecar: only the holder of the ``prices`` lease fetches.

Every tick the process takes or renews the lease. The leader refreshes the feeds that
are due (``pricing.schedule``), keeps the lease renewed while a slow fetch runs, and
between refreshes re-publishes pool prices so stale flags appear on time. A follower
only waits for the lease; when it becomes leader it starts from the price table the
previous leader wrote. A changed policy file (``live.policy_file.PolicySource``) is
picked up at the next tick; an invalid one is refused and the running one stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from base.errors import TableError
from live.lease import Lease
from live.policy_file import PolicySource
from pricing.feed import Feed
from pricing.metrics import PriceMetrics
from pricing.refresh import Refresher, RefreshReport
from pricing.schedule import Schedule
from router.policy import Policy

logger = logging.getLogger(__name__)

LEASE_NAME = "prices"
_MAX_BACKOFF_S = 30.0


class PriceWatcher:
    """Runs the refresh schedule on whichever sidecar holds the lease.

    ``policies`` is the policy source to follow (None: the policy never changes);
    ``rebuild_feeds`` makes the feeds for a reloaded policy (the static file may move).
    """

    def __init__(
        self,
        refresher: Refresher,
        lease: Lease,
        schedule: Schedule,
        metrics: PriceMetrics,
        *,
        policies: PolicySource | None = None,
        rebuild_feeds: Callable[[Policy], dict[str, Feed]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.refresher = refresher
        self.lease = lease
        self.schedule = schedule
        self.metrics = metrics
        self.policies = policies
        self.rebuild_feeds = rebuild_feeds
        self.clock = clock
        self.renew_every_s = lease.ttl_ms / 3000.0
        self.leader = False
        self._pending: Policy | None = None
        if policies is not None:
            policies.subscribe(self._on_policy)

    async def tick(self) -> float:
        """One step: hold the lease, refresh what is due. Seconds until the next step.
        Raises TableError when Redis fails."""
        await self._maybe_reload()
        if not await self._hold_lease():
            return self.renew_every_s
        due = self.schedule.due(self.clock())
        if due:
            report = await self._refresh_renewing(due)
            if report.fenced_out:
                self._lost()
                return self.renew_every_s
            done = self.clock()
            for name in due:
                status = report.statuses.get(name)
                self.schedule.record(name, status is not None and status.state != "error", done)
        else:
            await self.refresher.publish_pools()
        return max(0.05, min(self.schedule.next_due_s() - self.clock(), self.renew_every_s))

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set, then give the lease up."""
        backoff = 1.0
        try:
            while not stop.is_set():
                try:
                    wait = await self.tick()
                    backoff = 1.0
                except TableError as exc:
                    logger.warning(
                        "price watch: redis failed, retrying in %.1f s: %s", backoff, exc
                    )
                    wait, backoff = backoff, min(backoff * 2, _MAX_BACKOFF_S)
                except Exception:
                    logger.exception("price watch: tick failed, retrying in %.1f s", backoff)
                    wait, backoff = backoff, min(backoff * 2, _MAX_BACKOFF_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait)
        finally:
            with contextlib.suppress(TableError):
                await self.lease.release()
            self.leader = False
            self.metrics.leader.set(0)

    async def _hold_lease(self) -> bool:
        if self.lease.token is not None and await self.lease.renew():
            return True
        token = await self.lease.acquire()
        if token is None:
            if self.leader:
                self._lost()
            return False
        if not self.leader:
            logger.info("took the price lease (fencing token %d); fetching prices", token)
            await self.refresher.load()
            self.leader = True
            self.metrics.leader.set(1)
        return True

    def _lost(self) -> None:
        logger.warning("lost the price lease; another sidecar fetches prices now")
        self.leader = False
        self.lease.token = None
        self.metrics.leader.set(0)

    async def _refresh_renewing(self, due: list[str]) -> RefreshReport:
        async def keep_renewing() -> None:
            while True:
                await asyncio.sleep(self.renew_every_s)
                if not await self.lease.renew():
                    return

        renewer = asyncio.create_task(keep_renewing())
        try:
            return await self.refresher.refresh(due, fence=self.lease.fence)
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, TableError):
                await renewer

    def _on_policy(self, policy: Policy) -> None:
        # Subscribers run synchronously; closing the old feeds waits for the next tick.
        self._pending = policy

    async def _maybe_reload(self) -> None:
        if self.policies is not None:
            await self.policies.poll_async()
        policy, self._pending = self._pending, None
        if policy is None:
            return
        self.refresher.policy = policy
        self.schedule.retune(policy.pricing.refresh_interval_s, policy.pricing.jitter)
        if self.rebuild_feeds is not None:
            old = self.refresher.feeds
            self.refresher.feeds = self.rebuild_feeds(policy)
            for feed in old.values():
                await feed.aclose()
        logger.info(
            "policy version %d applied to the price feeds",
            self.policies.version if self.policies else 0,
        )
