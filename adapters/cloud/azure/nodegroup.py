"""The ``azure`` provider: a pool's virtual machine scale set.

``scaling.group`` names the VMSS in ``scaling.resource_group`` of
``scaling.subscription``. The target is the scale set's ``sku.capacity``; deletes use
``delete_instances``, which lowers it by as many. A failed allocation may leave the raised
capacity in place with FAILED VMs, as Azure does; delete those to give it back.
"""

from __future__ import annotations

from typing import Self

from adapters.cloud.azure.api import ScaleSetApi
from adapters.cloud.azure.manager import ScaleSetManager
from adapters.cloud.config import CloudConfig, NodeGroupSpec
from adapters.cloud.managed import ManagedNodeGroup

__all__ = ["ScaleSetNodeGroup"]


class ScaleSetNodeGroup(ManagedNodeGroup, provider="azure"):
    """An Azure VM scale set."""

    @classmethod
    def from_spec(cls, spec: NodeGroupSpec, config: CloudConfig) -> Self:
        api = ScaleSetApi(
            config.azure,
            spec.require("subscription"),
            spec.require("resource_group"),
            spec.group,
        )
        return cls(spec, ScaleSetManager(api, config.cache_ttl_s))
