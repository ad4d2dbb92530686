"""Cloud control planes behind one node-group interface (after cluster-autoscaler).

Core code uses only this package's top level: ``node_group_for(pool, config)`` returns
the ``NodeGroup`` of a policy pool from the provider registered under the pool's provider
name (``aws``, ``gcp``, ``azure``, ``local``, ``fake``). Importing it loads no cloud SDK;
each provider's subpackage is imported on first use.
"""

from adapters.cloud.config import (
    AwsSettings,
    AzureSettings,
    CloudConfig,
    GcpSettings,
    LocalSettings,
    NodeGroupSpec,
    PoolLike,
)
from adapters.cloud.nodegroup import Node, NodeGroup, NodeStatus
from adapters.cloud.registry import create, node_group_for, provider_names

__all__ = [
    "AwsSettings",
    "AzureSettings",
    "CloudConfig",
    "GcpSettings",
    "LocalSettings",
    "Node",
    "NodeGroup",
    "NodeGroupSpec",
    "NodeStatus",
    "PoolLike",
    "create",
    "node_group_for",
    "provider_names",
]
