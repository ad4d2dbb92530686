"""The GCP provider against the local Compute REST fake, beyond the shared contract."""

from __future__ import annotations

import re

import pytest

from adapters.cloud import NodeGroupSpec, NodeStatus, create
from base.errors import AdapterError
from tests.adapters.cloud.harness import GcpHarness


@pytest.mark.parametrize("harness", ["gcp-zonal", "gcp-regional"], indirect=True)
def test_writes_wait_on_their_operation_through_the_configured_endpoint(
    harness: GcpHarness,
) -> None:
    group = harness.group(1)
    waits_before = len(harness.fake.waited)
    group.increase_size(1)
    waited = harness.fake.waited[waits_before:]
    scope = "zones/us-central1-a" if harness.zone else "regions/us-central1"
    wait_paths = [r.path for r in harness.fake.server.requests if r.path.endswith("/wait")]
    assert len(waited) == 1
    assert (
        wait_paths[-1] == f"/compute/v1/projects/skyroute-test/{scope}/operations/{waited[0]}/wait"
    )


@pytest.mark.parametrize("harness", ["gcp-zonal"], indirect=True)
def test_node_ids_are_relative_instance_names(harness: GcpHarness) -> None:
    node = harness.group(1).nodes()[0]
    pattern = rf"projects/skyroute-test/zones/us-central1-a/instances/{harness.name}-[0-9a-f]+"
    assert re.fullmatch(pattern, node.id)


@pytest.mark.parametrize("harness", ["gcp-regional"], indirect=True)
def test_a_regional_group_deletes_nodes_in_any_of_its_zones(harness: GcpHarness) -> None:
    group = harness.group(3)
    by_zone = {n.id.split("/")[3]: n.id for n in group.nodes()}
    group.delete_nodes([by_zone["us-central1-b"]])
    assert sorted(n.id.split("/")[3] for n in group.nodes()) == ["us-central1-a", "us-central1-c"]


@pytest.mark.parametrize("harness", ["gcp-zonal"], indirect=True)
def test_every_page_of_managed_instances_is_read(harness: GcpHarness) -> None:
    group = harness.group(7)
    assert len(group.nodes()) == 7


@pytest.mark.parametrize("harness", ["gcp-zonal"], indirect=True)
def test_an_instance_the_zone_cannot_create_is_a_failed_node(harness: GcpHarness) -> None:
    group = harness.group(1)
    harness.fake.mig(harness.key).stockout_creates = True
    group.increase_size(1)
    failed = [n for n in group.nodes() if n.status is NodeStatus.FAILED]
    assert [n.error for n in failed] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]


@pytest.mark.parametrize("harness", ["gcp-zonal"], indirect=True)
def test_a_pool_without_a_project_is_refused(harness: GcpHarness) -> None:
    spec = NodeGroupSpec("gcp:us-central1:x", "gcp", "us-central1", "x", zone="us-central1-a")
    with pytest.raises(AdapterError, match=r"scaling\.project"):
        create(spec, harness.config)
