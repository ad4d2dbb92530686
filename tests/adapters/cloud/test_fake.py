"""The fake provider's own features: callbacks, injected failures, held capacity."""

from __future__ import annotations

import pytest

from adapters.cloud import CloudConfig, NodeGroup, NodeGroupSpec, NodeStatus, create
from adapters.cloud.fake import FakeCloud, ScaleEvent
from base.errors import QuotaExceeded, Throttled


def _group(cloud: FakeCloud | None, size: int = 0) -> NodeGroup:
    if cloud is not None:
        cloud.add_group("g", size)
    spec = NodeGroupSpec("fake:x:g", "fake", "x", "g", 0, 5)
    return create(spec, CloudConfig(fake=cloud))


def test_scale_up_calls_back_with_the_new_node_ids() -> None:
    events: list[ScaleEvent] = []
    cloud = FakeCloud(on_scale_up=events.append)
    group = _group(cloud, 1)
    group.increase_size(2)
    assert events == [ScaleEvent("g", 1, 3, tuple(n.id for n in group.nodes()[1:]))]


def test_delete_calls_back_on_scale_down_with_the_deleted_ids() -> None:
    events: list[ScaleEvent] = []
    cloud = FakeCloud(on_scale_down=events.append)
    group = _group(cloud, 2)
    victim = group.nodes()[0].id
    group.delete_nodes([victim])
    assert events == [ScaleEvent("g", 2, 1, (victim,))]


def test_a_failure_injected_into_reads_fails_the_read() -> None:
    cloud = FakeCloud()
    group = _group(cloud, 1)
    cloud.fail_next("g", "throttle", op="read")
    with pytest.raises(Throttled):
        group.target_size()


def test_an_injected_failure_is_used_up_once() -> None:
    cloud = FakeCloud()
    group = _group(cloud, 1)
    cloud.fail_next("g", "quota")
    with pytest.raises(QuotaExceeded):
        group.increase_size(1)
    group.increase_size(1)
    assert group.target_size() == 2


def test_releasing_held_capacity_creates_the_missing_nodes() -> None:
    cloud = FakeCloud()
    group = _group(cloud, 1)
    cloud.hold("g")
    group.increase_size(2)
    cloud.hold("g", held=False)
    assert len(group.nodes()) == 3


def test_a_node_status_can_be_set_to_failed() -> None:
    cloud = FakeCloud()
    group = _group(cloud, 1)
    cloud.set_status("g", group.nodes()[0].id, NodeStatus.FAILED)
    assert group.nodes()[0].status is NodeStatus.FAILED


def test_without_a_cloud_in_the_config_a_fresh_one_starts_at_min_size() -> None:
    spec = NodeGroupSpec("fake:x:g", "fake", "x", "g", 2, 5)
    assert create(spec, CloudConfig()).target_size() == 2
