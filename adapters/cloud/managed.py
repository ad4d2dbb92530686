"""The shared middle of every provider: a cached view of one group, and the checks.

``GroupManager`` is a provider's cache/manager layer: it loads the group's state through
the provider's SDK wrapper, keeps it for ``ttl_s`` seconds and forgets it on every write.
``ManagedNodeGroup`` implements the ``NodeGroup`` contract once on top of a manager, so
the bounds, the "never delete by lowering the target" rule and the idempotent delete are
enforced the same way for every cloud, whatever the cloud itself would allow.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from adapters.cloud.config import NodeGroupSpec
from adapters.cloud.nodegroup import Node, NodeGroup, NodeStatus
from base.errors import AdapterError

__all__ = ["GroupManager", "GroupState", "ManagedNodeGroup"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GroupState:
    """One read of a group: its target, its replicas and the cloud's own bounds, if any."""

    target: int
    nodes: tuple[Node, ...]
    cloud_min: int | None = None
    cloud_max: int | None = None

    @property
    def existing(self) -> int:
        """Replicas the cloud has that are not on their way out."""
        return sum(1 for n in self.nodes if n.status is not NodeStatus.DELETING)


class GroupManager(ABC):
    """Caches one group's state for ``ttl_s`` seconds; every write invalidates it.

    Subclasses implement the three calls on their SDK wrapper. A load that was already
    running when a write happened is not cached, so a write is never hidden by it.
    """

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: GroupState | None = None
        self._loaded_at = 0.0
        self._generation = 0

    @abstractmethod
    def _load(self) -> GroupState:
        """Read the group from the cloud."""

    @abstractmethod
    def _write_target(self, target: int) -> None:
        """Ask the cloud to maintain ``target`` replicas."""

    @abstractmethod
    def _delete(self, ids: Sequence[str]) -> None:
        """Delete these replicas and lower the target by as many."""

    def close(self) -> None:  # noqa: B027 - optional, a no-op by default
        """Release the SDK wrapper's clients."""

    def state(self, *, fresh: bool = False) -> GroupState:
        """The group's state, from the cache unless ``fresh`` or older than the TTL."""
        with self._lock:
            cached, generation = self._cached, self._generation
            if not fresh and cached is not None and self._clock() - self._loaded_at < self._ttl_s:
                return cached
        state = self._load()
        with self._lock:
            if generation == self._generation:
                self._cached, self._loaded_at = state, self._clock()
        return state

    def invalidate(self) -> None:
        """Forget the cached state."""
        with self._lock:
            self._cached = None
            self._generation += 1

    def set_target(self, target: int) -> None:
        """Write the target, then forget the cache (also when the write failed)."""
        try:
            self._write_target(target)
        finally:
            self.invalidate()

    def delete(self, ids: Sequence[str]) -> None:
        """Delete replicas with decrement, then forget the cache (also on failure)."""
        try:
            self._delete(ids)
        finally:
            self.invalidate()


def _positive(delta: int) -> None:
    if delta <= 0:
        raise ValueError(f"delta must be positive, got {delta}")


class ManagedNodeGroup(NodeGroup):
    """``NodeGroup`` on top of a ``GroupManager``; providers subclass it and register.

    Writes are serialised per group and read the cloud afresh, so two threads cannot
    both pass the max-size check on the same stale target.
    """

    def __init__(self, spec: NodeGroupSpec, manager: GroupManager) -> None:
        self._spec = spec
        self._manager = manager
        self._write_lock = threading.Lock()

    @property
    def spec(self) -> NodeGroupSpec:
        """What this group was built from."""
        return self._spec

    @property
    def id(self) -> str:
        return self._spec.id

    @property
    def min_size(self) -> int:
        return self._spec.min_size

    @property
    def max_size(self) -> int:
        return self._spec.max_size

    def target_size(self) -> int:
        return self._manager.state().target

    def nodes(self) -> list[Node]:
        return sorted(self._manager.state().nodes, key=lambda n: n.id)

    def _bounds(self, state: GroupState) -> tuple[int, int]:
        low = max(self.min_size, state.cloud_min or 0)
        high = self.max_size if state.cloud_max is None else min(self.max_size, state.cloud_max)
        return low, high

    def increase_size(self, delta: int) -> None:
        _positive(delta)
        with self._write_lock:
            state = self._manager.state(fresh=True)
            high = self._bounds(state)[1]
            target = state.target + delta
            if target > high:
                raise AdapterError(
                    f"{self.id}: increasing by {delta} to {target} would pass max size {high}"
                )
            logger.info("pool %s: target %d -> %d (increase)", self.id, state.target, target)
            self._manager.set_target(target)

    def decrease_target_size(self, delta: int) -> None:
        _positive(delta)
        with self._write_lock:
            state = self._manager.state(fresh=True)
            low = self._bounds(state)[0]
            target = state.target - delta
            if target < low:
                raise AdapterError(
                    f"{self.id}: decreasing by {delta} to {target} would go below min size {low}"
                )
            if target < state.existing:
                raise AdapterError(
                    f"{self.id}: decreasing the target to {target} would delete some of the "
                    f"{state.existing} existing replicas; use delete_nodes"
                )
            logger.info("pool %s: target %d -> %d (decrease)", self.id, state.target, target)
            self._manager.set_target(target)

    def delete_nodes(self, ids: Sequence[str]) -> None:
        with self._write_lock:
            state = self._manager.state(fresh=True)
            live = {n.id for n in state.nodes if n.status is not NodeStatus.DELETING}
            doomed = [i for i in dict.fromkeys(ids) if i in live]
            skipped = [i for i in ids if i not in live]
            if skipped:
                logger.info("pool %s: not deleting %s (gone or already deleting)", self.id, skipped)
            if not doomed:
                return
            low = self._bounds(state)[0]
            if state.target - len(doomed) < low:
                raise AdapterError(
                    f"{self.id}: deleting {len(doomed)} replicas would take the target "
                    f"{state.target} below min size {low}"
                )
            logger.info("pool %s: deleting %s (target %d -> %d)", self.id, doomed,
                        state.target, state.target - len(doomed))  # fmt: skip
            self._manager.delete(doomed)

    def close(self) -> None:
        self._manager.close()
