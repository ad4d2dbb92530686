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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adapters.upstream.engine_metrics import EngineLoad
from router.compiled import CompiledPolicy
from router.policy import PoolSpec
from router.replica_choice import PoolTiming, ReplicaChooser, ReplicaRequest, ReplicaTable
from router.snapshot import PoolRow

__all__ = ["PoolReplicas", "Replica", "ReplicaPick", "ReplicaSet"]

# Request ejection backoff: base doubling per relapse, capped (seconds).
_EJECT_BASE_S = 5.0
_EJECT_MAX_S = 120.0


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
        return others > 0

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
            and replica.ejected_until <= now
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
            if replica.ejected_until > now:
                self._next_readmit = min(self._next_readmit, replica.ejected_until)
            elif replica.ejected_until:
                replica.ejected_until = 0.0
                self._set_available(i, now)


def pool_timing(policy: CompiledPolicy, pool: PoolSpec) -> PoolTiming:
    """One replica's latency envelope from the pool's goodput profile: a full batch
    decodes at about the model's default SLO TPOT (as ``router.snapshot`` assumes)."""
    spec = policy.policy.models[pool.model]
    goodput = pool.goodput
    full = max(goodput.tpot_ms, policy.slo[spec.default_slo].tpot_ms)
    return PoolTiming(
        slots=goodput.max_concurrency,
        prefill_ms_per_token=1000.0 / goodput.prefill_tokens_per_s,
        tpot_base_ms=goodput.tpot_ms,
        tpot_full_ms=full,
        mean_output_tokens=float(max(spec.expected_output_tokens, 1)),
    )


class ReplicaSet:
    """Every pool's replicas, aligned with one compiled policy (``pools[i]`` is the
    policy's pool ``i``). A pool's replicas are the base URLs its node group reports
    (``PoolRow.endpoints``, published by the autoscaler) when there are any, else the
    policy's static ``endpoints``. ``rebuild`` aligns with a reloaded policy and
    ``follow`` with a new snapshot, keeping what is known of replicas that stay."""

    def __init__(self, policy: CompiledPolicy) -> None:
        self.pools: list[PoolReplicas] = []
        self.by_id: dict[str, PoolReplicas] = {}
        self._policy = policy
        self._static: dict[str, tuple[str, ...]] = {}
        self.rebuild(policy)

    def rebuild(
        self, policy: CompiledPolicy, rows: Mapping[str, PoolRow] | None = None, now: float = 0.0
    ) -> None:
        """Align with ``policy`` (and the discovered and drained replicas in ``rows``;
        ``now`` in monotonic seconds)."""
        self._policy = policy
        self._static = {
            spec.id: tuple(str(e).rstrip("/") for e in spec.endpoints)
            for spec in policy.policy.pools
        }
        pools = [self._aligned(spec, rows) for spec in policy.policy.pools]
        self.pools = pools
        self.by_id = {p.pool_id: p for p in pools}
        if rows is not None:
            self._drain(rows, now)

    def follow(self, rows: Mapping[str, PoolRow], now: float = 0.0) -> None:
        """Take up the replicas a new snapshot reports: joined ones enter the choice,
        gone ones leave it (and the prefix index), drained ones take no new requests.
        Cheap when nothing changed. ``now``: monotonic seconds."""
        for spec, pool in zip(self._policy.policy.pools, self.pools, strict=True):
            row = rows.get(spec.id)
            wanted = row.endpoints if row is not None and row.endpoints else None
            if (wanted or self._static[spec.id]) != pool.table.ids:
                self.rebuild(self._policy, rows, now)
                return
        self._drain(rows, now)

    def _drain(self, rows: Mapping[str, PoolRow], now: float) -> None:
        for pool in self.pools:
            row = rows.get(pool.pool_id)
            pool.set_drained(row.drained if row is not None else frozenset(), now)

    def _aligned(self, spec: PoolSpec, rows: Mapping[str, PoolRow] | None) -> PoolReplicas:
        """The pool's replicas under the current settings. The same addresses keep their
        object; otherwise known replicas carry their facts (in-flight counts too, so
        releases still balance) and the chooser (prefix index, sessions) carries over."""
        policy = self._policy
        limit = policy.policy.health.replica_failures
        timing = pool_timing(policy, spec)
        affinity = policy.policy.models[spec.model].prefix_affinity
        row = rows.get(spec.id) if rows is not None else None
        old = self.by_id.get(spec.id)
        new = PoolReplicas(spec, timing, affinity, limit, row.endpoints if row is not None else ())
        if old is None:
            return new
        if old.table.ids == new.table.ids:
            old.timing, old.prefix_affinity, old.limit = timing, affinity, limit
            return old
        known = {r.address: (i, r) for i, r in enumerate(old.replicas)}
        for j, replica in enumerate(new.replicas):
            found = known.pop(replica.address, None)
            if found is not None:
                i, facts = found
                new.replicas[j] = facts
                new.inflight[j] = old.inflight[i]
                new.table.engine_queue[j] = old.table.engine_queue[i]
                new.table.available[j] = old.table.available[i]
        new.chooser = old.chooser
        for address in known:
            new.chooser.forget(address)
        return new

    def engine_load(self) -> list[float]:
        """Per pool (policy order), requests its engines report running or waiting."""
        return [p.engine_load() for p in self.pools]

    def unusable(self) -> list[int]:
        """Policy indices of pools with no usable replica (routed around like ejected)."""
        return [i for i, p in enumerate(self.pools) if not p.table.available.any()]


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
