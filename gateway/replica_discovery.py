"""Replicas from DNS: every pool with ``dns`` in the policy is resolved again every
``dns.interval_s``, in the background, and its replicas follow the answer
(``ReplicaSet.set_resolved``): new addresses join the choice at once, gone ones leave
it. A name that resolves to nothing hands the pool back to its static ``endpoints``;
a DNS server that does not answer changes nothing (the last answer stands).

dnspython is loaded (off the event loop) at the first resolution, so a policy without
DNS pools never loads it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from adapters.upstream.dns_query import DnsQuery
from base.errors import DiscoveryError
from gateway.lazy_modules import import_off_loop
from gateway.routing_state import RoutingState
from router.policy import DnsDiscovery

logger = logging.getLogger(__name__)

__all__ = ["DnsDiscoveryLoop"]

# How often the loop looks for due pools when no pool asks for a shorter interval (s).
_IDLE_S = 1.0

Resolve = Callable[[DnsQuery], Awaitable[list[str]]]


async def resolve_with_dnspython(query: DnsQuery) -> list[str]:
    """``adapters.upstream.dns.resolve_replicas``, its module (and dnspython, 2.4 MB of a
    worker's memory) loaded at the first call. Raises DiscoveryError like it."""
    await import_off_loop("adapters.upstream.dns")
    from adapters.upstream.dns import resolve_replicas  # noqa: PLC0415 - loaded just above

    return await resolve_replicas(query)


def dns_query(spec: DnsDiscovery) -> DnsQuery:
    """The adapter's query for a pool's ``dns`` settings."""
    return DnsQuery(spec.name, spec.record, spec.port, spec.scheme, spec.nameserver, spec.timeout_s)


class DnsDiscoveryLoop:
    """Resolves the DNS-discovered pools of one gateway process. ``resolve`` and
    ``monotonic`` are injectable seams (the real adapter and clock by default)."""

    def __init__(
        self,
        state: RoutingState,
        resolve: Resolve = resolve_with_dnspython,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.resolve = resolve
        self.monotonic = monotonic
        self._due: dict[str, float] = {}
        self._failing: set[str] = set()
        self.rounds = 0

    async def round(self) -> None:
        """Resolve every DNS pool that is due, concurrently, and apply the answers."""
        now = self.monotonic()
        due = [
            p
            for p in self.state.policy.policy.pools
            if p.dns is not None and self._due.get(p.id, 0.0) <= now
        ]
        answers = await asyncio.gather(
            *(self.resolve(dns_query(p.dns)) for p in due if p.dns is not None),
            return_exceptions=True,
        )
        now = self.monotonic()
        for pool, answer in zip(due, answers, strict=True):
            assert pool.dns is not None
            self._due[pool.id] = now + pool.dns.interval_s
            if isinstance(answer, DiscoveryError):
                if pool.id not in self._failing:
                    logger.warning("pool %s: DNS discovery failed, keeping its replicas: %s",
                                   pool.id, answer)  # fmt: skip
                self._failing.add(pool.id)
                continue
            if isinstance(answer, BaseException):
                raise answer
            self._failing.discard(pool.id)
            if self.state.replicas.set_resolved(pool.id, answer, now):
                logger.info("pool %s: replicas from DNS %s: %s", pool.id, pool.dns.name,
                            ", ".join(answer) or "none (static endpoints)")  # fmt: skip
        self.rounds += 1

    def _sleep_s(self) -> float:
        intervals = [p.dns.interval_s for p in self.state.policy.policy.pools if p.dns is not None]
        return min([_IDLE_S, *intervals])

    async def run(self) -> None:
        """Loop until cancelled. A policy without DNS pools costs a wake-up a second."""
        while True:
            try:
                await self.round()
            except Exception:
                logger.exception("DNS discovery round failed")
            await asyncio.sleep(self._sleep_s())
