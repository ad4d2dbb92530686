"""The shared manager cache and ManagedNodeGroup checks, on an in-memory manager."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import pytest

from adapters.cloud import CloudConfig, Node, NodeGroupSpec, NodeStatus
from adapters.cloud.managed import GroupManager, GroupState, ManagedNodeGroup
from base.errors import AdapterError, NotImplementedByProvider


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Counting(GroupManager):
    def __init__(self, target: int = 2, clock: Clock | None = None, **bounds: int) -> None:
        super().__init__(ttl_s=5.0, clock=clock or Clock())
        self.target = target
        self.bounds = bounds
        self.loads = 0
        self.deleted: list[str] = []
        self.during_load: list[object] = []

    def _load(self) -> GroupState:
        self.loads += 1
        for action in self.during_load:
            action()  # type: ignore[operator]
        nodes = tuple(Node(f"n{i}", NodeStatus.RUNNING) for i in range(self.target))
        return GroupState(
            self.target, nodes, self.bounds.get("cloud_min"), self.bounds.get("cloud_max")
        )

    def _write_target(self, target: int) -> None:
        self.target = target

    def _delete(self, ids: Sequence[str]) -> None:
        self.deleted += ids
        self.target -= len(ids)


class Group(ManagedNodeGroup):
    @classmethod
    def from_spec(cls, spec: NodeGroupSpec, config: CloudConfig) -> Self:
        raise NotImplementedError


def _group(manager: GroupManager, min_size: int = 0, max_size: int = 5) -> Group:
    return Group(NodeGroupSpec("p", "test", "r", "g", min_size, max_size), manager)


def test_reads_within_the_ttl_share_one_load() -> None:
    manager = Counting()
    group = _group(manager)
    group.target_size()
    group.nodes()
    assert manager.loads == 1


def test_a_read_after_the_ttl_loads_again() -> None:
    clock = Clock()
    manager = Counting(clock=clock)
    group = _group(manager)
    group.target_size()
    clock.now = 5.0
    group.target_size()
    assert manager.loads == 2


def test_a_write_forgets_the_cached_state() -> None:
    manager = Counting()
    group = _group(manager)
    group.target_size()
    group.increase_size(1)
    assert group.target_size() == 3


def test_a_load_that_overlapped_a_write_is_not_cached() -> None:
    manager = Counting()
    manager.during_load.append(manager.invalidate)  # a write lands while the load runs
    manager.state()
    manager.during_load.clear()
    manager.state()
    assert manager.loads == 2


def test_a_failed_write_still_forgets_the_cached_state() -> None:
    manager = Counting()

    def refuse(target: int) -> None:
        manager.target = 7  # the cloud changed anyway, then the call failed
        raise AdapterError("boom")

    manager._write_target = refuse  # type: ignore[method-assign]
    group = _group(manager, max_size=9)
    with pytest.raises(AdapterError):
        group.increase_size(1)
    assert group.target_size() == 7


def test_the_clouds_own_max_applies_when_stricter() -> None:
    group = _group(Counting(2, cloud_max=2), max_size=5)
    with pytest.raises(AdapterError, match="max size 2"):
        group.increase_size(1)


def test_the_clouds_own_min_applies_when_stricter() -> None:
    group = _group(Counting(2, cloud_min=2), min_size=0)
    with pytest.raises(AdapterError, match="min size 2"):
        group.delete_nodes(["n0"])


def test_a_repeated_id_is_deleted_once() -> None:
    manager = Counting(3)
    _group(manager).delete_nodes(["n1", "n1"])
    assert (manager.deleted, manager.target) == (["n1"], 2)


def test_decrease_target_size_is_optional_in_the_interface() -> None:
    from adapters.cloud import NodeGroup  # noqa: PLC0415

    class Minimal(NodeGroup):
        from_spec = id = min_size = max_size = None  # type: ignore[assignment]
        target_size = increase_size = delete_nodes = nodes = None  # type: ignore[assignment]

    with pytest.raises(NotImplementedByProvider):
        Minimal().decrease_target_size(1)
