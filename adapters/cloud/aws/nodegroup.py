"""The ``aws`` provider: a pool's EC2 Auto Scaling group.

``scaling.group`` names the ASG in the pool's region. The target is the ASG's desired
capacity; deletes use ``terminate_instance_in_auto_scaling_group`` with decrement. The
ASG's own MinSize/MaxSize apply on top of the policy's bounds.
"""

from __future__ import annotations

from typing import Self

from adapters.cloud.aws.api import AutoScalingApi
from adapters.cloud.aws.manager import AsgManager
from adapters.cloud.config import CloudConfig, NodeGroupSpec
from adapters.cloud.managed import ManagedNodeGroup

__all__ = ["AsgNodeGroup"]


class AsgNodeGroup(ManagedNodeGroup, provider="aws"):
    """An EC2 Auto Scaling group."""

    @classmethod
    def from_spec(cls, spec: NodeGroupSpec, config: CloudConfig) -> Self:
        api = AutoScalingApi(config.aws, spec.region)
        return cls(spec, AsgManager(api, spec.group, config.cache_ttl_s))
