"""The ``gcp`` provider: a pool's Compute Engine managed instance group.

``scaling.group`` names the MIG in ``scaling.project``. With ``scaling.zone`` it is a
zonal MIG in that zone, else a regional MIG in the pool's region. The target is the MIG's
``targetSize``; deletes use ``deleteInstances``, which lowers it by as many.
"""

from __future__ import annotations

from typing import Self

from adapters.cloud.config import CloudConfig, NodeGroupSpec
from adapters.cloud.gcp.api import MigApi, RegionalMigApi, ZonalMigApi
from adapters.cloud.gcp.manager import MigManager
from adapters.cloud.managed import ManagedNodeGroup

__all__ = ["MigNodeGroup"]


class MigNodeGroup(ManagedNodeGroup, provider="gcp"):
    """A zonal or regional managed instance group."""

    @classmethod
    def from_spec(cls, spec: NodeGroupSpec, config: CloudConfig) -> Self:
        project = spec.require("project")
        api: MigApi
        if spec.zone:
            api = ZonalMigApi(config.gcp, project, spec.zone, spec.group)
        else:
            api = RegionalMigApi(config.gcp, project, spec.region, spec.group)
        return cls(spec, MigManager(api, config.cache_ttl_s))
