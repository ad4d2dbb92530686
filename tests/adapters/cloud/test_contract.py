"""The node-group contract, run against every provider (see harness.py).

aws: moto server; gcp-zonal / gcp-regional: the local Compute REST fake; azure: the local
HTTPS ARM fake; local: real simulated engines; fake: the in-memory cloud.
"""

from __future__ import annotations

import pytest

from adapters.cloud import NodeGroup, NodeStatus
from base.errors import AdapterError, OutOfCapacity, QuotaExceeded, Throttled
from tests.adapters.cloud.conftest import CAPABILITIES, PROVIDERS, providers_with
from tests.adapters.cloud.harness import Harness

EXPECTED = {"stockout": OutOfCapacity, "quota": QuotaExceeded, "throttle": Throttled}


def _pairs(kinds: tuple[str, ...]) -> list[object]:
    return [
        pytest.param(p, k, id=f"{p}-{k}") for p in PROVIDERS for k in kinds if k in CAPABILITIES[p]
    ]


def live_ids(group: NodeGroup) -> set[str]:
    return {n.id for n in group.nodes() if n.status is not NodeStatus.DELETING}


def test_target_size_is_the_clouds_current_size(harness: Harness) -> None:
    assert harness.group(2).target_size() == 2


def test_id_and_bounds_come_from_the_spec(harness: Harness) -> None:
    group = harness.group(1, min_size=1, max_size=3)
    assert group.id.endswith(harness.name)
    assert (group.min_size, group.max_size) == (1, 3)


def test_increase_size_raises_the_target_by_delta(harness: Harness) -> None:
    group = harness.group(1)
    group.increase_size(2)
    assert group.target_size() == 3


def test_increase_size_adds_nodes_and_keeps_the_old_ones(harness: Harness) -> None:
    group = harness.group(1)
    before = live_ids(group)
    group.increase_size(2)
    after = live_ids(group)
    assert before < after and len(after) == 3


def test_increase_size_up_to_max_is_allowed(harness: Harness) -> None:
    group = harness.group(2, max_size=4)
    group.increase_size(2)
    assert group.target_size() == 4


def test_increase_size_past_max_is_refused_with_a_plain_adapter_error(harness: Harness) -> None:
    group = harness.group(3, max_size=4)
    with pytest.raises(AdapterError, match="max size 4") as info:
        group.increase_size(2)
    assert info.type is AdapterError


def test_refused_increase_changes_nothing(harness: Harness) -> None:
    group = harness.group(3, max_size=4)
    with pytest.raises(AdapterError):
        group.increase_size(2)
    assert (group.target_size(), len(live_ids(group))) == (3, 3)


@pytest.mark.parametrize("method", ["increase_size", "decrease_target_size"])
@pytest.mark.parametrize("delta", [0, -1])
def test_non_positive_delta_is_a_value_error(harness: Harness, method: str, delta: int) -> None:
    group = harness.group(1)
    with pytest.raises(ValueError, match="positive"):
        getattr(group, method)(delta)


def test_decrease_target_size_never_deletes_existing_nodes(harness: Harness) -> None:
    group = harness.group(2)
    with pytest.raises(AdapterError, match="delete_nodes"):
        group.decrease_target_size(1)
    assert (group.target_size(), len(live_ids(group))) == (2, 2)


def test_decrease_target_size_below_min_is_refused(harness: Harness) -> None:
    group = harness.group(2, min_size=2)
    with pytest.raises(AdapterError, match="min size 2"):
        group.decrease_target_size(1)


@pytest.mark.parametrize("harness", providers_with("hold"), indirect=True)
def test_decrease_target_size_cancels_capacity_not_yet_created(harness: Harness) -> None:
    group = harness.group(1)
    harness.hold()
    group.increase_size(2)
    assert (group.target_size(), len(group.nodes())) == (3, 1)
    group.decrease_target_size(2)
    harness.release()
    assert (group.target_size(), len(group.nodes())) == (1, 1)


def test_delete_nodes_deletes_exactly_the_given_nodes(harness: Harness) -> None:
    group = harness.group(3)
    ids = sorted(live_ids(group))
    group.delete_nodes([ids[1]])
    assert live_ids(group) == {ids[0], ids[2]}


def test_delete_nodes_lowers_the_target_by_as_many(harness: Harness) -> None:
    group = harness.group(3)
    group.delete_nodes(sorted(live_ids(group))[:2])
    assert group.target_size() == 1


def test_delete_nodes_below_min_is_refused_and_deletes_nothing(harness: Harness) -> None:
    group = harness.group(2, min_size=2)
    ids = live_ids(group)
    with pytest.raises(AdapterError, match="min size 2"):
        group.delete_nodes([min(ids)])
    assert (group.target_size(), live_ids(group)) == (2, ids)


def test_delete_nodes_again_does_not_decrement_again(harness: Harness) -> None:
    group = harness.group(3)
    victim = min(live_ids(group))
    group.delete_nodes([victim])
    group.delete_nodes([victim])
    assert group.target_size() == 2


def test_delete_nodes_skips_ids_not_in_the_group(harness: Harness) -> None:
    group = harness.group(2)
    group.delete_nodes(["no-such-node"])
    assert (group.target_size(), len(live_ids(group))) == (2, 2)


def test_nodes_have_unique_ids_in_order(harness: Harness) -> None:
    ids = [n.id for n in harness.group(4).nodes()]
    assert ids == sorted(set(ids)) and len(ids) == 4


@pytest.mark.parametrize(("harness", "kind"), _pairs(("stockout", "quota", "throttle")),
                         indirect=["harness"])  # fmt: skip
def test_cloud_errors_are_classified(harness: Harness, kind: str) -> None:
    group = harness.group(1)
    harness.inject(kind)
    with pytest.raises(EXPECTED[kind]):
        group.increase_size(1)


@pytest.mark.parametrize(("harness", "kind"), _pairs(("quota", "throttle")), indirect=["harness"])
def test_refused_write_leaves_the_target_unchanged(harness: Harness, kind: str) -> None:
    group = harness.group(1)
    harness.inject(kind)
    with pytest.raises(AdapterError):
        group.increase_size(1)
    assert group.target_size() == 1


@pytest.mark.parametrize(("harness", "kind"), _pairs(("quota", "throttle")), indirect=["harness"])
def test_a_failed_delete_can_be_retried(harness: Harness, kind: str) -> None:
    group = harness.group(2)
    victim = min(live_ids(group))
    harness.inject(kind)
    with pytest.raises(AdapterError):
        group.delete_nodes([victim])
    group.delete_nodes([victim])
    assert (group.target_size(), victim in live_ids(group)) == (1, False)


def test_close_is_idempotent(harness: Harness) -> None:
    group = harness.group(1)
    group.close()
    group.close()


# The local provider's nodes carry their engines' URLs once ready (test_local.py).
@pytest.mark.parametrize("harness", ["aws", "gcp-zonal", "gcp-regional", "azure"], indirect=True)
def test_running_nodes_carry_distinct_addresses_the_engine_url_is_built_from(
    harness: Harness,
) -> None:
    # Four nodes: more than one page of every fake's listings (three per page).
    nodes = [n for n in harness.group(4).nodes() if n.status is NodeStatus.RUNNING]
    urls = [n.url(8000) for n in nodes]
    assert len(nodes) == 4 and None not in urls and len(set(urls)) == 4
    for node, url in zip(nodes, urls, strict=True):
        assert url == (
            node.address if "://" in (node.address or "") else f"http://{node.address}:8000"
        )
