"""Cache/manager layer of the Azure provider: one VM scale set, briefly cached."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from adapters.cloud.azure.api import ScaleSetApi
from adapters.cloud.managed import GroupManager, GroupState
from adapters.cloud.nodegroup import Node, NodeStatus

__all__ = ["ScaleSetManager", "node_status"]

_BY_STATE = MappingProxyType(
    {
        "creating": NodeStatus.CREATING,
        "succeeded": NodeStatus.RUNNING,
        "updating": NodeStatus.RUNNING,
        "migrating": NodeStatus.RUNNING,
        "deleting": NodeStatus.DELETING,
        "failed": NodeStatus.FAILED,
        "canceled": NodeStatus.FAILED,
    }
)


def node_status(provisioning_state: str) -> NodeStatus:
    """Our status for a scale-set VM's provisioning state (unknown states: creating)."""
    return _BY_STATE.get(provisioning_state.lower(), NodeStatus.CREATING)


class ScaleSetManager(GroupManager):
    """One VMSS: ``sku.capacity`` and its VMs."""

    def __init__(self, api: ScaleSetApi, ttl_s: float) -> None:
        super().__init__(ttl_s)
        self._api = api

    def _load(self) -> GroupState:
        """The capacity and the VMs; running ones carry their primary private IP."""
        capacity = self._api.capacity()
        found = [(vm.instance_id, node_status(vm.provisioning_state)) for vm in self._api.vms()]
        running = any(status is NodeStatus.RUNNING for _, status in found)
        addresses = self._api.private_addresses() if running else {}
        nodes = tuple(
            Node(i, status, address=addresses.get(i) if status is NodeStatus.RUNNING else None)
            for i, status in found
        )
        return GroupState(capacity, nodes)

    def _write_target(self, target: int) -> None:
        self._api.set_capacity(target)

    def _delete(self, ids: Sequence[str]) -> None:
        self._api.delete_instances(list(ids))

    def close(self) -> None:
        self._api.close()
