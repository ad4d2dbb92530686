"""Cache/manager layer of the GCP provider: one managed instance group, briefly cached."""

from __future__ import annotations

from collections.abc import Sequence

from google.cloud import compute_v1

from adapters.cloud.gcp.api import MigApi
from adapters.cloud.managed import GroupManager, GroupState
from adapters.cloud.nodegroup import Node, NodeStatus

__all__ = ["MigManager", "instance_ref", "node_id", "node_status"]

_DELETING = frozenset({"DELETING", "ABANDONING"})
_CREATING = frozenset(
    {"CREATING", "CREATING_WITHOUT_RETRIES", "RECREATING", "VERIFYING", "STARTING", "RESUMING"}
)
_BOOTING = frozenset({"PROVISIONING", "STAGING", "PENDING", "REPAIRING"})
_DOWN = frozenset({"STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED", "TERMINATED", "PENDING_STOP"})


def node_id(instance_url: str) -> str:
    """``projects/P/zones/Z/instances/NAME`` from an instance URL: stable across API hosts."""
    at = instance_url.find("projects/")
    return instance_url[at:] if at >= 0 else instance_url


def instance_ref(node: str) -> str:
    """The partial URL ``deleteInstances`` documents, ``zones/Z/instances/NAME``."""
    at = node.find("zones/")
    return node[at:] if at >= 0 else node


def node_status(instance: compute_v1.ManagedInstance) -> tuple[NodeStatus, str | None]:
    """Our status for a managed instance, and the code of its last failed attempt."""
    errors = list(instance.last_attempt.errors.errors)
    error = errors[0].code if errors else None
    action, status = instance.current_action, instance.instance_status
    if action in _DELETING:
        return NodeStatus.DELETING, None
    if action in _CREATING:
        # The group retries a failed create (e.g. a stockout) until it succeeds.
        return (NodeStatus.FAILED if error else NodeStatus.CREATING), error
    if status in _BOOTING:
        return NodeStatus.CREATING, None
    if status in _DOWN:
        return NodeStatus.FAILED, error
    return NodeStatus.RUNNING, None


class MigManager(GroupManager):
    """One MIG: ``targetSize`` and its managed instances."""

    def __init__(self, api: MigApi, ttl_s: float) -> None:
        super().__init__(ttl_s)
        self._api = api

    def _load(self) -> GroupState:
        """The target and the instances; running ones carry their internal IP (one
        ``instances.list`` per zone they are in)."""
        target = self._api.target_size()
        found = [(node_id(i.instance), *node_status(i)) for i in self._api.managed_instances()]
        running = [n for n, status, _ in found if status is NodeStatus.RUNNING]
        # node ids are projects/P/zones/Z/instances/NAME
        addresses = (
            self._api.instance_addresses(n.split("/")[3] for n in running) if running else {}
        )
        nodes = tuple(
            Node(
                n,
                status,
                error=error,
                address=addresses.get(n.rsplit("/", 1)[-1])
                if status is NodeStatus.RUNNING
                else None,
            )
            for n, status, error in found
        )
        return GroupState(target, nodes)

    def _write_target(self, target: int) -> None:
        self._api.resize(target)

    def _delete(self, ids: Sequence[str]) -> None:
        self._api.delete_instances([instance_ref(i) for i in ids])

    def close(self) -> None:
        self._api.close()
