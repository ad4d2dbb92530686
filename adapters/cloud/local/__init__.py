"""Simulated engines on this machine. Importing this registers the ``local`` provider."""

from adapters.cloud.local.nodegroup import LocalNodeGroup

__all__ = ["LocalNodeGroup"]
