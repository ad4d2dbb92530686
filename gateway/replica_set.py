"""Every pool's replicas for one gateway process, aligned with the running policy.

A pool's replicas come from, in order: DNS (pools with ``discovery.dns``: the addresses
``gateway.replica_discovery`` resolved last), its node group (the base URLs the
autoscaler publishes, ``PoolRow.endpoints``), else the policy's static ``endpoints``.
Replicas that stay keep what is known of them across changes; joined ones enter the
choice and gone ones leave it (and the prefix index).

Per snapshot the set also takes up the operators' drains and the replica ejections
other gateways published, and hands this process's own ejections to the flush.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.replicas import PoolReplicas
from live.replica_health import ReplicaEjection
from router.compiled import CompiledPolicy
from router.policy import PoolSpec
from router.replica_choice import PoolTiming
from router.snapshot import PoolRow

__all__ = ["ReplicaSet", "pool_timing"]


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
        # Base URLs resolved from DNS, by pool id (``set_resolved``).
        self._resolved: dict[str, tuple[str, ...]] = {}
        self._rows: Mapping[str, PoolRow] | None = None
        self.rebuild(policy)

    def rebuild(
        self, policy: CompiledPolicy, rows: Mapping[str, PoolRow] | None = None, now: float = 0.0
    ) -> None:
        """Align with ``policy`` (and the discovered and drained replicas in ``rows``;
        ``now`` in monotonic seconds)."""
        self._policy = policy
        if rows is not None:
            self._rows = rows
        dns = {spec.id for spec in policy.policy.pools if spec.dns is not None}
        self._resolved = {k: v for k, v in self._resolved.items() if k in dns}
        self._static = {
            spec.id: tuple(str(e).rstrip("/") for e in spec.endpoints)
            for spec in policy.policy.pools
        }
        pools = [self._aligned(spec, rows) for spec in policy.policy.pools]
        self.pools = pools
        self.by_id = {p.pool_id: p for p in pools}
        if rows is not None:
            self._drain(rows, now)

    def follow(
        self, rows: Mapping[str, PoolRow], now: float = 0.0, wall: float | None = None
    ) -> None:
        """Take up the replicas a new snapshot reports: joined ones enter the choice,
        gone ones leave it (and the prefix index), drained ones take no new requests,
        and (given ``wall``, unix seconds taken with ``now``) replicas other gateways
        ejected sit out. Cheap when nothing changed. ``now``: monotonic seconds."""
        self._rows = rows
        for spec, pool in zip(self._policy.policy.pools, self.pools, strict=True):
            if self._wanted(spec, rows) != pool.table.ids:
                self.rebuild(self._policy, rows, now)
                break
        else:
            self._drain(rows, now)
        if wall is not None:
            for pool in self.pools:
                row = rows.get(pool.pool_id)
                pool.set_shared(row.ejected if row is not None else {}, now, wall)

    def set_resolved(self, pool_id: str, addresses: Sequence[str], now: float) -> bool:
        """The base URLs DNS returned for ``pool_id`` now (monotonic ``now``); empty
        falls back to the node group's or the policy's. Returns whether the pool's
        replicas changed."""
        wanted = tuple(sorted(dict.fromkeys(a.rstrip("/") for a in addresses)))
        if self._resolved.get(pool_id, ()) == wanted:
            return False
        if wanted:
            self._resolved[pool_id] = wanted
        else:
            self._resolved.pop(pool_id, None)
        self.rebuild(self._policy, self._rows, now)
        return True

    def take_ejections(self, now: float, wall: float) -> list[ReplicaEjection]:
        """This process's request ejections since the last call, to publish (``now``
        monotonic and ``wall`` unix seconds, taken together)."""
        out: list[ReplicaEjection] = []
        for pool in self.pools:
            for address, until, reason in pool.outbox:
                if until > now:
                    out.append(ReplicaEjection(pool.pool_id, address, wall + until - now, reason))
            pool.outbox.clear()
        return out

    def give_back(self, ejections: Sequence[ReplicaEjection], now: float, wall: float) -> None:
        """Ejections a failed flush did not write: they go out with the next one."""
        for e in ejections:
            pool = self.by_id.get(e.pool_id)
            if pool is not None:
                pool.outbox.append((e.address, now + e.until_s - wall, e.reason))

    def _wanted(self, spec: PoolSpec, rows: Mapping[str, PoolRow] | None) -> tuple[str, ...]:
        resolved = self._resolved.get(spec.id)
        if resolved:
            return resolved
        row = rows.get(spec.id) if rows is not None else None
        if row is not None and row.endpoints:
            return row.endpoints
        return self._static[spec.id]

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
        old = self.by_id.get(spec.id)
        new = PoolReplicas(spec, timing, affinity, limit, self._wanted(spec, rows))
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
        new.outbox = old.outbox
        for address in known:
            new.chooser.forget(address)
        return new

    def engine_load(self) -> list[float]:
        """Per pool (policy order), requests its engines report running or waiting."""
        return [p.engine_load() for p in self.pools]

    def unusable(self) -> list[int]:
        """Policy indices of pools with no usable replica (routed around like ejected)."""
        return [i for i, p in enumerate(self.pools) if not p.table.available.any()]
