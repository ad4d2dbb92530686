"""Cache/manager layer of the AWS provider: one Auto Scaling group's state, briefly cached."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.cloud.aws.api import AsgInstance, AutoScalingApi
from adapters.cloud.managed import GroupManager, GroupState
from adapters.cloud.nodegroup import Node, NodeStatus

__all__ = ["AsgManager", "node_status"]


def node_status(instance: AsgInstance) -> NodeStatus:
    """Our status for an ASG instance's lifecycle state and health."""
    state = instance.lifecycle_state
    if state.startswith(("Terminating", "Terminated", "Detach")):
        return NodeStatus.DELETING
    if instance.health_status == "Unhealthy":
        return NodeStatus.FAILED
    if state.startswith(("Pending", "Warmed")) or state == "Quarantined":
        return NodeStatus.CREATING
    return NodeStatus.RUNNING  # InService, and Standby which the operator chose


class AsgManager(GroupManager):
    """One ASG: desired capacity, instances with their private IPs, and the ASG's bounds."""

    def __init__(self, api: AutoScalingApi, group: str, ttl_s: float) -> None:
        super().__init__(ttl_s)
        self._api = api
        self._group = group

    def _load(self) -> GroupState:
        group = self._api.describe_group(self._group)
        ips = self._api.private_ips([i.id for i in group.instances])
        nodes = tuple(Node(i.id, node_status(i), ips.get(i.id)) for i in group.instances)
        return GroupState(group.desired_capacity, nodes, group.min_size, group.max_size)

    def _write_target(self, target: int) -> None:
        self._api.set_desired_capacity(self._group, target)

    def _delete(self, ids: Sequence[str]) -> None:
        # The API takes one instance per call; a failure part-way leaves the rest for a
        # retry, which skips the ones already terminating.
        for instance_id in ids:
            self._api.terminate_with_decrement(instance_id)

    def close(self) -> None:
        self._api.close()
