"""The ``fake`` provider: an in-memory cloud for the autoscaler's core tests.

``FakeCloud`` holds any number of groups. Scale-ups and scale-downs call back (and are
recorded in ``events``); ``fail_next`` makes the next calls raise a classified error, as
a stockout, quota or throttle would; ``hold`` keeps new replicas from appearing, as a
cloud does while it struggles to find capacity. It goes through the same
``ManagedNodeGroup`` checks as the real clouds, with no cache.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Self

from adapters.cloud.config import CloudConfig, NodeGroupSpec
from adapters.cloud.managed import GroupManager, GroupState, ManagedNodeGroup
from adapters.cloud.nodegroup import Node, NodeStatus
from base.errors import AdapterError, OutOfCapacity, QuotaExceeded, Throttled

__all__ = ["FailureKind", "FakeCloud", "FakeNodeGroup", "Operation", "ScaleEvent"]

FailureKind = Literal["stockout", "quota", "throttle", "error"]
Operation = Literal["read", "resize", "delete"]

_ERRORS: dict[FailureKind, type[AdapterError]] = {
    "stockout": OutOfCapacity,
    "quota": QuotaExceeded,
    "throttle": Throttled,
    "error": AdapterError,
}


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """A change the fake cloud applied: the target before and after, and the replicas
    created (scale-up) or deleted (scale-down)."""

    group: str
    before: int
    after: int
    node_ids: tuple[str, ...]


@dataclass
class _Group:
    target: int
    nodes: dict[str, NodeStatus] = field(default_factory=dict)
    held: bool = False


class FakeCloud:
    """An in-memory cloud of named groups; thread-safe.

    ``on_scale_up`` / ``on_scale_down`` are called, outside the cloud's lock, with a
    ``ScaleEvent`` after every applied change. New replicas start as ``new_status``
    (RUNNING by default).
    """

    def __init__(
        self,
        *,
        on_scale_up: Callable[[ScaleEvent], None] | None = None,
        on_scale_down: Callable[[ScaleEvent], None] | None = None,
        new_status: NodeStatus = NodeStatus.RUNNING,
    ) -> None:
        self.on_scale_up = on_scale_up
        self.on_scale_down = on_scale_down
        self.new_status = new_status
        self.events: list[ScaleEvent] = []
        self._groups: dict[str, _Group] = {}
        self._failures: list[tuple[str, Operation | None, FailureKind]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add_group(self, name: str, size: int = 0) -> None:
        """Create group ``name`` with ``size`` replicas unless it exists."""
        with self._lock:
            if name not in self._groups:
                self._groups[name] = group = _Group(target=size)
                self._fill(name, group)

    def fail_next(
        self, name: str, kind: FailureKind, op: Operation | None = None, times: int = 1
    ) -> None:
        """Make the next ``times`` calls of ``op`` on ``name`` raise; ``op`` None means
        any write (resize or delete), so the read before a write still succeeds."""
        with self._lock:
            self._failures += [(name, op, kind)] * times

    def hold(self, name: str, held: bool = True) -> None:
        """While held, a raised target creates no replicas; releasing fills the gap."""
        with self._lock:
            group = self._groups[name]
            group.held = held
            created = self._fill(name, group)
        self._notify(ScaleEvent(name, group.target, group.target, created))

    def set_status(self, name: str, node_id: str, status: NodeStatus) -> None:
        """Change one replica's status, e.g. to FAILED."""
        with self._lock:
            self._groups[name].nodes[node_id] = status

    def describe(self, name: str) -> GroupState:
        """The group as the cloud sees it."""
        with self._lock:
            self._maybe_fail(name, "read")
            group = self._groups[name]
            nodes = tuple(Node(i, s) for i, s in group.nodes.items())
            return GroupState(group.target, nodes)

    def resize(self, name: str, target: int) -> None:
        """Set the target; like a real cloud, shrinking drops the newest replicas."""
        with self._lock:
            self._maybe_fail(name, "resize")
            group = self._groups[name]
            before, group.target = group.target, target
            changed = self._fill(name, group)
            if len(group.nodes) > target:
                changed = tuple(list(group.nodes)[target:])
                for node_id in changed:
                    del group.nodes[node_id]
        self._notify(ScaleEvent(name, before, target, changed))

    def delete(self, name: str, ids: Sequence[str]) -> None:
        """Delete these replicas and lower the target by as many."""
        with self._lock:
            self._maybe_fail(name, "delete")
            group = self._groups[name]
            doomed = tuple(i for i in ids if i in group.nodes)
            for node_id in doomed:
                del group.nodes[node_id]
            before = group.target
            group.target -= len(doomed)
        self._notify(ScaleEvent(name, before, group.target, doomed))

    def _fill(self, name: str, group: _Group) -> tuple[str, ...]:
        if group.held:
            return ()
        new = tuple(f"{name}-{next(self._ids)}" for _ in range(group.target - len(group.nodes)))
        group.nodes.update(dict.fromkeys(new, self.new_status))
        return new

    def _maybe_fail(self, name: str, op: Operation) -> None:
        for n, (group, failing_op, kind) in enumerate(self._failures):
            if group == name and (failing_op == op or (failing_op is None and op != "read")):
                del self._failures[n]
                raise _ERRORS[kind](f"fake {op} of {name}: injected {kind}")

    def _notify(self, event: ScaleEvent) -> None:
        if event.before == event.after and not event.node_ids:
            return
        self.events.append(event)
        callback = self.on_scale_up if event.after >= event.before else self.on_scale_down
        if callback is not None:
            callback(event)


class _FakeManager(GroupManager):
    def __init__(self, cloud: FakeCloud, name: str) -> None:
        super().__init__(ttl_s=0.0)
        self._cloud = cloud
        self._name = name

    def _load(self) -> GroupState:
        return self._cloud.describe(self._name)

    def _write_target(self, target: int) -> None:
        self._cloud.resize(self._name, target)

    def _delete(self, ids: Sequence[str]) -> None:
        self._cloud.delete(self._name, ids)


class FakeNodeGroup(ManagedNodeGroup, provider="fake"):
    """A group in a ``FakeCloud``, created at ``min_size`` replicas if it is new."""

    def __init__(self, spec: NodeGroupSpec, cloud: FakeCloud) -> None:
        cloud.add_group(spec.group, spec.min_size)
        super().__init__(spec, _FakeManager(cloud, spec.group))
        self.cloud = cloud

    @classmethod
    def from_spec(cls, spec: NodeGroupSpec, config: CloudConfig) -> Self:
        return cls(spec, config.fake if config.fake is not None else FakeCloud())
