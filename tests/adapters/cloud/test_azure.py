"""The Azure provider against the local HTTPS ARM fake, beyond the shared contract."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from azure.core.credentials import AccessToken

from adapters.cloud import CloudConfig, NodeGroupSpec, NodeStatus, create
from base.errors import AdapterError, OutOfCapacity
from tests.adapters.cloud.harness import AzureHarness

pytestmark = pytest.mark.parametrize("harness", ["azure"], indirect=True)


class WrongToken:
    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("not-the-token", int(time.time()) + 3600)


def _with(harness: AzureHarness, **changes: Any) -> CloudConfig:
    return dataclasses.replace(
        harness.config, azure=dataclasses.replace(harness.config.azure, **changes)
    )


def _spec(name: str) -> NodeGroupSpec:
    return NodeGroupSpec(
        f"azure:eastus:{name}", "azure", "eastus", name, 0, 8,
        resource_group="rg-gpu", subscription="sub-1",
    )  # fmt: skip


def test_an_update_is_polled_until_the_operation_finishes(harness: AzureHarness) -> None:
    group = harness.group(1)
    seen = len(harness.fake.server.requests)
    group.increase_size(1)
    polls = [r.path for r in harness.fake.server.requests[seen:] if r.path.startswith("/fake-op")]
    assert len(polls) == 2 and len(set(polls)) == 1


def test_a_rejected_token_is_an_adapter_error(harness: AzureHarness) -> None:
    harness.group(1)
    group = create(_spec(harness.name), _with(harness, credential=WrongToken()))
    with group, pytest.raises(AdapterError, match="401"):
        group.target_size()


def test_the_server_certificate_is_checked_against_the_given_ca(harness: AzureHarness) -> None:
    harness.group(1)
    group = create(_spec(harness.name), _with(harness, connection_verify=True))
    with group, pytest.raises(AdapterError, match=r"SSL|certificate"):
        group.target_size()


def test_a_failed_allocation_leaves_failed_vms(harness: AzureHarness) -> None:
    group = harness.group(1)
    harness.inject("stockout")
    with pytest.raises(OutOfCapacity):
        group.increase_size(2)
    assert sorted(n.status for n in group.nodes()) == ["failed", "failed", "running"]


def test_deleting_failed_vms_gives_their_capacity_back(harness: AzureHarness) -> None:
    group = harness.group(1)
    harness.inject("stockout")
    with pytest.raises(OutOfCapacity):
        group.increase_size(2)
    group.delete_nodes([n.id for n in group.nodes() if n.status is NodeStatus.FAILED])
    assert (group.target_size(), len(group.nodes())) == (1, 1)
