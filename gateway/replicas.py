"""The replicas of every pool as this gateway process sees them, and the choice among them.

Each endpoint of a pool is one replica. Per replica this keeps what the scraper last read
from its engine (``EngineLoad``), when, and how many scrapes or requests failed in a row;
the requests this process has in flight there; and what the admin API shows. The
arrays ``ReplicaChooser`` reads (``ReplicaTable``) are updated in place as those facts
change, so picking a replica on the request path costs one pure choice and no copying.

No I/O and no clock of its own: times (monotonic seconds) are passed in. The scrape loop
(``gateway.replica_scraper``) feeds ``on_scrape``; the forwarder calls ``pick``,
``acquire``/``release``, ``on_success``/``on_failure``.

A replica is *usable* unless ``replica_failures`` scrapes in a row failed (it is taken
back by the next scrape that succeeds) or as many requests in a row failed (it sits out
a backoff that doubles per relapse, then takes traffic again; one more failure sends it
back). Request failures never take out a pool's last usable replica: whether a whole
pool is down is the pool's outlier detector's call, shared with other gateways.

Request ejections are shared too: each goes to an outbox that the periodic flush
(``gateway.sync``) writes to Redis, and the ejections other gateways published come
back with each snapshot (``set_shared``), so one gateway's failed requests spare every
other gateway's. Shared ejections never take out a pool's last usable replica either.
Scrape failures are not shared: every gateway scrapes every replica itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adapters.upstream.engine_metrics import EngineLoad
from router.policy import PoolSpec
from router.replica_choice import PoolTiming, ReplicaChooser, ReplicaRequest, ReplicaTable

__all__ = ["PoolReplicas", "Replica", "ReplicaPick"]

# Request ejection backoff: base doubling per relapse, capped (seconds).
_EJECT_BASE_S = 5.0
_EJECT_MAX_S = 120.0
# Smoothing of the per-replica TTFT/TPOT shown to operators (as the pools' EWMAs).
_LATENCY_ALPHA = 0.2


@dataclass(slots=True)
class Replica:
    """One replica's facts. Times are monotonic seconds (0: never)."""

    address: str
    load: EngineLoad | None = None
    scraped_at: float = 0.0
    scrape_failures: int = 0
    request_failures: int = 0
    ejected_until: float = 0.0
    ejections: int = 0
    served: int = 0
    errors: int = 0
    last_error: str = ""
    # False after a scrape that got an answer with no engine metrics in it (404, not
    # Prometheus text): the replica is alive but its load is unknown.
    has_metrics: bool = True
    # An operator drained it (shared through the live tables): no new requests.
    drained: bool = False
    # Out until then because another gateway ejected it (monotonic s; 0: not).
    shared_until: float = 0.0
    shared_reason: str = ""
    # Recent TTFT and TPOT of its answers to this process (EWMA, ms; NaN: none yet).
    ttft_ms: float = math.nan
    tpot_ms: float = math.nan

    @property
    def out_until(self) -> float:
        """Until when request failures (here or elsewhere) keep it out (monotonic s)."""
        return max(self.ejected_until, self.shared_until)


@dataclass(frozen=True, slots=True)
class ReplicaPick:
    """Where one attempt goes: the pool's replicas, the replica's position, its base URL,
    and the request as the choice saw it (to ``record`` once it is served)."""

    pool: PoolReplicas
    index: int
    address: str
    request: ReplicaRequest | None

    def served(self) -> None:
        """The replica answered: ``PoolReplicas.on_success``."""
        self.pool.on_success(self)

    def observe(self, ttft_ms: float | None, tpot_ms: float | None) -> None:
        """The answer's measured TTFT and TPOT (ms; None: not measured)."""
        self.pool.observe(self.index, ttft_ms, tpot_ms)


class PoolReplicas:
    """One pool's replicas, the live table the choice reads, and the chooser itself."""

    def __init__(
        self,
        pool: PoolSpec,
        timing: PoolTiming,
        prefix_affinity: bool,
        limit: int,
        addresses: Sequence[str] = (),
    ) -> None:
        self.pool_id = pool.id
        # Failures in a row (scrapes, or requests) that take a replica out.
        self.limit = limit
        bases = addresses or [str(e).rstrip("/") for e in pool.endpoints]
        self.replicas = [Replica(base) for base in bases]
        self.timing = timing
        self.prefix_affinity = prefix_affinity
        n = len(self.replicas)
        self.table = ReplicaTable.build([r.address for r in self.replicas])
        self.inflight = self.table.inflight
        self.chooser = ReplicaChooser()
        # A pool of one replica needs no choice: the same pick every time.
        self._single = ReplicaPick(self, 0, self.replicas[0].address, None) if n == 1 else None
        self._next_readmit = math.inf
        # This process's request ejections not yet published: (address, until monotonic
        # s, reason). The flush takes them (``take_ejections``).
        self.outbox: list[tuple[str, float, str]] = []
        self._shared: Mapping[str, tuple[float, str]] = {}

    @property
    def usable(self) -> int:
        """How many replicas may take traffic."""
        return int(np.count_nonzero(self.table.available))

    def state_of(self, i: int, now: float) -> str:
        """``ready``, ``scrape_failing`` or ``ejected`` (request failures), for display."""
        replica = self.replicas[i]
        if replica.drained:
            return "drained"
        if bool(self.table.available[i]):
            return "ready"
        if replica.ejected_until > now:
            return "ejected"
        if replica.shared_until > now:
            return "ejected_elsewhere"
        return "scrape_failing"

    def pick(
        self, request: ReplicaRequest | None, now: float, exclude: Sequence[int] = ()
    ) -> ReplicaPick | None:
        """The replica for one attempt, or None if no usable replica is left (after
        leaving out ``exclude``, the replicas this request already failed on).

        ``request`` None: least predicted wait, no affinity."""
        if now >= self._next_readmit:
            self._readmit(now)
        if self._single is not None:
            return self._single if bool(self.table.available[0]) and not exclude else None
        table = self.table
        if exclude:
            avail = table.available.copy()
            avail[list(exclude)] = False
            table = ReplicaTable(table.ids, table.inflight, table.engine_queue, avail)
        if not table.available.any():
            return None
        req = request if request is not None else ReplicaRequest(0)
        choice = self.chooser.choose(req, table, self.timing, prefix_affinity=self.prefix_affinity)
        return ReplicaPick(self, choice.index, self.replicas[choice.index].address, request)

    def acquire(self, i: int) -> None:
        """One more request of this process in flight on replica ``i``."""
        self.inflight[i] += 1.0

    def release(self, i: int) -> None:
        """One fewer (never below zero)."""
        if self.inflight[i] > 0.0:
            self.inflight[i] -= 1.0

    def on_success(self, pick: ReplicaPick) -> None:
        """The replica served the request: count it, reset its failures, and teach the
        chooser (prefix index, session map) where the request went."""
        replica = self.replicas[pick.index]
        replica.served += 1
        replica.request_failures = 0
        if pick.request is not None and self._single is None:
            self.chooser.record(pick.request, replica.address, prefix_affinity=self.prefix_affinity)

    def on_failure(self, i: int, reason: str, now: float) -> bool:
        """A request failed on replica ``i``. After ``limit`` in a row the replica sits out
        a backoff, unless it is the pool's last usable one. Returns whether another usable
        replica remains (the pool can still serve without this one)."""
        replica = self.replicas[i]
        replica.errors += 1
        replica.request_failures += 1
        replica.last_error = reason
        was_usable = bool(self.table.available[i])
        others = self.usable - (1 if was_usable else 0)
        if was_usable and others > 0 and replica.request_failures >= self.limit:
            backoff = min(_EJECT_BASE_S * 2.0**replica.ejections, _EJECT_MAX_S)
            replica.ejections += 1
            replica.ejected_until = now + backoff
            # On probation afterwards: one more failure ejects it again, for longer.
            replica.request_failures = self.limit - 1
            self._next_readmit = min(self._next_readmit, replica.ejected_until)
            self._set_available(i, now)
            self.outbox.append((replica.address, replica.ejected_until, reason))
        return others > 0

    def observe(self, i: int, ttft_ms: float | None, tpot_ms: float | None) -> None:
        """Fold one answer's TTFT and TPOT (ms) into replica ``i``'s recent values."""
        replica = self.replicas[i]
        if ttft_ms is not None:
            old = replica.ttft_ms
            replica.ttft_ms = ttft_ms if math.isnan(old) else old + _LATENCY_ALPHA * (ttft_ms - old)
        if tpot_ms is not None:
            old = replica.tpot_ms
            replica.tpot_ms = tpot_ms if math.isnan(old) else old + _LATENCY_ALPHA * (tpot_ms - old)

    def set_shared(self, ejected: Mapping[str, tuple[float, str]], now: float, wall: float) -> None:
        """Apply the ejections every gateway published (base URL -> (until unix s,
        reason)); ``now`` monotonic and ``wall`` unix seconds, taken together. Ignored
        as a whole when they would leave the pool no usable replica. Cheap when
        nothing changed."""
        if not ejected and not self._shared:
            return
        self._shared = ejected
        usable_before = self.usable
        for i, replica in enumerate(self.replicas):
            found = ejected.get(replica.address)
            if found is not None and found[0] > wall:
                replica.shared_until, replica.shared_reason = now + (found[0] - wall), found[1]
                self._next_readmit = min(self._next_readmit, replica.shared_until)
            else:
                replica.shared_until, replica.shared_reason = 0.0, ""
            self._set_available(i, now)
        if usable_before and not self.usable:
            for i, replica in enumerate(self.replicas):
                replica.shared_until = 0.0
                self._set_available(i, now)

    def on_scrape(self, i: int, load: EngineLoad | None, error: str | None, now: float) -> None:
        """A scrape of replica ``i`` ended: ``load`` read (None with ``error`` None: it
        answered without engine metrics), or failed with ``error``."""
        replica = self.replicas[i]
        if error is None:
            replica.scrape_failures = 0
            replica.scraped_at = now
            replica.has_metrics = load is not None
            replica.load = load
            self.table.engine_queue[i] = (
                load.running + load.waiting if load is not None else math.nan
            )
        else:
            replica.scrape_failures = min(replica.scrape_failures + 1, self.limit)
            replica.last_error = error
            # A failed scrape says nothing of the queue now: fall back to in-flight.
            self.table.engine_queue[i] = math.nan
        self._set_available(i, now)

    def engine_load(self) -> float:
        """Requests the engines report running or waiting, summed over the usable
        replicas whose last scrape succeeded (0 when none reports)."""
        queue = self.table.engine_queue
        known = self.table.available & ~np.isnan(queue)
        return float(queue[known].sum()) if known.any() else 0.0

    def _set_available(self, i: int, now: float) -> None:
        replica = self.replicas[i]
        self.table.available[i] = (
            replica.scrape_failures < self.limit
            and replica.out_until <= now
            and not replica.drained
        )

    def set_drained(self, drained: frozenset[str], now: float) -> None:
        """Apply the operators' drains (base URLs) to this pool's replicas."""
        for i, replica in enumerate(self.replicas):
            flag = replica.address in drained
            if flag != replica.drained:
                replica.drained = flag
                self._set_available(i, now)

    def _readmit(self, now: float) -> None:
        """Backoffs that ended: those replicas take traffic again (if their scrapes do)."""
        self._next_readmit = math.inf
        for i, replica in enumerate(self.replicas):
            if replica.out_until > now:
                self._next_readmit = min(self._next_readmit, replica.out_until)
            elif replica.out_until:
                replica.ejected_until = replica.shared_until = 0.0
                self._set_available(i, now)


def prompt_text(payload: dict[str, object]) -> str:
    """The text a prompt's prefix is hashed over: chat messages as ``role`` and content
    in order (the engine's chat template is unknown, but it is a function of these),
    else ``prompt``. Anything else contributes nothing."""
    messages = payload.get("messages")
    if isinstance(messages, list):
        parts: list[str] = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            parts.append(str(message.get("role", "")))
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                for part in content:
                    text = part.get("text") if isinstance(part, dict) else part
                    if isinstance(text, str):
                        parts.append(text)
        return "\n".join(parts)
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    return ""
